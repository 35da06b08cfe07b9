// shmbus — what a consumer's read path meets besides a message
// (consumer_impl.hpp): a record not yet committed or not yet announced, a
// message that spans records, a lap, a gap or padding, a corrupt record.
// Each is told as a Step; losses are counted here.
#include "consumer_impl.hpp"

#include <optional>

namespace shmbus {

bool Consumer::Impl::announced(std::uint64_t c) noexcept {
  const std::uint64_t hd = h->head.load(std::memory_order_acquire);
  if (hd < kMaxSequence && hd > head_seen) head_seen = hd;
  if (c < head_seen) return true;
  // The dead producer's bus still: a successor stores head itself.
  return end == EndReason::producer_died && h->takeovers.load(std::memory_order_acquire) == dead_takeovers &&
         ring.span_mark(c) == detail::RecordRing::Mark::start;
}

detail::Step Consumer::Impl::read_in_place_unusual(std::uint64_t c, layout::RecordHeader* r, std::uint32_t len,
                                                   std::uint32_t records, Message& out) noexcept {
  const std::uint64_t k = len <= ring.max_message() ? ring.checked_records(c, len, records) : 0;
  if (k == 0) return gap_or_corrupt(c, ring.read_gap(r, c), out);
  out.seq = c;
  out.timestamp_ns = detail::RecordRing::load_timestamp(r);
  out.payload = std::span<const std::byte>(detail::RecordRing::payload(r), len);
  out.records = static_cast<std::uint32_t>(k);
  cursor = c + k;
  ++delivered;
  eos_reported = false;
  return Step::message;
}

detail::Step Consumer::Impl::gap_or_corrupt(std::uint64_t c, std::optional<detail::Gap> gap, Message& out) noexcept {
  // In place, what looks like a gap or a corrupt record may be a record
  // the producer is rewriting because it let us go (or our slot was
  // taken) since the call began: stop there, as lapped() does.
  if (!checked && !slot_is_ours()) return Step::taken;
  if (gap) return cross_gap(c, *gap);
  out.seq = c;
  cursor = c + 1;
  return Step::corrupt;
}

detail::Step Consumer::Impl::not_committed(std::uint64_t c, std::uint64_t t, Message& out) noexcept {
  if (detail::tag_state(t, c) == detail::TagState::not_yet) {
    // A checked reader may have landed inside a span (in place, a reader
    // only lands at attach and rejoin, and moves past the inside there).
    if (checked && !detail::RecordRing::is_header(ring.span_mark(c))) [[unlikely]] return lapped(c, out);
    return Step::empty;
  }
  if (stale_span_word(c) && slot_is_ours()) return Step::empty;
  return lapped(c, out);
}

bool Consumer::Impl::stale_span_word(std::uint64_t c) const noexcept {
  if (checked || ring.span_mark(c) != detail::RecordRing::Mark::earlier) return false;
  const std::uint64_t hd = h->head.load(std::memory_order_acquire);
  return hd >= kMaxSequence || hd <= c || hd - c <= cap;
}

detail::Step Consumer::Impl::lapped(std::uint64_t c, Message& out) noexcept {
  // Nobody laps a reader the producer still waits for: one that reads in
  // place stops here, before it reads on in place what is being rewritten.
  if (!checked && !slot_is_ours()) return Step::taken;
  // The slot's span mark first: what its tag word holds may be a span's
  // payload.
  const detail::RecordRing::Mark m = ring.span_mark(c);
  switch (m) {
    case detail::RecordRing::Mark::inside: {
      // We landed inside a span (its start was gone already): its other
      // sequences are lost with it.
      return count_loss(c, land(c));
    }
    case detail::RecordRing::Mark::later: return resume_from(c, ring.span_mark_seq(c), out, false);
    case detail::RecordRing::Mark::start:
    case detail::RecordRing::Mark::earlier: break;
  }
  layout::RecordHeader* r = ring.record(c);
  // Head before the tag (the tag's acquire load keeps this load before it):
  // a tag being written while head was still 0 is a fresh bus's start
  // markers (below), not a lap.
  const std::uint64_t head_before = h->head.load(std::memory_order_acquire);
  const std::uint64_t t = detail::RecordRing::load_tag(r);
  // A later span may have taken the slot since we looked at its mark, and
  // `t` be that span's payload: the producer stores a span's marks before
  // its payload (RecordRing::mark_span()), so after the acquire load of
  // `t` the mark says so. Look again then.
  if (ring.span_mark(c) != m) return Step::empty;
  // The slot was inside a span on an earlier lap: its tag word may still
  // hold that span's payload, so a tag no lap explains means "not yet".
  const bool stale_word = m == detail::RecordRing::Mark::earlier;
  if (detail::tag_state(t, c) != detail::TagState::passed) return Step::empty;  // raced with nothing: read again
  const std::uint64_t tseq = detail::tag_seq(t);
  // Being written while no message was ever published: a bus starting at a
  // later sequence is writing its start markers (Producer::skip_to), which
  // skip nothing. Judged once committed.
  if (detail::is_busy(t) && head_before == 0) return Step::empty;
  if (!ring.same_slot(tseq, c)) {  // a tag that cannot be in this slot
    // A stale tag word, or one a takeover cleared since we loaded it.
    if (stale_word || detail::RecordRing::load_tag(r) != t) return Step::empty;
    out.seq = c;
    cursor = c + 1;
    return Step::corrupt;
  }
  if (t == detail::committed_tag(tseq)) {
    // A gap marker past us (Producer::skip_to): it knows exactly where the
    // stream goes on.
    const std::optional<detail::Gap> gap = ring.read_gap(r, tseq);
    if (gap && detail::RecordRing::unchanged(r, t)) {
      if (!gap->pad) return cross_gap(c, *gap);
      // Padding of a later lap: what lay from us to it is gone, and the
      // padding goes with it (no message of ours lies between).
      count_loss(c, gap->to);
      release();
      return Step::lost;
    }
  }
  return resume_from(c, tseq, out, true);
}

detail::Step Consumer::Impl::resume_from(std::uint64_t c, std::uint64_t found, Message& out, bool from_tag) noexcept {
  // Loaded after the tag's (or mark's) load, which the acquire load or
  // fence before it orders after the producer's stores for `found`, head
  // is at least what the producer had published before it wrote there.
  const std::uint64_t hd = h->head.load(std::memory_order_acquire);
  const std::optional<std::uint64_t> n = detail::resume_after_lap(c, found, hd, cap);
  if (!n) [[unlikely]] {
    // A position a full ring past head: no publish writes one (a batch
    // runs at most half a ring ahead of head, a span with its padding at
    // most a ring). Only skip_to's markers, while BUSY, or a tag that
    // changed under us may look like this: read again. Anything else is a
    // corrupt record, not a lap to a made-up sequence.
    if (from_tag) {
      layout::RecordHeader* r = ring.record(c);
      const std::uint64_t t = detail::RecordRing::load_tag(r);
      if (detail::is_busy(t) || detail::tag_seq(t) != found ||
          ring.span_mark(c) != detail::RecordRing::Mark::start)
        return Step::empty;
      // skip_to commits its markers before it stores head: one seen BUSY
      // above may be committed by now. Read again: the read takes it.
      if (t == detail::committed_tag(found) && ring.read_gap(r, found)) return Step::empty;
    }
    out.seq = c;
    cursor = c + 1;
    return Step::corrupt;
  }
  return count_loss(c, land(*n));
}

detail::Step Consumer::Impl::cross_gap(std::uint64_t c, detail::Gap gap) noexcept {
  const Step s = gap.lost ? count_loss(c, gap.to) : cross_free(c, gap.to);
  // Published at once (short of messages in hand): in `block` the
  // producer waits for every reader to cross the gap before it writes
  // past it.
  release();
  return s;
}

detail::Step Consumer::Impl::lost_commit(Message& out) noexcept {
  // A producer we do not hold (or no longer hold) laps us instead.
  if (!holds || !slot_is_ours()) return Step::empty;
  const std::uint64_t c = cursor;
  const std::uint64_t hd = h->head.load(std::memory_order_acquire);
  if (hd >= kMaxSequence || hd <= c || hd - c < cap) return Step::empty;
  // Committed, or a later record (a gap longer than the ring fills every
  // slot with markers for later sequences): a read decides, not this.
  const std::uint64_t t = detail::RecordRing::load_tag(ring.record(c));
  if (t == detail::committed_tag(c) || detail::tag_state(t, c) == detail::TagState::passed) return Step::empty;
  out.seq = c;
  cursor = c + 1;
  return Step::corrupt;
}
}  // namespace shmbus
