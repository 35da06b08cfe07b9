// shmbus — what the C API's files share (c_api.cpp, c_api_inspect.cpp):
// the handles behind shmbus.h's opaque types, the thread's last error, and
// the helpers that turn exceptions into statuses and C++ values into C
// ones. Private to the library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "shmbus/shmbus.h"
#include "shmbus/shmbus.hpp"

struct shmbus_bus {
  shmbus::Bus bus;
};

struct shmbus_producer {
  shmbus::Producer producer;
  std::uint32_t max_message;
  bool closed = false;
};

struct shmbus_consumer {
  shmbus::Consumer consumer;
  std::vector<shmbus::Message> batch;  // read_batch scratch, reused
};

struct shmbus_wait_set {
  explicit shmbus_wait_set(const shmbus::WaitOptions& w) : set(w) {}
  shmbus::WaitSet set;
  // The C handle of each member, by its C++ consumer (at most 127: a scan).
  std::vector<std::pair<shmbus::Consumer*, shmbus_consumer*>> handles;
};

namespace shmbus::c_api {

// A NUL-terminated copy of `from`, cut to fit.
template <std::size_t N>
void copy_name(char (&to)[N], const std::string& from) noexcept {
  std::memcpy(to, from.data(), std::min(from.size(), N - 1));
  to[std::min(from.size(), N - 1)] = '\0';
}

// A new[]-allocated NUL-terminated copy of `from`.
inline const char* c_string(const std::string& from) {
  auto out = std::make_unique<char[]>(from.size() + 1);
  std::memcpy(out.get(), from.c_str(), from.size() + 1);
  return out.release();
}

// A new[]-allocated C array of zeroed views, each filled from the matching
// element of `from` (nullptr when there are none); `count` gets its length.
template <class CView, class View, class Fill>
CView* c_array(const std::vector<View>& from, std::size_t& count, Fill fill) {
  count = from.size();
  if (from.empty()) return nullptr;
  auto out = std::make_unique<CView[]>(from.size());
  for (std::size_t i = 0; i < from.size(); ++i) {
    std::memset(&out[i], 0, sizeof out[i]);
    fill(from[i], out[i]);
  }
  return out.release();
}

// Why the last call of this thread failed (shmbus_last_error()).
inline thread_local std::string last_error;

inline shmbus_status fail(shmbus_status s, std::string message) noexcept {
  try {
    last_error = std::move(message);
  } catch (...) {
    last_error.clear();  // out of memory: the status still says what happened
  }
  return s;
}

inline shmbus_status invalid(const char* function, const char* what) noexcept {
  return fail(SHMBUS_INVALID_ARGUMENT, std::string(function) + ": " + what);
}

// Runs `f` (returning shmbus_status) with every exception turned into a status.
template <class F>
shmbus_status guard(const char* function, F&& f) noexcept {
  try {
    return f();
  } catch (const shmbus::Error& e) {
    return fail(static_cast<shmbus_status>(static_cast<int>(e.errc())), e.what());
  } catch (const std::bad_alloc&) {
    return fail(SHMBUS_OUT_OF_MEMORY, std::string(function) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(SHMBUS_INTERNAL, std::string(function) + ": " + e.what());
  } catch (...) {
    return fail(SHMBUS_INTERNAL, std::string(function) + ": unknown exception");
  }
}

inline void fill_info(const shmbus::BusInfo& i, shmbus_bus_info& out) noexcept {
  std::memset(&out, 0, sizeof out);
  const std::size_t n = std::min(i.name.size(), sizeof out.name - 1);
  std::memcpy(out.name, i.name.data(), n);
  out.policy = static_cast<std::uint32_t>(i.policy);
  out.capacity = i.capacity;
  out.record_size = i.record_size;
  out.max_payload = i.max_payload;
  out.max_message = i.max_message;
  out.max_readers = i.max_readers;
  out.layout_version = i.layout_version;
  out.segment_size = i.segment_size;
  out.creation_time_ns = i.creation_time_ns;
}

}  // namespace shmbus::c_api
