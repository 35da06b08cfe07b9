// shmbus — how a consumer waits for data and a producer waits for space.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace shmbus {

// A flag that ends blocking calls early: a program raises it from a signal
// handler (raise() is async-signal-safe: one lock-free store) or from
// another thread, and every wait whose WaitOptions::interrupt points here
// ends within one sleep slice (10 ms for a producer waiting for space or
// readers, 50 ms at most for a consumer), as if its timeout had run out:
// publish() and claim() return PublishStatus::timeout, next() and poll()
// ReadStatus::timeout, a Producer waiting for readers throws
// Error(Errc::timeout). It stays raised until clear(), so a call made after
// it was raised returns at once instead of waiting. Checked only while
// waiting: a call that needs no wait is not affected.
class Interrupt {
 public:
  void raise() noexcept { raised_.store(true, std::memory_order_relaxed); }
  void clear() noexcept { raised_.store(false, std::memory_order_relaxed); }
  // Relaxed: the flag carries no data; a waiter sees it at its next look.
  bool raised() const noexcept { return raised_.load(std::memory_order_relaxed); }

 private:
  static_assert(std::atomic<bool>::is_always_lock_free, "raised from signal handlers");
  std::atomic<bool> raised_{false};
};

enum class WaitStrategy : std::uint8_t {
  // Spin on the shared word with a pause instruction. Lowest latency; burns a
  // whole core; only for processes pinned to their own cores.
  busy_spin,
  // Spin for spin_time, then sched_yield() in a loop. Never sleeps in the kernel.
  spin_yield,
  // The default: spin for spin_time, yield for yield_time, then sleep on a
  // futex word in the segment. Costs nothing while idle; the waker makes a
  // system call only when somebody is actually asleep.
  adaptive,
};

struct WaitOptions {
  WaitStrategy strategy = WaitStrategy::adaptive;
  // Both phases are bounded in time, not in iterations. A round trip between
  // two spinning processes takes a fraction of a microsecond, so a short
  // spin catches a busy stream without a system call; spinning longer would
  // only keep a core from other runnable processes (and get us preempted
  // for a whole time slice) once messages are microseconds apart. Sleeping
  // costs a futex wake-up (a system call for the waker, microseconds), but
  // leaves the CPU to whoever needs it. The figures that chose the defaults:
  // docs/bench.md, "Figures behind the defaults".
  std::chrono::nanoseconds spin_time = std::chrono::microseconds(2);
  std::chrono::nanoseconds yield_time = std::chrono::microseconds(20);
  // Ends this side's waits early when raised (see Interrupt); not owned.
  const Interrupt* interrupt = nullptr;
};

// "Wait as long as it takes".
inline constexpr std::chrono::nanoseconds forever = std::chrono::nanoseconds::max();

}  // namespace shmbus
