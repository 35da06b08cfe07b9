#include "bridge/log.hpp"

#include <unistd.h>

#include <atomic>
#include <string>

namespace shmbus::bridge {
namespace {
std::atomic<bool> g_quiet{false};  // relaxed: a setting, publishes nothing
}

void set_quiet(bool quiet) noexcept { g_quiet.store(quiet, std::memory_order_relaxed); }

void log_line(std::string_view line) noexcept {
  if (g_quiet.load(std::memory_order_relaxed)) return;
  log_always(line);
}

void log_always(std::string_view line) noexcept {
  try {
    std::string s = "shmbus-bridge: ";
    for (char c : line) s.push_back(c == '\n' || c == '\r' ? ' ' : c);
    s.push_back('\n');
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
