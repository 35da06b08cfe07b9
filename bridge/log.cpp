#include "bridge/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "tools/common/program.hpp"

namespace shmbus::bridge {
namespace {
std::atomic<bool> g_quiet{false};  // relaxed: a setting, publishes nothing
}

void set_quiet(bool quiet) noexcept { g_quiet.store(quiet, std::memory_order_relaxed); }

void log_line(std::string_view line) noexcept {
  if (g_quiet.load(std::memory_order_relaxed)) return;
  log_always(line);
}

void log_always(std::string_view line) noexcept { tools::print_notice("shmbus-bridge", line); }

void log_json(std::string_view object) noexcept {
  try {
    std::string s(object);
    s.push_back('\n');
    std::fflush(stderr);
    const char* p = s.data();
    std::size_t left = s.size();
    while (left > 0) {
      const ssize_t n = ::write(STDERR_FILENO, p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<std::size_t>(n);
    }
  } catch (...) {
    // Out of memory while logging: nothing better to do.
  }
}

}  // namespace shmbus::bridge
