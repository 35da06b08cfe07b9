// shmbus — the hold limit (hold_limit.hpp).
#include "hold_limit.hpp"

#include <algorithm>
#include <atomic>

#include "reader_table.hpp"
#include "shmbus/wait.hpp"
#include "waiter.hpp"

namespace shmbus::detail {

HoldLimit::HoldLimit(std::chrono::nanoseconds max_hold, bool applies, std::uint32_t max_readers)
    : limit_ns_(!applies || max_hold == forever
                    ? 0
                    : static_cast<std::uint64_t>(std::max<std::int64_t>(1, max_hold.count()))) {
  if (limit_ns_ != 0) held_.resize(max_readers);
}

std::uint64_t HoldLimit::period_ns() const noexcept {
  return limit_ns_ == 0 ? UINT64_MAX : std::clamp<std::uint64_t>(limit_ns_ / 8, 100'000, kLivenessPeriodNs);
}

bool HoldLimit::account(Segment& seg, std::uint64_t needed_floor, std::uint64_t waited_ns) noexcept {
  bool any = false;
  for (std::uint32_t i = 0; i < held_.size(); ++i) {
    layout::ReaderSlot* r = seg.reader(i);
    Held& e = held_[i];
    // The ticket is only compared: an attachment that changed in between
    // is caught after the exchange (let_go()).
    const std::uint64_t owner = r->owner.load(std::memory_order_relaxed);
    // Acquire: pairs with the reader's release store of its state (and of
    // its cursor), as in BackPressure's scan.
    const bool active = r->state.load(std::memory_order_acquire) == layout::kSlotActive;
    const std::uint64_t c = r->cursor.load(std::memory_order_acquire);
    if (!active || c >= needed_floor) {
      e.seen = false;
      continue;
    }
    if (!e.seen || e.owner != owner || e.cursor != c) {
      e = Held{owner, c, 0, true};
      continue;
    }
    e.waited_ns += waited_ns;
    // Only the producer may give a slot that changed hands back (reader_table.hpp).
    if (e.waited_ns >= limit_ns_ && let_go(seg, i, owner, /*give_back=*/true) == LetGo::let_go) {
      e.seen = false;
      any = true;
    }
  }
  if (any) {
    // Pairs with a reader's acquire load of a tag we store next (even a
    // relaxed BUSY one): a reader that reads in place and finds its record
    // rewritten also sees that it was let go (consumer_read.cpp, lapped()).
    std::atomic_thread_fence(std::memory_order_release);
  }
  return any;
}

}  // namespace shmbus::detail
