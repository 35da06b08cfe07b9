// shmbus — the phases of one wait. Private to the library.
//
// A producer waiting for space and a consumer waiting for data wait the same
// way (WaitOptions): spin, then yield, then sleep on a futex word in the
// segment, until a deadline; and while they wait they look, at most every
// kLivenessPeriodNs, at who they wait for (a dead reader, a dead producer).
// A Waiter owns that clock arithmetic: the deadline, where the spin and
// yield phases end, the liveness tick, and how long one futex sleep may
// last; wait_until() is the one loop every waiter runs with it. The caller
// supplies only what it waits for and its side of the futex handshake
// (back_pressure.cpp; consumer_wait.cpp and wait_set.cpp, with
// consumer_watch.hpp's arm_data_sleep()).
//
// Nothing here makes a system call in the spin phase but the clock read
// (vDSO), so a short wait stays free of them.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

#include "shmbus/wait.hpp"
#include "sys.hpp"

namespace shmbus::detail {

// A holder that died is noticed within this (a dead reader holding a
// `block` producer, a dead producer its consumers wait for).
inline constexpr std::uint64_t kLivenessPeriodNs = 50'000'000;
// A sleep whose heavy barrier failed (no membarrier) cannot rely on the
// waker seeing it armed: it looks again after this at the latest.
inline constexpr std::uint64_t kFallbackSliceNs = 1'000'000;
// Pause instructions per spin step: the clock is read (and, for a check that
// costs more than a load, the check made) once per step.
inline constexpr int kSpinStep = 16;

class Waiter {
 public:
  enum class Phase { spin, yield, sleep };

  // `next_liveness`: the caller's own, kept across waits, so that calls that
  // do not wait (timeout 0) still look at liveness once per period, and
  // waits in quick succession no more often.
  Waiter(const WaitOptions& wait, std::chrono::nanoseconds timeout, std::uint64_t& next_liveness) noexcept
      : strategy_(wait.strategy),
        interrupt_(wait.interrupt),
        next_liveness_(next_liveness),
        start_(monotonic_ns()),
        now_(start_) {
    deadline_ = timeout == forever ? UINT64_MAX : start_ + std::min(non_negative(timeout), UINT64_MAX - start_);
    spin_end_ = start_ + non_negative(wait.spin_time);
    yield_end_ = spin_end_ + non_negative(wait.yield_time);
  }

  std::uint64_t start() const noexcept { return start_; }
  std::uint64_t now() const noexcept { return now_; }
  void tick() noexcept { now_ = monotonic_ns(); }
  // The deadline passed, or the caller's Interrupt was raised.
  bool expired() const noexcept { return now_ >= deadline_ || (interrupt_ != nullptr && interrupt_->raised()); }

  // Past the spin phase, or a call that does not wait at all: a system call
  // (testing a role lock) is allowed.
  bool may_probe() const noexcept { return now_ >= spin_end_ || now_ >= deadline_; }
  // True at most once per kLivenessPeriodNs, and only when may_probe().
  bool liveness_due() noexcept {
    if (now_ < next_liveness_ || !may_probe()) return false;
    next_liveness_ = now_ + kLivenessPeriodNs;
    return true;
  }

  // The yield phase lasts yield_time AND kMinYields yields: when other
  // processes share this CPU, each yield hands them a whole slice, and wall
  // time alone would send us to sleep (a heavy barrier, and a futex wake-up
  // for the other side) while the stream is still flowing.
  Phase phase() const noexcept {
    if (strategy_ == WaitStrategy::busy_spin || now_ < spin_end_) return Phase::spin;
    if (strategy_ == WaitStrategy::spin_yield || now_ < yield_end_ || yields_ < kMinYields) return Phase::yield;
    return Phase::sleep;
  }
  void yield() noexcept {
    ++yields_;
    ::sched_yield();
  }
  // One step of the spin or yield phase, as phase() says: kSpinStep
  // pauses, or a yield. In the spin phase `ready()` is asked after every
  // pause, and the step ends as soon as it says yes: for a caller whose
  // check is one load of a line it reads next anyway (a consumer's commit
  // tag). False once it is time to sleep: the caller's own futex handshake.
  template <class Ready>
  bool pause(Ready&& ready) noexcept {
    switch (phase()) {
      case Phase::spin:
        for (int k = 0; k < kSpinStep; ++k) {
          cpu_relax();
          if (ready()) break;
        }
        return true;
      case Phase::yield: yield(); return true;
      case Phase::sleep: break;
    }
    return false;
  }
  // The same, for a caller whose check costs more than a load: made once
  // per step, after it.
  bool pause() noexcept {
    return pause([]() noexcept { return false; });
  }

  // How long one futex sleep may last: at most until the deadline, the next
  // liveness tick (if one is pending) and `cap`; kFallbackSliceNs if the
  // heavy barrier failed.
  std::uint64_t sleep_slice(bool barrier_ok, std::uint64_t cap) const noexcept {
    std::uint64_t slice = std::min(deadline_ - now_, cap);
    if (next_liveness_ > now_) slice = std::min(slice, next_liveness_ - now_);
    if (!barrier_ok) slice = std::min(slice, kFallbackSliceNs);
    return slice;
  }

 private:
  static std::uint64_t non_negative(std::chrono::nanoseconds d) noexcept {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.count()));
  }

  WaitStrategy strategy_;
  const Interrupt* interrupt_;
  std::uint64_t& next_liveness_;
  std::uint64_t start_;
  std::uint64_t now_;
  std::uint64_t deadline_ = 0;
  std::uint64_t spin_end_ = 0;
  std::uint64_t yield_end_ = 0;
  std::uint32_t yields_ = 0;
};

// One wait, the loop the producer (for space), a consumer (for data) and a
// WaitSet all run. Each turn:
//   side.look(w)      what ends the wait now: the check, and, when
//                     w.liveness_due(), a look at the other side (a system
//                     call); an R to return, or nullopt
//   w.expired()       then side.at_deadline() is returned
//   w.pause(...)      a spin or yield step while side.may_spin();
//                     side.ready() is asked after every pause of the spin
//                     phase, and what it finds returned at once (one load,
//                     for a consumer; nothing, for a waiter whose check
//                     costs more: look() makes it once a step)
//   side.sleep(w)     past the yield phase: the waiter's side of the futex
//                     handshake (arm, heavy_barrier(), check once more,
//                     futex_wait for at most w.sleep_slice(...), disarm);
//                     an R to return, or nullopt
template <class Side>
auto wait_until(Waiter& w, Side& side) noexcept(noexcept(side.look(w)) && noexcept(side.sleep(w))) {
  using R = decltype(side.at_deadline());
  for (;; w.tick()) {
    if (std::optional<R> r = side.look(w)) return *r;
    if (w.expired()) return side.at_deadline();
    if (side.may_spin()) {
      std::optional<R> found;
      if (w.pause([&]() noexcept { return (found = side.ready()).has_value(); })) {
        if (found) return *found;  // no clock read on the way out
        continue;
      }
    }
    if (std::optional<R> r = side.sleep(w)) return *r;
  }
}

}  // namespace shmbus::detail
