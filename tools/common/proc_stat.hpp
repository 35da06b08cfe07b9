// shmbus tools — /proc/PID/stat, read the one way the programs need it: a
// process's state letter and its start time. (The library reads its own
// process's start time itself, in libshmbus/src/process.cpp.)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace shmbus::tools {

struct ProcStat {
  char state = '?';              // field 3: R, S, D, T (stopped), t (traced), Z ...
  std::uint64_t start_ticks = 0;  // field 22: start time, clock ticks after boot
};

// The stat of process `pid` as this PID namespace's /proc shows it; empty
// when there is no such process or no /proc.
std::optional<ProcStat> read_proc_stat(pid_t pid) noexcept;

}  // namespace shmbus::tools
