// Helpers shared by the unit tests: unique bus names, automatic removal, and a
// raw read-write mapping of a segment for byte-level tests.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <shmbus/shmbus.hpp>

#include "layout.hpp"

namespace shmbus::test {

// A bus name no other test process uses (ctest -j runs tests in parallel).
inline std::string unique_name(std::string_view tag) {
  static std::atomic<int> counter{0};
  return "ut-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Owns a bus name: removes the segment when the test ends, however it ends.
class ScopedName {
 public:
  explicit ScopedName(std::string_view tag) : name_(unique_name(tag)) {}
  ~ScopedName() {
    try {
      shmbus::Bus::remove(name_);
    } catch (...) {
    }
    ::unlink(path().c_str());  // also covers files faked by a test
  }
  ScopedName(const ScopedName&) = delete;
  ScopedName& operator=(const ScopedName&) = delete;
  const std::string& str() const { return name_; }
  operator std::string_view() const { return name_; }  // NOLINT: used as a bus name
  std::string path() const { return "/dev/shm/shmbus." + name_; }

 private:
  std::string name_;
};

inline std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

inline std::string text(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// A small `block` bus with room for a few readers.
inline BusOptions small_block(std::uint64_t capacity) {
  BusOptions o;
  o.capacity = capacity;
  o.policy = Policy::block;
  o.max_readers = 4;
  return o;
}

inline std::uint64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

// The segment file mapped read-write, to look at or fake bytes at the offsets
// documented in layout.hpp. Maps the file as it is now (its real size).
class RawSegment {
 public:
  explicit RawSegment(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
    size_ = file_size(path);
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap " + path + ": " + std::strerror(errno));
    base_ = static_cast<std::byte*>(p);
  }
  ~RawSegment() {
    if (base_ != nullptr) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  RawSegment(const RawSegment&) = delete;
  RawSegment& operator=(const RawSegment&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  layout::SegmentHeader& header() const { return *reinterpret_cast<layout::SegmentHeader*>(base_); }
  layout::ReaderSlot& reader(std::uint32_t i) const {
    return reinterpret_cast<layout::ReaderSlot*>(base_ + header().reader_table_offset)[i];
  }
  // The record slot that holds (or will hold) sequence `seq`.
  std::byte* record(std::uint64_t seq) const {
    const auto& h = header();
    return base_ + h.log_offset + (seq & (h.capacity - 1)) * h.record_size;
  }
  layout::RecordHeader& record_header(std::uint64_t seq) const {
    return *reinterpret_cast<layout::RecordHeader*>(record(seq));
  }
  std::byte* payload(std::uint64_t seq) const { return record(seq) + layout::kRecordHeaderSize; }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::byte* base_ = nullptr;
};

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

}  // namespace shmbus::test
