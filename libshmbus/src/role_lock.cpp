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

// Descriptors that hold roles, closed in a forked child.
//
// fork() copies the descriptor table before it copies memory, so the table
// here and the descriptors themselves agree in the child only if no thread
// is between opening and recording a descriptor, or between forgetting and
// closing one, while another forks: g_registry_mutex covers both, and the
// atfork prepare handler takes it, so fork() waits for those few
// instructions. The child closes every recorded descriptor (close() is
// async-signal-safe) and counts one more fork generation; a RoleFd made in
// an earlier generation is then empty in the child, whatever its pid (a
// forked child may have its parent's pid in a new PID namespace).
//
// A fixed table (entries hold fd + 1, 0 is empty): a process holding more
// roles than this keeps the rest across fork (exec still closes them).
constexpr int kTracked = 4096;
int g_role_fds[kTracked];  // guarded by g_registry_mutex
pthread_mutex_t g_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
std::atomic<std::uint64_t> g_fork_generation{0};

void before_fork() noexcept { ::pthread_mutex_lock(&g_registry_mutex); }
void after_fork_in_parent() noexcept { ::pthread_mutex_unlock(&g_registry_mutex); }
void after_fork_in_child() noexcept {
  for (int& entry : g_role_fds) {
    if (entry != 0) {
      ::close(entry - 1);
      entry = 0;
    }
  }
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);  // only this thread runs in the child
  // The forking thread took it in before_fork and is the child's only thread.
  ::pthread_mutex_unlock(&g_registry_mutex);
}

void install_fork_handlers() noexcept {
  static const bool installed = [] {
    ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    return true;
  }();
  (void)installed;
}

// Called with g_registry_mutex held.
void track(int fd) noexcept {
  for (int& entry : g_role_fds) {
    if (entry == 0) {
      entry = fd + 1;
      return;
    }
  }
}

// Called with g_registry_mutex held.
void untrack(int fd) noexcept {
  for (int& entry : g_role_fds) {
    if (entry == fd + 1) {
      entry = 0;
      return;
    }
  }
}

}  // namespace

// The kernel takes its own spinlock for a lock operation, except a test
// that finds no lock on the file at all, which it answers without one: the
// fences make every call a full barrier for what this process stored before
// it (e.g. a producer's owner word before it unlocks) and loads after it.
Holder test_lock(int fd, std::uint64_t byte, std::uint64_t len) noexcept {
  flock fl = byte_range(F_WRLCK, byte, len);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const int rc = ::fcntl(fd, F_OFD_GETLK, &fl);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (rc != 0) return Holder::unknown;
  return fl.l_type == F_UNLCK ? Holder::none : Holder::alive;
}

bool try_lock(int fd, std::uint64_t byte) noexcept {
  flock fl = byte_range(F_WRLCK, byte, 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const bool taken = ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return taken;
}

void unlock(int fd, std::uint64_t byte) noexcept {
  flock fl = byte_range(F_UNLCK, byte, 1);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ::fcntl(fd, F_OFD_SETLK, &fl);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

std::uint64_t fork_generation() noexcept { return g_fork_generation.load(std::memory_order_relaxed); }

RoleFd RoleFd::open(const char* path, int flags) noexcept {
  install_fork_handlers();
  RoleFd r;
  ::pthread_mutex_lock(&g_registry_mutex);
  r.fd_ = ::open(path, flags | O_CLOEXEC);
  if (r.fd_ >= 0) track(r.fd_);
  ::pthread_mutex_unlock(&g_registry_mutex);
  r.generation_ = fork_generation();
  return r;
}

RoleFd::~RoleFd() { reset(); }

RoleFd::RoleFd(RoleFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)), generation_(o.generation_) {}

RoleFd& RoleFd::operator=(RoleFd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
    generation_ = o.generation_;
  }
  return *this;
}

int RoleFd::get() const noexcept { return fd_ >= 0 && generation_ == fork_generation() ? fd_ : -1; }

void RoleFd::reset() noexcept {
  // In a forked child the descriptor was closed after fork and its number
  // may belong to another file by now: leave it alone.
  if (get() >= 0) {
    ::pthread_mutex_lock(&g_registry_mutex);
    untrack(fd_);
    ::close(fd_);
    ::pthread_mutex_unlock(&g_registry_mutex);
  }
  fd_ = -1;
}

}  // namespace shmbus::detail
