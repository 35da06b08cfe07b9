#include <fcntl.h>
#include <pthread.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "layout.hpp"
#include "sys.hpp"

namespace shmbus::detail {

std::uint64_t coarse_realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

std::uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

std::uint32_t self_pid_namespace() noexcept {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<std::uint32_t>(st.st_ino);  // nsfs inodes are 32-bit
}

std::uint64_t self_start_ticks() noexcept {
  // Read each time: cached, a forked child would report its parent's.
  // /proc/self, not /proc/PID: a /proc of another PID namespace still
  // shows this process as itself.
  const std::optional<ProcessStat> s = read_process_stat("/proc/self/stat");
  return s ? s->start_ticks : 0;
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::uint64_t timeout_ns) noexcept {
  timespec ts{};
  timespec* tp = nullptr;
  if (timeout_ns) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000u);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000u);
    tp = &ts;
  }
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, tp, nullptr, 0);
}

void futex_wait_any(std::atomic<std::uint32_t>* const* words, const std::uint32_t* expected, const bool* shared,
                    std::size_t n, std::uint64_t timeout_ns) noexcept {
  if (n == 0) return;
#ifdef SYS_futex_waitv
  static std::atomic<bool> missing{false};
  if (n <= FUTEX_WAITV_MAX && !missing.load(std::memory_order_relaxed)) {
    std::array<futex_waitv, FUTEX_WAITV_MAX> w{};
    for (std::size_t i = 0; i < n; ++i) {
      w[i].val = expected[i];
      w[i].uaddr = reinterpret_cast<std::uintptr_t>(words[i]);
      w[i].flags = FUTEX_32 | (shared[i] ? 0 : FUTEX_PRIVATE_FLAG);
    }
    // futex_waitv's timeout is absolute, on the clock it is given.
    timespec ts{};
    timespec* tp = nullptr;
    if (timeout_ns != 0) {
      const std::uint64_t at = monotonic_ns() + timeout_ns;
      ts.tv_sec = static_cast<time_t>(at / 1'000'000'000u);
      ts.tv_nsec = static_cast<long>(at % 1'000'000'000u);
      tp = &ts;
    }
    if (::syscall(SYS_futex_waitv, w.data(), static_cast<unsigned>(n), 0u, tp, CLOCK_MONOTONIC) >= 0 ||
        errno == EAGAIN || errno == ETIMEDOUT || errno == EINTR)
      return;
    // ENOSYS (before Linux 5.16), or EPERM from a seccomp profile that
    // does not know the call: never ask again.
    missing.store(true, std::memory_order_relaxed);
  }
#endif
  const std::uint64_t slice = timeout_ns == 0 ? 1'000'000 : std::min<std::uint64_t>(timeout_ns, 1'000'000);
  if (shared[0]) {
    futex_wait(words[0], expected[0], slice);
  } else {
    timespec ts{static_cast<time_t>(slice / 1'000'000'000u), static_cast<long>(slice % 1'000'000'000u)};
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(words[0]), FUTEX_WAIT_PRIVATE, expected[0], &ts, nullptr, 0);
  }
}

int futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept {
  const long r = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
  return r > 0 ? static_cast<int>(r) : 0;
}

std::atomic<bool> g_light_barrier_is_compiler_only{false};

namespace {
bool cpu_has_prefetchw() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // CPUID 0x80000001, ECX bit 8: PREFETCHW (PRFCHW, "3dnowprefetch").
  return __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_PRFCHW) != 0;
#else
  return false;
#endif
}
}  // namespace
const bool g_has_prefetchw = cpu_has_prefetchw();

namespace {
std::atomic<pid_t> g_registered_pid{0};
void after_fork_in_child() {
  // Be conservative in a forked child: fence fully until it registers itself
  // (registering again is harmless).
  g_light_barrier_is_compiler_only.store(false, std::memory_order_relaxed);
  g_registered_pid.store(0, std::memory_order_relaxed);
}
}  // namespace

void register_barrier() noexcept {
  static const bool atfork_installed = [] {
    ::pthread_atfork(nullptr, nullptr, after_fork_in_child);
    return true;
  }();
  (void)atfork_installed;
  const pid_t me = ::getpid();
  if (g_registered_pid.load(std::memory_order_relaxed) == me) return;
  long mask = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  bool ok = mask >= 0 && (mask & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
            (mask & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
            ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
  g_light_barrier_is_compiler_only.store(ok, std::memory_order_relaxed);
  g_registered_pid.store(me, std::memory_order_relaxed);
}

bool heavy_barrier() noexcept {
  // Our own side of the handshake needs a full fence in any case.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

}  // namespace shmbus::detail

namespace shmbus::detail {

namespace {
bool kernel_uses_tsc() noexcept {
  int fd = ::open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[32] = {};
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == '\0');
}
}  // namespace

PublishClock::PublishClock() noexcept {
#if defined(__x86_64__)
  if (!kernel_uses_tsc()) return;
  // Calibrate over ~2 ms (setup path); later re-anchors refine the scale over
  // the whole time since this first sample.
  first_ns_ = realtime_ns();
  first_tsc_ = __builtin_ia32_rdtsc();
  std::uint64_t ns = first_ns_, t = first_tsc_;
  while (ns - first_ns_ < 2'000'000) {
    ns = realtime_ns();
    t = __builtin_ia32_rdtsc();
  }
  if (t <= first_tsc_) return;
  ns_per_tick_ = static_cast<double>(ns - first_ns_) / static_cast<double>(t - first_tsc_);
  if (!(ns_per_tick_ > 0.01 && ns_per_tick_ < 100)) return;  // 10 MHz .. 100 GHz
  reanchor_ticks_ = static_cast<std::uint64_t>(1'000'000 / ns_per_tick_);  // 1 ms
  anchor_tsc_ = t;
  anchor_ns_ = ns;
  tsc_ = true;
#endif
}

std::uint64_t PublishClock::reanchor() noexcept {
#if defined(__x86_64__)
  const std::uint64_t ns = realtime_ns();
  const std::uint64_t t = __builtin_ia32_rdtsc();
  if (t > first_tsc_ && ns > first_ns_ + 10'000'000) {
    const double scale = static_cast<double>(ns - first_ns_) / static_cast<double>(t - first_tsc_);
    if (scale > 0.01 && scale < 100) ns_per_tick_ = scale;
  }
  anchor_tsc_ = t;
  anchor_ns_ = ns;
  return ns;
#else
  return realtime_ns();
#endif
}

}  // namespace shmbus::detail
