// shmbus — operating-system helpers: clocks, process start time (a label),
// futexes on shared words, and the asymmetric memory barrier.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "shmbus/liveness.hpp"

namespace shmbus::detail {

std::uint64_t realtime_ns() noexcept;
std::uint64_t monotonic_ns() noexcept;
// CLOCK_REALTIME_COARSE: the time at the kernel's last tick. Read from the
// vDSO data page without touching the clock hardware.
std::uint64_t coarse_realtime_ns() noexcept;

// Fewest sched_yield() calls a waiter makes before it may sleep on a futex
// (see WaitOptions::yield_time).
inline constexpr std::uint32_t kMinYields = 32;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Asks for the cache line at `p` in a state the caller may write it in (a
// read-for-ownership), without waiting for it. On x86 that is PREFETCHW,
// used only where CPUID says the CPU has it (else nothing is done): a plain
// read prefetch (prefetcht0, what __builtin_prefetch(p, 1) compiles to
// without -mprfchw) fetches the line shared, and on an Intel Xeon that made
// a producer writing close ahead of its reader 5x slower, not faster. On
// AArch64 it is PRFM PSTL1KEEP. Both are asm statements: GCC deletes a call
// to a helper that holds only __builtin_prefetch, finding it free of side
// effects.
extern const bool g_has_prefetchw;
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (g_has_prefetchw) asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  asm volatile("prfm pstl1keep, %a0" : : "p"(p));
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

// This process's start time (field 22 of /proc/self/stat, clock ticks since
// boot), or 0 without /proc. A label for people: liveness is decided by
// role locks (role_lock.hpp), never by pids or start times.
std::uint64_t self_start_ticks() noexcept;
// /proc/.../stat at `path` (liveness.cpp).
std::optional<ProcessStat> read_process_stat(const char* path) noexcept;
// The inode of this process's PID namespace (/proc/self/ns/pid), or 0
// without /proc. A label: pids are only meaningful within one namespace.
std::uint32_t self_pid_namespace() noexcept;

// FUTEX_WAIT on a word in shared memory (not FUTEX_PRIVATE: waker and sleeper
// are different processes). Returns when woken, when *word != expected, on a
// signal, or after `timeout_ns` (0 = no timeout).
void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::uint64_t timeout_ns) noexcept;
// One sleep on several words at once (futex_waitv, Linux 5.16): until one
// is woken or differs from its expected value, a signal, or `timeout_ns`
// (0 = none). `shared[i]`: word i is in shared memory (else private to this
// process). At most 128 words. A kernel without futex_waitv sleeps on the
// first word only, at most 1 ms at a time: slower to wake, never stuck.
void futex_wait_any(std::atomic<std::uint32_t>* const* words, const std::uint32_t* expected, const bool* shared,
                    std::size_t n, std::uint64_t timeout_ns) noexcept;
// Wakes up to `count` sleepers on `word`; returns how many it woke.
int futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept;

// The two halves of an asymmetric Dekker handshake between a hot side that
// stores X then loads Y, and a sleeping side that stores Y then loads X.
//  * light_barrier(): on the hot path. A compiler barrier when the process
//    is registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED, else a full fence.
//  * heavy_barrier(): by a side about to sleep. Forces a full barrier on
//    every CPU running a registered process, so the hot side's earlier store
//    is visible or its later load sees our store. Returns false if the
//    kernel refused; the caller then sleeps in short slices instead.
void register_barrier() noexcept;  // idempotent; call before the first light_barrier
bool heavy_barrier() noexcept;
extern std::atomic<bool> g_light_barrier_is_compiler_only;
inline void light_barrier() noexcept {
  if (g_light_barrier_is_compiler_only.load(std::memory_order_relaxed)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
}

}  // namespace shmbus::detail

namespace shmbus::detail {

// CLOCK_REALTIME in nanoseconds for record timestamps, cheaper than a vDSO
// clock_gettime per message: where the kernel itself uses an invariant TSC,
// read the TSC and scale it, re-anchoring to clock_gettime every millisecond
// (so the scale error stays within a few nanoseconds). Elsewhere it simply
// calls clock_gettime. One per producer; not thread-safe.
class PublishClock {
 public:
  PublishClock() noexcept;
  std::uint64_t now() noexcept {
#if defined(__x86_64__)
    if (tsc_) {
      const std::uint64_t t = __builtin_ia32_rdtsc();
      // Unsigned: a TSC that went backwards wraps to a huge delta and re-anchors.
      if (t - anchor_tsc_ >= reanchor_ticks_) [[unlikely]] return reanchor();
      return anchor_ns_ + static_cast<std::uint64_t>(static_cast<double>(t - anchor_tsc_) * ns_per_tick_);
    }
#endif
    return realtime_ns();
  }

 private:
  std::uint64_t reanchor() noexcept;
  bool tsc_ = false;
  std::uint64_t anchor_tsc_ = 0, anchor_ns_ = 0;
  std::uint64_t first_tsc_ = 0, first_ns_ = 0;
  std::uint64_t reanchor_ticks_ = 0;
  double ns_per_tick_ = 0;
};

}  // namespace shmbus::detail
