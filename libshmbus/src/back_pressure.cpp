// shmbus — back-pressure in a `block` bus (back_pressure.hpp).
#include "back_pressure.hpp"

#include <algorithm>
#include <atomic>
#include <optional>

#include "reader_table.hpp"
#include "sys.hpp"
#include "waiter.hpp"

namespace shmbus::detail {

BackPressure::BackPressure(Segment& seg, const WaitOptions& wait, std::chrono::nanoseconds max_hold)
    : seg_(seg),
      h_(seg.header()),
      wait_(wait),
      cap_(seg.capacity()),
      chunk_(std::max<std::uint64_t>(1, seg.capacity() / 16)),
      hold_(max_hold, !seg.overwrite(), seg.max_readers()) {}

void BackPressure::start(std::uint64_t s) noexcept {
  // A predecessor that died asleep may have left these set.
  h_->producer_sleeping.store(0, std::memory_order_relaxed);
  h_->blocked_on_slot.store(0, std::memory_order_relaxed);
  h_->wait_start_ns.store(0, std::memory_order_relaxed);
  h_->max_hold_ns.store(hold_.limit_ns(), std::memory_order_relaxed);
  limit_ = 0;  // force a rescan before the first write
  if (!seg_.overwrite()) recompute(s);
}

void BackPressure::leave() noexcept {
  waiting_ = false;
  h_->blocked_on_slot.store(0, std::memory_order_relaxed);
  h_->wait_start_ns.store(0, std::memory_order_relaxed);
  h_->max_hold_ns.store(0, std::memory_order_relaxed);
}

std::uint64_t BackPressure::min_active_cursor(std::uint64_t upper, std::uint32_t* holder) const noexcept {
  std::uint64_t m = upper;
  const std::uint32_t n = seg_.max_readers();
  for (std::uint32_t i = 0; i < n; ++i) {
    layout::ReaderSlot* r = seg_.reader(i);
    // Acquire: a reader's cursor store (release) frees the records before it.
    if (r->state.load(std::memory_order_acquire) != layout::kSlotActive) continue;
    const std::uint64_t c = r->cursor.load(std::memory_order_acquire);
    if (c < m) {
      m = c;
      if (holder) *holder = i;
    }
  }
  return m;
}

void BackPressure::recompute(std::uint64_t s, std::uint32_t* holder) noexcept {
  // Keep at least capacity - chunk records protected for late joiners.
  const std::uint64_t keep_floor = s + chunk_ > cap_ ? s + chunk_ - cap_ : 0;
  std::uint64_t floor = std::min(min_active_cursor(s, holder), keep_floor);
  // Publish the floor, then look again (see the handshake at the top).
  h_->oldest.store(floor, std::memory_order_relaxed);
  // Pairs with the joining reader's fence. Also a release fence after the
  // state loads above: a reader let go by another process (detail::let_go)
  // that we no longer count is let go before any tag we store from here,
  // so one that finds its record rewritten also finds its new state.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const std::uint64_t again = min_active_cursor(s, nullptr);
  if (again < floor) {
    floor = again;
    h_->oldest.store(floor, std::memory_order_relaxed);
  }
  limit_ = floor + cap_;
}

std::uint32_t BackPressure::count_live_readers() const {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < seg_.max_readers(); ++i) {
    layout::ReaderSlot* r = seg_.reader(i);
    const std::uint32_t st = r->state.load(std::memory_order_acquire);
    if (st != layout::kSlotActive && st != layout::kSlotBestEffort) continue;
    if (seg_.reader_holder(i) == Holder::alive) ++n;
  }
  return n;
}

void BackPressure::reclaim_dead_holders(std::uint64_t needed_floor) noexcept {
  for (std::uint32_t i = 0; i < seg_.max_readers(); ++i) {
    layout::ReaderSlot* r = seg_.reader(i);
    if (r->state.load(std::memory_order_acquire) != layout::kSlotActive) continue;
    if (r->cursor.load(std::memory_order_acquire) >= needed_floor) continue;
    reclaim_if_dead(seg_, i);
  }
}

// Who holds us back, for the inspector: slot + 1, or 0 for nobody.
// Relaxed: labels; they order nothing.
void BackPressure::show_holder(std::uint32_t holder) noexcept {
  h_->blocked_on_slot.store(holder == UINT32_MAX ? 0 : holder + 1, std::memory_order_relaxed);
}

// The wait for space is over: room was found, or the bus was removed.
void BackPressure::end_wait() noexcept {
  if (!waiting_) return;
  waiting_ = false;
  h_->blocked_on_slot.store(0, std::memory_order_relaxed);
  h_->wait_start_ns.store(0, std::memory_order_relaxed);
}

