// shmbus — whether the process holding a role lives, and how to name it.
//
// Every role in a bus (the producer, a reader slot, a durable reader name)
// is held by a process; the Inspector reports each holder's Liveness, and
// errors that name a holder use pid_label().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace shmbus {

// Whether the process holding a role lives, as the kernel says: every role
// (producer, reader slot, durable name) is held through a lock the kernel
// drops when its process exits, in any PID or mount namespace. Pids are
// shown as labels only: a pid is the holder's own view, from inside its PID
// namespace (a container's reader may show as pid 1 or 2).
enum class Liveness : std::uint8_t {
  alive,    // its process holds the role's lock
  dead,     // nobody holds the lock: the process exited (or was killed)
  unknown,  // the lock could not be tested; never treated as dead
};
const char* to_string(Liveness l) noexcept;

// True when `pid_ns` (the inode of a process's PID namespace, as stored
// beside its pid; 0 if it had no /proc) is known and is not this process's:
// its pid means nothing here.
bool in_other_pid_namespace(std::uint32_t pid_ns) noexcept;
// How to name that process to a person here: "pid 1234", or "pid 1 in
// another PID namespace".
std::string pid_label(pid_t pid, std::uint32_t pid_ns);

// What this PID namespace's /proc says of process `pid` (/proc/PID/stat):
// its state letter and start time. A label check only: compare start_ticks
// with the one a role holder stored before trusting that a pid is it.
struct ProcessStat {
  char state = '?';               // R, S, D, T (stopped), t (traced), Z ...
  std::uint64_t start_ticks = 0;  // clock ticks after boot
};
// Empty when there is no such process here, or no /proc.
std::optional<ProcessStat> process_stat(pid_t pid) noexcept;

}  // namespace shmbus
