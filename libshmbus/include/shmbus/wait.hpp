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
};

// "Wait as long as it takes".
inline constexpr std::chrono::nanoseconds forever = std::chrono::nanoseconds::max();

}  // namespace shmbus