BackPressure::Wait BackPressure::wait(std::uint64_t last_seq, std::chrono::nanoseconds timeout) noexcept {
  std::uint32_t holder = UINT32_MAX;
  recompute(last_seq, &holder);
  if (last_seq < limit_) {
    end_wait();
    return Wait::room;
  }

  const std::uint64_t needed_floor = last_seq + 1 - cap_;  // every cursor must reach this
  Waiter w(wait_, timeout, next_liveness_);
  // With a hold limit, we look at who holds us every period and charge
  // them the time since the last look.
  const std::uint64_t hold_period = hold_.period_ns();
  // Who holds us back: the reader furthest behind, named from the wait's
  // first moment (the scan above found it) and before the wait shows, so
  // that an inspector that sees us waiting finds it; and named again
  // whenever another is furthest behind (one that was behind with the one
  // we really wait for catches up). Stored only when it changes.
  const std::uint32_t shown = holder;
  show_holder(shown);
  if (!waiting_) {
    waiting_ = true;
    h_->producer_waits.fetch_add(1, std::memory_order_relaxed);
    h_->wait_start_ns.store(realtime_ns(), std::memory_order_relaxed);
  }
  // What the producer waits for (wait_until()).
  struct ForSpace {
    BackPressure& bp;
    std::uint64_t last_seq;
    std::uint64_t needed_floor;
    std::uint64_t hold_period;
    std::uint32_t shown;
    std::uint64_t last_hold_look;
    std::uint64_t next_hold_look;

    std::optional<Wait> look(Waiter& w) noexcept {
      std::uint32_t furthest = UINT32_MAX;
      // The check rescans every active reader's cursor line: once per step.
      bp.recompute(last_seq, &furthest);
      if (last_seq < bp.limit_) return Wait::room;
      if (furthest != shown) bp.show_holder(shown = furthest);
      if (bp.h_->removed.load(std::memory_order_relaxed) != 0) return Wait::removed;  // removed by force meanwhile
      if (w.liveness_due()) {
        // Outside the spin phase (a short wait must stay free of system
        // calls), once per liveness period: reclaim a holder that died.
        bp.reclaim_dead_holders(needed_floor);
      } else if (w.now() >= next_hold_look) {
        bp.hold_.account(bp.seg_, needed_floor, w.now() - last_hold_look);
        last_hold_look = w.now();
        next_hold_look = w.now() + hold_period;
      }
      return std::nullopt;
    }
    Wait at_deadline() const noexcept { return Wait::timeout; }
    bool may_spin() const noexcept { return true; }
    std::optional<Wait> ready() const noexcept { return std::nullopt; }  // look() checks once per step

    std::optional<Wait> sleep(Waiter& w) noexcept {
      // A reader that stops between what we need and the chunk we asked
      // for never crosses the mark: look again after this at the latest.
      constexpr std::uint64_t kChunkSleepNs = 10'000'000;
      layout::SegmentHeader* h = bp.h_;
      // Dekker with consumers: we arm producer_sleeping, then
      // heavy_barrier() and re-check cursors; they store their cursor, then
      // load producer_sleeping (light barrier between), and the first whose
      // cursor crosses space_wanted clears it and makes the one wake.
      const std::uint32_t seen = h->space_futex.load(std::memory_order_acquire);
      // Reachable: chunk <= cap / 2, so the mark is never past head.
      h->space_wanted.store(needed_floor + bp.chunk_, std::memory_order_relaxed);
      // Release: a reader that sees producer_sleeping == 1 sees space_wanted.
      h->producer_sleeping.store(1, std::memory_order_release);
      const bool barrier_ok = heavy_barrier();
      bp.recompute(last_seq);
      if (last_seq < bp.limit_) {
        h->producer_sleeping.store(0, std::memory_order_relaxed);
        return Wait::room;
      }
      // Not past the next look at the holders: at once (1 ns; a 0 would
      // mean no timeout to futex_wait()) if a liveness look took this turn.
      const std::uint64_t to_hold_look = next_hold_look > w.now() ? next_hold_look - w.now() : 1;
      futex_wait(&h->space_futex, seen, w.sleep_slice(barrier_ok, std::min(kChunkSleepNs, to_hold_look)));
      h->producer_sleeping.store(0, std::memory_order_relaxed);
      return std::nullopt;
    }
  } side{*this, last_seq, needed_floor, hold_period, shown, w.start(),
         hold_period == UINT64_MAX ? UINT64_MAX : w.start() + hold_period};
  const Wait result = wait_until(w, side);
  if (result != Wait::timeout) {
    end_wait();
  } else {
    // Timed out: still waiting as far as anyone looking can tell. The next
    // call must come back here (to end the wait, or wait on), even for a
    // message that would fit under the limit we have.
    limit_ = 0;
  }
  h_->producer_wait_ns.fetch_add(monotonic_ns() - w.start(), std::memory_order_relaxed);
  return result;
}

}  // namespace shmbus::detail
