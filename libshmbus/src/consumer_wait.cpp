// shmbus — a consumer waiting for data (consumer_impl.hpp): the end of
// the stream, the wait loop of next() and read_batch(), and what a WaitSet
// asks of a consumer (consumer_watch.hpp).
#include "consumer_impl.hpp"

#include "waiter.hpp"

namespace shmbus {

bool Consumer::Impl::end_of_stream(bool probe) noexcept {
  // Pairs with the producer's release store of `closed` after its last commit.
  if (h->closed.load(std::memory_order_acquire) != 0) {
    end = h->removed.load(std::memory_order_relaxed) != 0 ? EndReason::removed : EndReason::closed;
    return true;
  }
  // Still the dead producer's bus: no successor has taken it over.
  if (end == EndReason::producer_died && h->takeovers.load(std::memory_order_acquire) == dead_takeovers &&
      h->producer_owner.load(std::memory_order_acquire) != 0)
    return true;
  if (!probe) return false;
  // No producer attached, or one that left without closing: wait for one.
  if (h->producer_owner.load(std::memory_order_acquire) == 0) return false;
  // Alive, or the lock cannot be tested: never guess.
  if (seg.producer_holder() != detail::Holder::none) return false;
  // The lock is free: the producer left or died. One that left cleared its
  // owner word (and closed, if it did) before unlocking; the lock test
  // above orders those stores before these loads.
  if (h->closed.load(std::memory_order_acquire) != 0) return end_of_stream(false);
  if (h->producer_owner.load(std::memory_order_acquire) == 0) return false;
  const std::uint32_t takeovers = h->takeovers.load(std::memory_order_acquire);
  // A successor counts its takeover after taking the lock: test it again.
  if (seg.producer_holder() != detail::Holder::none) return false;
  dead_takeovers = takeovers;
  // A producer that died asleep left this set; clear it so our cursor
  // updates stop issuing futex wakes.
  h->producer_sleeping.store(0, std::memory_order_relaxed);
  end = EndReason::producer_died;
  return true;
}

bool Consumer::Impl::has_news(bool probe) noexcept {
  if (!slot_is_ours()) return true;
  if (deferred_lost != 0) {
    release();  // between calls nothing is in hand
    return true;
  }
  const std::uint64_t c = cursor;
  // What try_read() asks, in its order: nothing is there before head is
  // past the cursor (announced()); then the tag says what is.
  if (c < head_seen || announced(c)) {
    const std::uint64_t t = detail::RecordRing::load_tag(ring.record(c));
    if (t == detail::committed_tag(c)) return true;
    if (detail::tag_state(t, c) == detail::TagState::not_yet) {
      if (checked && !detail::RecordRing::is_header(ring.span_mark(c))) return true;  // landed inside a span
    } else if (!stale_span_word(c)) {
      return true;  // lapped, a gap's marker, or a tag no lap explains (not_committed() says which)
    }
  }
  if (!eos_reported && end_of_stream(probe)) return true;
  // Nothing to read: the caller is about to wait (keep_from is unset
  // between calls), and the producer may be waiting for the records we
  // hold, as before any wait (read_one()).
  release();
  return false;
}

detail::ConsumerWatch Consumer::Impl::watch() noexcept {
  detail::ConsumerWatch w;
  w.h = h;
  w.slot = slot;
  w.seg = &seg;
  w.seq = cursor;
  w.state_seen = active_state;
  w.end_pending = !eos_reported;
  return w;
}

detail::Step Consumer::Impl::read_one(Message& out, Dest copy_to, std::chrono::nanoseconds timeout) noexcept {
  Step s = try_read(out, copy_to);
  if (s != Step::empty) [[likely]] return s;
  // About to wait: the producer may be waiting for the records we hold.
  release();

  slot->last_active_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
  // What a consumer waits for (detail::wait_until()).
  struct ForData {
    Impl& c;
    Message& out;
    Dest copy_to;
    Step s = Step::empty;  // what look() or sleep() last found
    bool eos = false;      // the stream ended and was reported: sleep until a new producer or the deadline
    std::uint64_t turns = 0;

    std::optional<Step> look(detail::Waiter& w) noexcept {
      // After a yield or a sleep (a spin returns what it finds at once;
      // read_one() has just read before the first turn).
      if (turns++ != 0 && (s = c.try_read(out, copy_to)) != Step::empty) return s;
      // The liveness probe is kept out of the spin phase (a short wait
      // makes no system call), except for a caller that does not wait.
      const bool probe = !eos && w.liveness_due();
      if (probe && (s = c.lost_commit(out)) != Step::empty) return s;
      if (!eos && c.end_of_stream(probe)) {
        // Everything committed before the close (or the death) is visible now.
        if ((s = c.try_read(out, copy_to)) != Step::empty) return s;
        // A reader let go (or whose slot was taken) while it read in place
        // may find nothing where the producer has since moved on: say that
        // first; the next call reads on from where it now stands, and the
        // end comes after what is left.
        if (!c.checked && !c.slot_is_ours()) return Step::taken;
        // Report it once; after that, wait (asleep) for a new producer until
        // the timeout, instead of returning at once to a spinning caller.
        if (!c.eos_reported || w.expired()) {
          c.eos_reported = true;
          return Step::eos;
        }
        eos = true;
      }
      return std::nullopt;
    }
    Step at_deadline() const noexcept { return eos ? Step::eos : Step::timeout; }
    // Not once the stream has ended: then sleep.
    bool may_spin() const noexcept { return !eos; }
    // At the producer's frontier one load of head's line (try_read_once()).
    std::optional<Step> ready() noexcept {
      const Step r = c.try_read(out, copy_to);
      return r == Step::empty ? std::nullopt : std::optional<Step>(r);
    }

    std::optional<Step> sleep(detail::Waiter& w) noexcept {
      // Dekker with the producer (consumer_watch.hpp, arm_data_sleep()). A
      // WaitSet's thread may own the sleeping flag already: then it is not
      // ours to clear.
      layout::SegmentHeader* h = c.h;
      const bool mine = detail::arm_data_sleep(h, c.slot);
      const std::uint32_t seen = h->data_futex.load(std::memory_order_acquire);
      const bool barrier_ok = detail::heavy_barrier();
      s = c.try_read(out, copy_to);
      if (s == Step::empty && (eos || h->closed.load(std::memory_order_acquire) == 0))
        detail::futex_wait(&h->data_futex, seen, w.sleep_slice(barrier_ok, detail::kLivenessPeriodNs));
      detail::disarm_data_sleep(h, c.slot, mine);
      c.slot->last_active_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
      if (s != Step::empty) return s;
      if (eos && !c.end_of_stream(false)) eos = false;  // a new producer took over: wait for its data as usual
      return std::nullopt;
    }
  } side{*this, out, copy_to};
  detail::Waiter w(opt.wait, timeout, next_liveness);
  return detail::wait_until(w, side);
}

namespace detail {



bool ConsumerAccess::has_news(Consumer& c, bool probe) noexcept { return c.impl_->has_news(probe); }
ConsumerWatch ConsumerAccess::watch(Consumer& c) noexcept { return c.impl_->watch(); }

bool watch_fired(const ConsumerWatch& w, bool probe) noexcept {
  // Head past the cursor: a record, a gap or a lap to read, as try_read()
  // judges (announced()). Acquire: pairs with the producer's release store
  // of head, after the commits below it; it wakes sleepers after that store.
  const std::uint64_t hd = w.h->head.load(std::memory_order_acquire);
  if (hd > w.seq && hd < layout::kMaxSequence) return true;
  if (w.slot->state.load(std::memory_order_relaxed) != w.state_seen) return true;
  if (!w.end_pending) return false;
  // Pairs with the producer's release store of `closed` after its last commit.
  if (w.h->closed.load(std::memory_order_acquire) != 0) return true;
  // A producer that died holding the role: its lock is free, its owner word set.
  return probe && w.h->producer_owner.load(std::memory_order_acquire) != 0 &&
         w.seg->producer_holder() == Holder::none;
}

}  // namespace detail

}  // namespace shmbus
