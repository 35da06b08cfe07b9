// shmbus — naming the holders of roles (shmbus/liveness.hpp).
#include "shmbus/liveness.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sys.hpp"

namespace shmbus {

namespace detail {

std::optional<ProcessStat> read_process_stat(const char* path) noexcept {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the
  // fields are counted from the last ')'. The start time is field 22.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ' || close[2] == '\0') return std::nullopt;
  ProcessStat s;
  s.state = close[2];
  const char* p = close + 1;
  for (int field = 2; *p;) {
    while (*p == ' ') ++p;
    if (++field == 22) {
      s.start_ticks = std::strtoull(p, nullptr, 10);
      return s;
    }
    while (*p && *p != ' ') ++p;
  }
  return std::nullopt;
}

}  // namespace detail

std::optional<ProcessStat> process_stat(pid_t pid) noexcept {
  if (pid <= 0) return std::nullopt;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  return detail::read_process_stat(path);
}

bool in_other_pid_namespace(std::uint32_t pid_ns) noexcept {
  if (pid_ns == 0) return false;
  const std::uint32_t ours = detail::self_pid_namespace();
  return ours != 0 && ours != pid_ns;
}

std::string pid_label(pid_t pid, std::uint32_t pid_ns) {
  std::string s = "pid " + std::to_string(pid);
  if (in_other_pid_namespace(pid_ns)) s += " in another PID namespace";
  return s;
}

const char* to_string(Liveness l) noexcept {
  switch (l) {
    case Liveness::alive: return "alive";
    case Liveness::dead: return "dead";
    case Liveness::unknown: return "unknown";
  }
  return "?";
}

}  // namespace shmbus
