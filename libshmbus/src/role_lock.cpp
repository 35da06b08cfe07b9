#include "role_lock.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <utility>

namespace shmbus::detail {

namespace {

flock byte_range(short type, std::uint64_t byte, std::uint64_t len) noexcept {
  flock fl{};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(byte);
  fl.l_len = static_cast<off_t>(len);
  fl.l_pid = 0;  // must be 0 for OFD locks
  return fl;
}

// Descriptors that hold roles, closed in a forked child. A fixed table of
// atomics: the fork handler runs in the child, where no lock another thread
// held at fork time may be taken. A process holding more roles than this
// keeps the rest across fork (exec still closes them).
constexpr int kTracked = 4096;
std::atomic<int> g_role_fds[kTracked];
std::atomic<bool> g_table_ready{false};

void close_roles_in_child() noexcept {
  for (auto& slot : g_role_fds) {
    const int fd = slot.load(std::memory_order_relaxed);
    if (fd > 0) {
      ::close(fd);
      slot.store(0, std::memory_order_relaxed);
    }
  }
}

void track(int fd) noexcept {
  static const bool installed = [] {
    ::pthread_atfork(nullptr, nullptr, close_roles_in_child);
    return true;
  }();
  (void)installed;
  for (auto& slot : g_role_fds) {
    int empty = 0;
    // Only the table matters, not what it guards: relaxed.
    if (slot.compare_exchange_strong(empty, fd, std::memory_order_relaxed)) return;
  }
}

void untrack(int fd) noexcept {
  for (auto& slot : g_role_fds) {
    int mine = fd;
    if (slot.compare_exchange_strong(mine, 0, std::memory_order_relaxed)) return;
  }
}

}  // namespace

Holder test_lock(int fd, std::uint64_t byte, std::uint64_t len) noexcept {
  flock fl = byte_range(F_WRLCK, byte, len);
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return Holder::unknown;
  return fl.l_type == F_UNLCK ? Holder::none : Holder::alive;
}

bool try_lock(int fd, std::uint64_t byte) noexcept {
  flock fl = byte_range(F_WRLCK, byte, 1);
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

void unlock(int fd, std::uint64_t byte) noexcept {
  flock fl = byte_range(F_UNLCK, byte, 1);
  ::fcntl(fd, F_OFD_SETLK, &fl);
}

RoleFd::RoleFd(int fd) noexcept : fd_(fd), pid_(::getpid()) {
  if (fd_ >= 0) track(fd_);
}

RoleFd::~RoleFd() { reset(); }

RoleFd::RoleFd(RoleFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), pid_(o.pid_) {}

RoleFd& RoleFd::operator=(RoleFd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    pid_ = o.pid_;
  }
  return *this;
}

int RoleFd::get() const noexcept { return fd_ >= 0 && pid_ == ::getpid() ? fd_ : -1; }

void RoleFd::reset() noexcept {
  // In a forked child the descriptor was closed after fork and its number
  // may belong to another file by now: leave it alone.
  if (fd_ >= 0 && pid_ == ::getpid()) {
    untrack(fd_);
    ::close(fd_);
  }
  fd_ = -1;
}

}  // namespace shmbus::detail
