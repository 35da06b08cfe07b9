#include "tools/common/proc_stat.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace shmbus::tools {

std::optional<ProcStat> read_proc_stat(pid_t pid) noexcept {
  if (pid <= 0) return std::nullopt;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so the
  // fields are counted from the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ' || close[2] == '\0') return std::nullopt;
  ProcStat s;
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

}  // namespace shmbus::tools
