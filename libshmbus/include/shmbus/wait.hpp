// shmbus — how a consumer waits for data and a producer waits for space.
#pragma once

#include <chrono>
#include <cstdint>

namespace shmbus {

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
  // Both phases are bounded in time, not in iterations: a futex wake-up costs
  // microseconds, so spinning a little longer than that keeps round trips fast
  // while an idle waiter still goes to sleep quickly.
  std::chrono::nanoseconds spin_time = std::chrono::microseconds(20);
  std::chrono::nanoseconds yield_time = std::chrono::microseconds(100);
};

// "Wait as long as it takes".
inline constexpr std::chrono::nanoseconds forever = std::chrono::nanoseconds::max();

}  // namespace shmbus
