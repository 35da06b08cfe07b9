// shmbus — role locks: liveness decided by the kernel (layout.hpp, "Role
// locks"). Private to the library.
//
// A role (the producer, a reader slot, a durable name) is held through an
// open-file-description lock on one byte of the segment file. The kernel
// releases it when the last descriptor of that description closes: at
// process exit in any PID or mount namespace, with or without /proc, with
// or without a main thread. Nothing here is on the per-message path: roles
// are taken at attach and tested only while somebody waits.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace shmbus::detail {

// What a lock test says about a role's holder.
enum class Holder : std::uint8_t {
  alive,    // another open file description holds the byte
  none,     // nobody holds it: the holder (if any) is gone
  unknown,  // the test itself failed (see errno): never treated as gone
};

// Tests byte `byte` (or `len` bytes from it; 0: to the end of any file) of
// the file open as `fd` for a lock held through another open file
// description. `fd` may be read-only.
Holder test_lock(int fd, std::uint64_t byte, std::uint64_t len = 1) noexcept;

// Takes a write lock on byte `byte` through `fd` (opened read-write), without
// waiting. True if taken (or already held through this description); false
// if another description holds it; false with errno set to something other
// than EAGAIN if the call failed.
bool try_lock(int fd, std::uint64_t byte) noexcept;

// Drops the lock on byte `byte` held through `fd`.
void unlock(int fd, std::uint64_t byte) noexcept;

// How many times this process's lineage has been forked since shmbus first
// opened a role in it, counted in each child: a handle made before a fork
// belongs to the parent when the generation has changed since.
std::uint64_t fork_generation() noexcept;

// An open file description of its own on a segment file, through which a
// role's lock is held. A process that forks keeps its roles to itself: the
// child's copy of the descriptor is closed right after fork() (a
// pthread_atfork handler), so a child never keeps a dead parent's role alive
// and never shares it; exec() closes it too (O_CLOEXEC).
class RoleFd {
 public:
  RoleFd() = default;
  // ::open(path, flags | O_CLOEXEC), recorded for the fork handler; empty
  // (errno set) if the open failed.
  static RoleFd open(const char* path, int flags) noexcept;
  ~RoleFd();
  RoleFd(RoleFd&& o) noexcept;
  RoleFd& operator=(RoleFd&& o) noexcept;
  RoleFd(const RoleFd&) = delete;
  RoleFd& operator=(const RoleFd&) = delete;

  // -1 when empty, and in a forked child (where the descriptor was closed).
  int get() const noexcept;
  explicit operator bool() const noexcept { return get() >= 0; }

 private:
  void reset() noexcept;
  int fd_ = -1;
  std::uint64_t generation_ = 0;  // fork_generation() when it was opened
};

}  // namespace shmbus::detail
