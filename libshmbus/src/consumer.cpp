// shmbus — the consumer side of the ring.
//
// A consumer owns one ReaderSlot: it writes the slot's cursor line and reads
// everything else. It never reads header.head on the hot path: record
// `cursor` is ready when its commit tag equals cursor + 1 (acquire), which
// keeps consumers off the producer's cache lines and off each other's.
//
// The cursor in the slot is published lazily, so the line the producer reads
// when it rescans moves rarely: at the start of a call (so a `block` view
// stays valid until then) once `release_every` messages have been read since
// the last store, and always before waiting (the producer may be waiting for
// exactly those records) and on detach. The producer therefore sees every
// reader at most `release_every - 1` records behind where it really is.
// A store during a call (crossing a gap) never goes past the first message
// that call hands out in place (`keep_from`).
#include "shmbus/consumer.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <utility>

#include "attachment.hpp"
#include "bookmarks.hpp"
#include "consumer_watch.hpp"
#include "reader_table.hpp"
#include "sys.hpp"
#include "thread_check.hpp"
#include "waiter.hpp"

namespace shmbus {

const char* to_string(ReadStatus s) noexcept {
  switch (s) {
    case ReadStatus::message: return "message";
    case ReadStatus::timeout: return "timeout";
    case ReadStatus::end_of_stream: return "end of stream";
    case ReadStatus::lost: return "lost";
    case ReadStatus::corrupt: return "corrupt";
    case ReadStatus::evicted: return "evicted";
    case ReadStatus::let_go: return "let go";
  }
  return "?";
}

const char* to_string(EndReason r) noexcept {
  switch (r) {
    case EndReason::none: return "none";
    case EndReason::closed: return "closed";
    case EndReason::producer_died: return "producer_died";
    case EndReason::removed: return "removed";
  }
  return "?";
}

namespace {
constexpr std::size_t kCopyBudget = 4u << 20;             // copy buffer of a checked reader, bytes
// What one attempt or one wait came to. `empty` (nothing yet) and `moved`
// (the cursor crossed a gap that lost nothing) never leave read_one();
// `timeout` and `eos` (end of stream) come only from it. `no_room`: a checked
// reader's message is longer than the room it was given. `taken`: a reader
// that holds the producer found its record overwritten because the slot was
// taken from it or it was let go; the call ends there, the cursor unmoved,
// and the slot's state is looked at (slot_taken()).
enum class Step { message, empty, lost, corrupt, moved, timeout, eos, taken, no_room };
// Where a checked reader copies a message: `room` bytes at `at`. A message
// longer than that is not read (Step::no_room): the caller finds room and
// tries again. No `at`: the reader's whole copy buffer (read_checked()).
struct Dest {
  std::byte* at = nullptr;
  std::size_t room = 0;
};
using layout::kMaxSequence;
static_assert(Consumer::max_sequence == kMaxSequence);
}  // namespace

struct Consumer::Impl : detail::Attachment {
  layout::ReaderSlot* slot = nullptr;
  std::uint32_t index = 0;
  ConsumerOptions opt;
  detail::RoleFd role;          // holds our slot's (and bookmark's) role lock
  std::uint64_t ticket = 0;     // our attachment's ticket (slot->owner while the slot is ours)
  std::uint64_t view_from = 0;  // first sequence handed out by the last call
  std::uint32_t dead_takeovers = 0;  // header.takeovers when the producer was found dead
  std::uint64_t cursor = 0;     // next sequence to read
  std::uint64_t published = 0;  // cursor as last stored in the slot
  // Head as last loaded: a record before it is committed for good (see
  // announced()). Loaded again only when the reader reaches it.
  std::uint64_t head_seen = 0;
  // read_batch, in place: the first message of the batch in hand. A
  // release() during the call (crossing padding or a gap after it) stops
  // there, or the producer could write over the views it hands out.
  std::uint64_t keep_from = kMaxSequence;
  std::uint64_t retain = kMaxSequence;  // retain_from(): the caller's own floor
  std::uint64_t delivered = 0;
  std::uint64_t lost = 0;
  std::uint64_t last_lost = 0;  // size of the last lap, for ReadStatus::lost
  // The books between two messages handed out (shmbus/placement.hpp): a
  // loss covers every sequence from the end of one to the start of the
  // next, padding crossed on the way included, so that whatever a reader
  // finds between two messages is all lost or all padding. `loss_end`: the
  // cursor just after the last loss; `free_from`..`free_end`: the last run
  // of sequences crossed without loss (padding, start markers). The cursor
  // still at one of those ends means no message came since.
  std::uint64_t loss_end = kMaxSequence;
  std::uint64_t free_from = 0;
  std::uint64_t free_end = kMaxSequence;
  // A loss read_batch() met with messages in hand: told before anything
  // else by the next call, so that a loss always comes before the message
  // after it.
  std::uint64_t deferred_lost = 0;
  std::uint64_t next_liveness = 0;
  bool eos_reported = false;    // end_of_stream returned, nothing read since
  EndReason end = EndReason::none;
  layout::Bookmark* bookmark = nullptr;  // durable: the bookmark we hold
  std::uint32_t bookmark_index = 0;
  bool had_bookmark = false;  // durable: the name was remembered before we took it
  bool started = false;          // cursor holds the start position
  std::uint64_t resume_gap = 0;
  pid_t owner_pid = 0;          // label stored in the slot: our pid when we attached
  std::size_t batch_cap = 64;
  std::uint64_t release_every;  // publish the cursor after this many reads (1 for tiny rings)
  // A reader whose cursor does not hold the producer (an `overwrite` bus, or
  // a best-effort reader of a `block` one) may have its record rewritten
  // while it reads: it copies every record and checks the copy (`checked`).
  // One that holds it reads in place.
  bool holds;
  bool checked;
  std::uint32_t active_state;  // the slot's state while it is ours
  std::unique_ptr<std::byte[]> copy;  // checked: copy_room bytes, at least batch_cap * max_payload
  std::size_t copy_room = 0;
  [[no_unique_address]] detail::OneThread calls;  // debug builds: one thread at a time

  Impl(const Bus& b, const ConsumerOptions& o)
      : Attachment(b),
        opt(o),
        // At most 1/16 of the ring unreleased, so a blocked producer loses little.
        release_every(std::clamp<std::uint64_t>(seg.capacity() / 16, 1, 32)),
        holds(!overwrite && o.hold_producer),
        checked(!holds),
        // Every reader of an `overwrite` bus is one that does not hold the
        // producer already; only a `block` bus tells the two apart.
        active_state(overwrite || holds ? layout::kSlotActive : layout::kSlotBestEffort) {
    if (checked) make_copy_buffer();
  }

  // A checked reader's own buffer: its views point here.
  void make_copy_buffer() {
    batch_cap = std::clamp<std::size_t>(kCopyBudget / std::max<std::uint32_t>(1, max_payload), 1, 64);
    copy_room = batch_cap * max_payload;
    copy = std::make_unique<std::byte[]>(copy_room);
  }
  // Room for a message of `length` bytes, which spans records: the buffer
  // grows (to a power of two, at most the bus's max_message), once per
  // longer message than any before. Views into the old buffer die with it,
  // which only a later call may do.
  void grow_copy_buffer(std::size_t length) {
    std::size_t room = copy_room;
    while (room < length) room *= 2;
    room = std::max<std::size_t>(std::min<std::size_t>(room, ring.max_message()), length);
    copy = std::make_unique<std::byte[]>(room);
    copy_room = room;
  }
  Dest whole_buffer() const noexcept { return {copy.get(), copy_room}; }

  // A reader that lands where it did not come to in order (attach, a lap,
  // a rejoin) may land inside a span: the first position from `c` that is
  // not (layout.hpp, "Spans").
  std::uint64_t land(std::uint64_t c) const noexcept { return ring.skip_inside(c, c + ring.max_span()); }

  void attach();
  void detach() noexcept;
  void drop_bookmark() noexcept {
    if (!bookmark) return;
    if (started) {
      bookmark->cursor.store(cursor, std::memory_order_relaxed);
    } else if (!had_bookmark) {
      // Refused before it started: a name it created is not remembered.
      bookmark->state.store(layout::kBookmarkEmpty, std::memory_order_release);
    }
    detail::release_bookmark(seg, bookmark_index, role.get());
    bookmark = nullptr;
  }

  void release_if_due() noexcept {
    if (cursor - published >= release_every) release();
  }

  void release() noexcept {
    const std::uint64_t to = std::min({cursor, keep_from, retain});
    if (to <= published) return;
    // Only we write it while we hold the name's lock; the next holder reads
    // it after taking that lock, which our unlock in release_bookmark()
    // orders after this store.
    if (bookmark) bookmark->cursor.store(to, std::memory_order_relaxed);
    slot->delivered.store(delivered, std::memory_order_relaxed);
    slot->lost.store(lost, std::memory_order_relaxed);
    // Frees every record before `to`: pairs with the producer's acquire
    // load of cursors when it rescans.
    slot->cursor.store(to, std::memory_order_release);
    const std::uint64_t before = published;
    published = to;
    if (holds) {
      // Dekker with a producer going to sleep for space: we stored the
      // cursor, now load producer_sleeping; it stores producer_sleeping, then
      // heavy_barrier() and rescans cursors. Only a cursor that crosses the
      // producer's space_wanted wakes it: readers already past the mark, and
      // steps that stay below it, cost no system call.
      detail::light_barrier();
      // Acquire pairs with the producer's release store of producer_sleeping.
      if (h->producer_sleeping.load(std::memory_order_acquire) == 0) [[likely]] return;
      const std::uint64_t wanted = h->space_wanted.load(std::memory_order_relaxed);
      if (before < wanted && to >= wanted &&
          h->producer_sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
        h->space_futex.fetch_add(1, std::memory_order_release);
        detail::futex_wake(&h->space_futex, 1);
        h->wakeups.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  // One attempt at record `cursor`. `out` is filled for Step::message (and
  // its seq for Step::corrupt); `copy_to` receives the payload when checked.
  [[gnu::always_inline]] Step try_read(Message& out, Dest dst) noexcept {
    Step s = try_read_once(out, dst);
    while (s == Step::moved) [[unlikely]] s = try_read_once(out, dst);
    return s;
  }

  // Kept small enough to inline into next(): the common cases (a one-record
  // message in place, a checked copy) here, the rest out of line.
  [[gnu::always_inline]] Step try_read_once(Message& out, Dest dst) noexcept {
    const std::uint64_t c = cursor;
    layout::RecordHeader* r = ring.record(c);
    const std::uint64_t t = detail::RecordRing::load_tag(r);
    if (t != detail::committed_tag(c)) [[unlikely]] return not_committed(c, t, out);
    if (c >= head_seen && !announced(c)) [[unlikely]] return Step::empty;
    if (checked) return read_checked(c, t, out, dst);
    // In place: no writer is on a record we have not read.
    const std::uint32_t len = detail::RecordRing::load_length(r);
    const std::uint32_t k = detail::RecordRing::load_records(r);
    if ((len > max_payload) | (k != 1)) [[unlikely]] return read_in_place_unusual(c, r, len, k, out);
    out.seq = c;
    out.timestamp_ns = detail::RecordRing::load_timestamp(r);
    out.payload = std::span<const std::byte>(detail::RecordRing::payload(r), len);
    out.records = 1;
    cursor = c + 1;
    ++delivered;
    eos_reported = false;
    return Step::message;
  }

  // Whether record `c`, whose tag says committed, was announced by head.
  // A tag word in a slot that held the inside of a span on an earlier lap
  // is that span's payload until the producer writes the slot again, and a
  // payload that ends inside the word leaves the old tag's other bytes:
  // either can read as `c + 1` before record c exists (a 1-byte tail of a
  // span over the tag of the record two laps before it, on a 64-record
  // ring). Head moves past c only after c is written, so a reader trusts a
  // commit tag only below head: it loads head when it reaches the last one
  // it saw, as it catches up with the producer, not per message. The
  // acquire load pairs with publish_head()'s release store, after the
  // record's commit: what the reader loads of the record from here is the
  // producer's. A producer that died between its commit and head leaves a
  // record only the tag announces: trusted where the slot never held a
  // span's inside (its word is a tag's), so that the stream drains.
  [[gnu::noinline]] bool announced(std::uint64_t c) noexcept {
    const std::uint64_t hd = h->head.load(std::memory_order_acquire);
    if (hd < kMaxSequence && hd > head_seen) head_seen = hd;
    if (c < head_seen) return true;
    return end == EndReason::producer_died && ring.span_mark(c) == detail::RecordRing::Mark::start;
  }

  // In place, a message that spans records, a gap marker, or a corrupt record.
  [[gnu::noinline]] Step read_in_place_unusual(std::uint64_t c, layout::RecordHeader* r, std::uint32_t len,
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

  // A checked copy of record `c` (tag `t`, committed): the producer may be
  // rewriting it now. `dst` with no `at`: the whole copy buffer.
  Step read_checked(std::uint64_t c, std::uint64_t t, Message& out, Dest dst) noexcept {
    if (dst.at == nullptr) dst = whole_buffer();
    detail::RecordRing::Copy copied;
    if (!ring.copy_checked(c, t, dst.at, dst.room, copied)) return lapped(c, out);
    if (copied.no_room) [[unlikely]] {
      out.payload = std::span<const std::byte>(static_cast<const std::byte*>(nullptr), copied.length);
      return Step::no_room;
    }
    if (copied.gap || copied.records == 0) [[unlikely]] return gap_or_corrupt(c, copied.gap, out);
    out.seq = c;
    out.timestamp_ns = copied.timestamp_ns;
    out.payload = std::span<const std::byte>(dst.at, copied.length);
    out.records = static_cast<std::uint32_t>(copied.records);
    cursor = c + copied.records;
    ++delivered;
    eos_reported = false;
    return Step::message;
  }

  // The cursor moves from `c` to `to`, and everything in between is lost,
  // with any padding crossed since the last message.
  Step count_loss(std::uint64_t c, std::uint64_t to) noexcept {
    const std::uint64_t from = c == free_end ? free_from : c;
    last_lost = to - from;
    lost += last_lost;
    cursor = loss_end = to;
    free_end = kMaxSequence;
    return Step::lost;
  }
  // The cursor moves from `c` to `to` over sequences that hold no message
  // (padding, a bus's start markers): nothing lost, unless a loss came
  // since the last message, which then runs on over them.
  Step cross_free(std::uint64_t c, std::uint64_t to) noexcept {
    if (c == loss_end) return count_loss(c, to);
    if (c != free_end) free_from = c;
    cursor = free_end = to;
    return Step::moved;
  }

  [[gnu::noinline]] Step gap_or_corrupt(std::uint64_t c, std::optional<detail::Gap> gap, Message& out) noexcept {
    // In place, what looks like a gap or a corrupt record may be a record
    // the producer is rewriting because it let us go (or our slot was
    // taken) since the call began: stop there, as lapped() does.
    if (!checked && !slot_is_ours()) return Step::taken;
    if (gap) return cross_gap(c, *gap);
    out.seq = c;
    cursor = c + 1;
    return Step::corrupt;
  }

  // Record `c` does not hold `c`, committed (its tag is `t`).
  [[gnu::noinline]] Step not_committed(std::uint64_t c, std::uint64_t t, Message& out) noexcept {
    if (detail::tag_state(t, c) == detail::TagState::not_yet) {
      // A checked reader may have landed inside a span (in place, a reader
      // only lands at attach and rejoin, and moves past the inside there).
      if (checked && !detail::RecordRing::is_header(ring.span_mark(c))) [[unlikely]] return lapped(c, out);
      return Step::empty;
    }
    if (stale_span_word(c) && slot_is_ours()) return Step::empty;
    return lapped(c, out);
  }

  // In place, nobody laps us: in a slot that was inside a span on an
  // earlier lap, a later tag is that span's payload left in the tag word
  // (layout.hpp, "Spans") until our record is written, or corruption, which
  // lost_commit() judges once the producer is a ring past us. One thing
  // puts a real later record there: a gap longer than the ring
  // (Producer::skip_to), whose markers fill every slot before head moves
  // more than a ring past us (the acquire load pairs with its release
  // store of head, after the markers).
  bool stale_span_word(std::uint64_t c) const noexcept {
    if (checked || ring.span_mark(c) != detail::RecordRing::Mark::earlier) return false;
    const std::uint64_t hd = h->head.load(std::memory_order_acquire);
    return hd >= kMaxSequence || hd <= c || hd - c <= cap;
  }

  // Record `c` was overwritten before we read it. Resume at the oldest
  // retained record and count every sequence skipped. (If that one is
  // overwritten too before we read it, the next lap is counted the same way.)
  // A tag no lap can explain makes record `c` corrupt (`out.seq` says which).
  [[gnu::noinline]] Step lapped(std::uint64_t c, Message& out) noexcept {
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

  // We are lapped: the slot of `c` holds (or is being written for) a later
  // position, `found`, which its tag (`from_tag`) or its span mark says.
  // Resume past everything gone, and past the inside of any span there.
  Step resume_from(std::uint64_t c, std::uint64_t found, Message& out, bool from_tag) noexcept {
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

  // The cursor `c` is at or before a gap that ends at gap.to: move there.
  // Counted as lost unless the bus started at gap.to (nothing was skipped).
  Step cross_gap(std::uint64_t c, detail::Gap gap) noexcept {
    const Step s = gap.lost ? count_loss(c, gap.to) : cross_free(c, gap.to);
    // Published at once (short of messages in hand): in `block` the
    // producer waits for every reader to cross the gap before it writes
    // past it.
    release();
    return s;
  }

  // True when no more data can come: the producer closed the bus, or the
  // producer that holds the role is dead. Checked only when the ring is empty.
  // `probe`: allowed to test the producer's role lock (one system call; the
  // Waiter says when, at most once per liveness period).
  bool end_of_stream(bool probe) noexcept {
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

  // A record we wait for that can never come. In `block` the producer
  // commits a record before it stores a head past it, and cannot write a
  // full ring past our cursor; a head a full ring past us with our record
  // still uncommitted means its commit mark was destroyed (a stray store
  // into the segment). Without this, producer and reader would wait for each
  // other forever. Reported as corrupt and skipped; checked only while
  // waiting, with the producer's liveness.
  Step lost_commit(Message& out) noexcept {
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

  // True while the producer counts our cursor: nobody reclaimed the slot or
  // wrote over its state. One load of a line only attach and reclaim write
  // (a stray store over the owner ticket alone changes nothing the producer
  // does; detach then leaves the slot to gc).
  bool slot_is_ours() const noexcept {
    return slot->state.load(std::memory_order_relaxed) == active_state;
  }

  // Makes cursor `c` binding for the producer (for a best-effort reader:
  // visible) and returns it, raised to the producer's floor if, in `block`,
  // the producer moved past it meanwhile. Dekker with the producer's
  // rescan: we store our cursor and state, fence, then load its floor; it
  // stores the floor, fences, then loads cursors again. Either it sees our
  // cursor, or we see its floor.
  std::uint64_t activate(std::uint64_t c) noexcept {
    slot->cursor.store(c, std::memory_order_relaxed);
    // From here the producer counts our cursor (pairs with its acquire load).
    slot->state.store(active_state, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!overwrite) {
      const std::uint64_t floor = bus.oldest();
      if (c < floor) {
        c = floor;
        slot->cursor.store(c, std::memory_order_release);
      }
    }
    return c;
  }

  // True if a record handed out by the last call (in place:
  // `block`, holding the producer) has been overwritten since.
  bool view_overwritten() const noexcept {
    if (checked) return false;
    for (std::uint64_t s = view_from; s < cursor;) {
      layout::RecordHeader* r = ring.record(s);
      if (detail::RecordRing::load_tag(r) != detail::committed_tag(s) ||
          !detail::RecordRing::is_header(ring.span_mark(s)))
        return true;
      s += std::max<std::uint32_t>(1, detail::RecordRing::load_records(r));
    }
    return false;
  }

  // The producer let us go (its hold limit ran out while it waited for us):
  // it moved our slot from kSlotActive to kSlotBestEffort and counted us in
  // best_effort_readers. From here we read as a best-effort reader does,
  // with checked copies; a lap is reported as ReadStatus::lost by the reads
  // that follow. False if that is not what happened to the slot.
  bool take_let_go(bool& stale_view) noexcept {
    // Relaxed: the state is all we need from the producer's exchange; the
    // records it rewrites afterwards are read with checked copies from here.
    if (!holds || !role || slot->state.load(std::memory_order_relaxed) != layout::kSlotBestEffort ||
        slot->owner.load(std::memory_order_relaxed) != ticket)
      return false;
    stale_view = view_overwritten();
    holds = false;
    checked = true;
    active_state = layout::kSlotBestEffort;
    make_copy_buffer();  // once per attachment; out of memory ends the process, as anywhere in it
    view_from = cursor;
    return true;
  }

  // The slot is not in the state we left it in: we were let go, or it was
  // taken from us. Nothing is read; says which, and what it cost.
  void slot_taken(bool& let_go, bool& evicted, std::uint64_t& lost_now, bool& stale_view) noexcept {
    if (take_let_go(stale_view)) {
      let_go = true;
    } else {
      evicted = true;
      lost_now += rejoin(stale_view);
    }
  }

  // slot_taken() for next(): the outcome as a ReadResult.
  [[gnu::cold, gnu::noinline]] void slot_taken(ReadResult& r) noexcept {
    bool let_go = false, evicted = false;
    slot_taken(let_go, evicted, r.lost, r.stale_view);
    r.status = let_go ? ReadStatus::let_go : ReadStatus::evicted;
    r.message = {};
    r.message.seq = cursor;
  }

  // Our slot was taken from us (cleared by a stray store, or freed by
  // force): the producer stopped counting our cursor and may have
  // overwritten records we had not read. We still hold the slot's role
  // lock, so no other reader can have it: take it back as at attach, at the
  // oldest record the producer has not been free to overwrite, and count
  // what lies between as lost. Sets `stale_view` if a record handed out by
  // the last call (in place: `block`, holding the producer) has been
  // overwritten since.
  std::uint64_t rejoin(bool& stale_view) noexcept {
    stale_view = false;
    // Without the slot's lock (a forked child's copy of a consumer) the slot
    // is not ours to take back: this copy stays evicted.
    if (!role) return 0;
    stale_view = view_overwritten();
    const std::uint64_t from = cursor;
    ticket = slot->generation.fetch_add(1, std::memory_order_relaxed) + 1;
    slot->owner.store(ticket, std::memory_order_relaxed);
    slot->pid.store(static_cast<std::uint32_t>(owner_pid), std::memory_order_relaxed);
    const std::uint64_t hd = h->head.load(std::memory_order_acquire);
    const std::uint64_t c0 = activate(std::max(cursor, std::min(detail::oldest_retained(seg, hd), hd)));
    const std::uint64_t c = land(c0);
    published = c0;
    count_loss(from, c);
    view_from = c;
    slot->lost.store(lost, std::memory_order_relaxed);
    return last_lost;
  }

  // Whether next() has something to say now (WaitSet), without taking it:
  // a message, a loss or corrupt record (what try_read() does not call
  // empty), a slot taken from us, or an end of stream not yet reported.
  // `probe`: allowed to test the producer's role lock.
  bool has_news(bool probe) noexcept {
    if (!slot_is_ours()) return true;
    if (deferred_lost != 0) {
      release();  // between calls nothing is in hand
      return true;
    }
    const std::uint64_t c = cursor;
    const std::uint64_t t = detail::RecordRing::load_tag(ring.record(c));
    // A ready tag is news once head says so (announced()): a stale word
    // that reads as it is not, or a WaitSet would return at once, for as
    // long as the producer does not write the record.
    if (t == detail::committed_tag(c)) {
      if (c < head_seen || announced(c)) return true;
    } else if (detail::tag_state(t, c) == detail::TagState::not_yet) {
      if (checked && !detail::RecordRing::is_header(ring.span_mark(c))) return true;  // landed inside a span
    } else if (!stale_span_word(c)) {
      return true;  // lapped, a gap's marker, or a tag no lap explains (not_committed() says which)
    }
    if (!eos_reported && end_of_stream(probe)) return true;
    // Nothing to read: the caller is about to wait (keep_from is unset
    // between calls), and the producer may be waiting for the records we
    // hold, as before any wait (read_one()).
    release();
    return false;
  }

  detail::ConsumerWatch watch() noexcept {
    detail::ConsumerWatch w;
    w.h = h;
    w.slot = slot;
    w.seg = &seg;
    w.tag = &ring.record(cursor)->tag;
    // Acquire: as try_read()'s load; a tag that moves on from here is news.
    w.tag_seen = w.tag->load(std::memory_order_acquire);
    w.tag_ready = detail::committed_tag(cursor);
    w.seq = cursor;
    w.state_seen = active_state;
    w.end_pending = !eos_reported;
    return w;
  }

  // Reads one record, waiting up to `timeout`: spin, then yield, then sleep
  // on data_futex, as WaitOptions say.
  [[gnu::noinline]] Step read_one(Message& out, Dest copy_to, std::chrono::nanoseconds timeout) noexcept {
    Step s = try_read(out, copy_to);
    if (s != Step::empty) [[likely]] return s;
    // About to wait: the producer may be waiting for the records we hold.
    release();

    slot->last_active_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
    bool eos = false;
    for (detail::Waiter w(opt.wait, timeout, next_liveness);; w.tick()) {
      // The liveness probe is kept out of the spin phase (a short wait makes
      // no system call), except for a caller that does not wait at all.
      const bool probe = !eos && w.liveness_due();
      if (probe) {
        s = lost_commit(out);
        if (s != Step::empty) return s;
      }
      if (!eos && end_of_stream(probe)) {
        // Everything committed before the close (or the death) is visible now.
        s = try_read(out, copy_to);
        if (s != Step::empty) return s;
        // A reader let go (or whose slot was taken) while it read in place
        // may find nothing where the producer has since moved on: say that
        // first; the next call reads on from where it now stands, and the
        // end comes after what is left.
        if (!checked && !slot_is_ours()) return Step::taken;
        // Report it once; after that, wait (asleep) for a new producer until
        // the timeout, instead of returning at once to a spinning caller.
        if (!eos_reported || w.expired()) {
          eos_reported = true;
          return Step::eos;
        }
        eos = true;
      }
      if (w.expired()) return eos ? Step::eos : Step::timeout;
      switch (eos ? detail::Waiter::Phase::sleep : w.phase()) {
        case detail::Waiter::Phase::spin:
          // One load of a line we read next anyway: checked after every pause.
          for (int k = 0; k < detail::kSpinStep; ++k) {
            detail::cpu_relax();
            s = try_read(out, copy_to);
            if (s != Step::empty) return s;
          }
          continue;
        case detail::Waiter::Phase::yield: w.yield(); break;
        case detail::Waiter::Phase::sleep: {
          // Dekker with the producer (consumer_watch.hpp, arm_data_sleep()).
          // A WaitSet's thread may own the sleeping flag already: then it
          // is not ours to clear.
          const bool mine = detail::arm_data_sleep(h, slot);
          const std::uint32_t seen = h->data_futex.load(std::memory_order_acquire);
          const bool barrier_ok = detail::heavy_barrier();
          s = try_read(out, copy_to);
          if (s == Step::empty && (eos || h->closed.load(std::memory_order_acquire) == 0))
            detail::futex_wait(&h->data_futex, seen, w.sleep_slice(barrier_ok, detail::kLivenessPeriodNs));
          detail::disarm_data_sleep(h, slot, mine);
          slot->last_active_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
          if (s != Step::empty) return s;
          if (eos && !end_of_stream(false)) eos = false;  // a new producer took over: wait for its data as usual
          break;
        }
      }
      s = try_read(out, copy_to);
      if (s != Step::empty) return s;
    }
  }
};

void Consumer::Impl::attach() {
  detail::register_barrier();
  if (opt.name.size() >= sizeof(layout::ReaderSlot::name))
    detail::fail(Errc::invalid_options, seg.info().name,
                 "reader name '" + opt.name + "' is " + std::to_string(opt.name.size()) + " bytes, more than " +
                     std::to_string(sizeof(layout::ReaderSlot::name) - 1));
  if (opt.start == Start::resume) opt.durable = true;
  if (opt.durable && opt.name.empty())
    detail::fail(Errc::invalid_options, seg.info().name, "a durable reader needs a name");
  // Our own open file description: the slot and the name are held through
  // locks on it, which the kernel drops when this process dies.
  role = seg.open_role_fd();
  if (opt.durable) {
    bool created = false;
    // Before a reader slot, so a refusal leaves nothing to undo. The cursor
    // of a new bookmark is set below, once the start is known.
    bookmark_index = detail::hold_bookmark(seg, opt.name, role.get(), 0, created);
    bookmark = seg.bookmark(bookmark_index);
    had_bookmark = !created;
  }
  const std::uint32_t n = seg.max_readers();
  int lock_error = 0;
  for (int pass = 0; pass < 4 && !slot && lock_error == 0; ++pass) {
    bool briefly_locked = false;  // a slot in nobody's use, locked for a moment by a reclaimer
    for (std::uint32_t i = 0; i < n && !slot; ++i) {
      // Free for us exactly when no live process holds its lock.
      if (!detail::try_lock(role.get(), layout::reader_lock_byte(i))) {
        if (errno != EAGAIN && errno != EACCES) lock_error = errno;
        const layout::ReaderSlot* r = seg.reader(i);
        briefly_locked |= r->owner.load(std::memory_order_relaxed) == layout::kOwnerFree &&
                          r->state.load(std::memory_order_relaxed) == layout::kSlotFree;
        continue;
      }
      detail::clean_slot(seg, i);  // left in use by a reader that died
      slot = seg.reader(i);
      index = i;
    }
    if (!briefly_locked) break;
    ::sched_yield();  // setup path: let the reclaimer finish
  }
  if (!slot) {
    drop_bookmark();  // not started: a name created just now is not remembered
    if (lock_error)
      detail::fail(Errc::system, seg.info().name,
                   std::string("cannot lock a reader slot: ") + std::strerror(lock_error));
    detail::fail(Errc::reader_table_full, seg.info().name,
                 "all " + std::to_string(n) + " reader slots hold live readers");
  }

  owner_pid = ::getpid();
  // Before the ticket: a stamp from a producer that let the slot's last
  // attachment go must never be taken for ours.
  slot->let_go_ns.store(0, std::memory_order_relaxed);
  // Only the holder of the slot's lock writes its first line.
  ticket = slot->generation.fetch_add(1, std::memory_order_relaxed) + 1;
  slot->owner.store(ticket, std::memory_order_relaxed);
  slot->pid.store(static_cast<std::uint32_t>(owner_pid), std::memory_order_relaxed);
  slot->start_ticks.store(detail::self_start_ticks(), std::memory_order_relaxed);
  slot->pid_ns.store(detail::self_pid_namespace(), std::memory_order_relaxed);
  std::memset(slot->name, 0, sizeof slot->name);
  std::memcpy(slot->name, opt.name.data(), std::min(opt.name.size(), sizeof slot->name - 1));
  slot->attach_time_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
  slot->delivered.store(0, std::memory_order_relaxed);
  slot->lost.store(0, std::memory_order_relaxed);
  slot->sleeping.store(0, std::memory_order_relaxed);
  slot->last_active_ns.store(detail::realtime_ns(), std::memory_order_relaxed);

  // `lo`..`hi` - 1 retained; ranges in messages name their first and last sequence.
  auto not_retained = [&](std::uint64_t seq, std::uint64_t lo, std::uint64_t hi) {
    detach();
    const std::string held = hi > lo ? "the bus holds " + std::to_string(lo) + ".." + std::to_string(hi - 1)
                                     : "the bus holds no message; the next is seq " + std::to_string(hi);
    detail::fail(Errc::not_retained, seg.info().name,
                 "sequence " + std::to_string(seq) + " is not retained (" + held + ")");
  };
  const std::uint64_t hd = bus.head();
  const std::uint64_t oldest = bus.oldest();
  // Untrusted: no bus publishes 2^62 messages (146 years at 10^9 a second).
  // Refused here, a cursor never comes near 2^64, where seq + 1 would wrap
  // to the tag of a record never written.
  if (hd >= kMaxSequence) {
    detach();
    detail::fail(Errc::corrupt, seg.info().name, "head " + std::to_string(hd) + " is impossible");
  }
  std::uint64_t c = 0;
  switch (opt.start) {
    case Start::earliest: c = oldest; break;
    case Start::latest: c = hd; break;
    case Start::sequence:
      if (opt.start_seq < oldest || opt.start_seq > hd) not_retained(opt.start_seq, oldest, hd);
      c = opt.start_seq;
      break;
    case Start::resume:
      c = oldest;
      if (had_bookmark) {
        // Untrusted: clamped to what can exist.
        const std::uint64_t b = std::min(bookmark->cursor.load(std::memory_order_relaxed), hd);
        if (b >= oldest) {
          c = b;
        } else {
          resume_gap = oldest - b;
        }
      }
      break;
  }
  const std::uint64_t wanted = c;
  // Counted before our state says so: from the first record we may read,
  // the producer writes payloads word by word (see best_effort_readers).
  if (active_state == layout::kSlotBestEffort) h->best_effort_readers.fetch_add(1, std::memory_order_seq_cst);
  c = activate(c);
  if (c > wanted) {  // the producer moved past it while we attached
    if (opt.start == Start::sequence) not_retained(opt.start_seq, c, bus.head());
    if (opt.start == Start::resume && had_bookmark) resume_gap += c - wanted;
  }
  published = c;
  // Never inside a span: a start there moves on to the next message (in
  // `block` the producer keeps what we look at, from our cursor on).
  const std::uint64_t landed = land(c);
  if (landed != c) {
    if (opt.start == Start::sequence) {
      detach();
      detail::fail(Errc::not_retained, seg.info().name,
                   "sequence " + std::to_string(opt.start_seq) +
                       " is inside a message that spans records (the next message starts at " +
                       std::to_string(landed) + ")");
    }
    if (opt.start == Start::resume && had_bookmark) resume_gap += landed - c;
    c = landed;
  }
  cursor = view_from = c;
  started = true;
  lost = resume_gap;
  if (bookmark) bookmark->cursor.store(c, std::memory_order_relaxed);
  // A producer waiting for readers sleeps on space_futex.
  h->space_futex.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&h->space_futex, INT_MAX);
}

void Consumer::Impl::detach() noexcept {
  if (!slot) return;
  // A forked child destroying its copy must not free its parent's slot (its
  // copy of the role's descriptor was closed at fork).
  if (!role) {
    slot = nullptr;
    bookmark = nullptr;
    return;
  }
  drop_bookmark();
  // Only if the slot is still ours (it is not, if it was reclaimed; it is,
  // if we are refused before it became active).
  if (slot->owner.load(std::memory_order_relaxed) == ticket) {
    slot->delivered.store(delivered, std::memory_order_relaxed);
    slot->lost.store(lost, std::memory_order_relaxed);
    // The producer stops counting our cursor (pairs with its acquire load).
    const std::uint32_t was = slot->state.exchange(layout::kSlotFree, std::memory_order_acq_rel);
    slot->owner.store(layout::kOwnerFree, std::memory_order_release);
    if (was == layout::kSlotBestEffort) detail::forget_best_effort_reader(seg);
    if (holds) {
      h->space_futex.fetch_add(1, std::memory_order_release);
      detail::futex_wake(&h->space_futex, INT_MAX);
    }
  }
  detail::unlock(role.get(), layout::reader_lock_byte(index));
  role = detail::RoleFd();
  slot = nullptr;
}

// ---- public API ----

Consumer::Consumer(const Bus& bus, const ConsumerOptions& options)
    : impl_(std::make_unique<Impl>(bus, options)) {
  impl_->attach();
}

Consumer::~Consumer() {
  if (!impl_) return;
  detail::OneThread::Scope in(impl_->calls, "~Consumer");
  impl_->detach();
}

Consumer::Consumer(Consumer&&) noexcept = default;
Consumer& Consumer::operator=(Consumer&& o) noexcept {
  if (this != &o) {
    if (impl_) {
      detail::OneThread::Scope in(impl_->calls, "Consumer::operator=");
      impl_->detach();
    }
    impl_ = std::move(o.impl_);
  }
  return *this;
}

ReadResult Consumer::next(std::chrono::nanoseconds timeout) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::next");
  ReadResult r;
  if (c.deferred_lost != 0) [[unlikely]] {
    r.status = ReadStatus::lost;
    r.lost = std::exchange(c.deferred_lost, 0);
    r.message.seq = c.cursor;
    return r;
  }
  if (!c.slot_is_ours()) [[unlikely]] {
    c.slot_taken(r);
    return r;
  }
  c.release_if_due();
  // The common case inline: the record at the cursor is committed. Dest{}:
  // a checked reader copies into its whole buffer (read_checked() looks it
  // up, off the in-place path).
  Step s = c.try_read(r.message, Dest{});
  if (s == Step::message) [[likely]] {
    r.status = ReadStatus::message;
    c.view_from = r.message.seq;  // only this record is in hand (not a gap crossed on the way)
    return r;
  }
  if (s == Step::empty) s = c.read_one(r.message, Dest{}, timeout);
  // A message longer than any before (a checked reader's copy): room, then read it.
  while (s == Step::no_room) [[unlikely]] {
    c.grow_copy_buffer(r.message.payload.size());
    s = c.try_read(r.message, Dest{});
  }
  switch (s) {
    case Step::message:
      r.status = ReadStatus::message;
      c.view_from = r.message.seq;
      return r;
    case Step::lost:
      r.status = ReadStatus::lost;
      r.lost = c.last_lost;
      r.message = {};
      break;
    case Step::corrupt:
      r.status = ReadStatus::corrupt;
      r.message.payload = {};
      break;
    case Step::empty:
    case Step::moved:
    case Step::no_room:
    case Step::timeout: r.status = ReadStatus::timeout; break;
    case Step::eos:
      r.status = ReadStatus::end_of_stream;
      r.end_reason = c.end;
      break;
    case Step::taken: c.slot_taken(r); break;
  }
  c.view_from = c.cursor;  // nothing in hand
  return r;
}

std::span<const Message> Consumer::read_batch(std::span<Message> out, PollResult& result,
                                              std::chrono::nanoseconds timeout, bool after_messages) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::read_batch");
  result = {};
  if (after_messages && c.deferred_lost != 0) return out.first(0);
  result.lost = std::exchange(c.deferred_lost, 0);
  if (!c.slot_is_ours()) [[unlikely]] {
    c.slot_taken(result.let_go, result.evicted, result.lost, result.stale_view);
    return out.first(0);
  }
  c.view_from = c.cursor;
  c.release_if_due();
  const std::size_t max = std::min(out.size(), c.checked ? c.batch_cap : out.size());
  std::size_t n = 0;
  bool may_wait = true;
  while (n < max) {
    // Message n of the batch is copied to the n-th record's room; the first
    // may use the whole buffer (a message that spans records).
    const Dest copy_to = n == 0 || !c.copy ? Dest{} : Dest{c.copy.get() + n * c.max_payload, c.max_payload};
    Step s = may_wait ? c.read_one(out[n], copy_to, timeout) : c.try_read(out[n], copy_to);
    if (s == Step::no_room) {
      // A message that spans records: alone in its batch.
      if (n > 0) break;
      c.grow_copy_buffer(out[n].payload.size());
      s = c.try_read(out[n], Dest{});
      if (s == Step::message) {
        ++n;
        break;
      }
    }
    if (s == Step::empty || s == Step::no_room) break;
    if (s == Step::message) {
      if (n == 0 && !c.checked) c.keep_from = out[0].seq;
      ++n;
      may_wait = false;
      // A copied message that spans records used the room of those after it.
      if (c.checked && out[n - 1].payload.size() > c.max_payload) break;
    } else if (s == Step::lost) {
      if (n > 0 || after_messages) {
        // Told before the message after it: by the next call.
        c.deferred_lost += c.last_lost;
        break;
      }
      result.lost += c.last_lost;
    } else if (s == Step::corrupt) {
      ++result.corrupt;
    } else {
      if (s == Step::eos) {
        result.end_of_stream = true;
        result.end_reason = c.end;
      }
      // Taken with messages in hand: they go out now, the next call says what happened.
      if (s == Step::taken && n == 0) c.slot_taken(result.let_go, result.evicted, result.lost, result.stale_view);
      break;
    }
  }
  result.count = n;
  c.keep_from = kMaxSequence;  // the next call starts by letting them go
  // What is in hand: from the first message (a gap crossed before it is not).
  c.view_from = n > 0 ? out[0].seq : c.cursor;
  return out.first(n);
}

void Consumer::retain_from(std::uint64_t seq) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::retain_from");
  c.retain = std::min(seq, kMaxSequence);
  c.release();  // between calls nothing is in hand
}

std::uint64_t Consumer::cursor() const noexcept { return impl_->cursor; }
std::uint64_t Consumer::delivered() const noexcept { return impl_->delivered; }
std::uint64_t Consumer::lost() const noexcept { return impl_->lost; }
std::uint32_t Consumer::slot() const noexcept { return impl_->index; }
const Bus& Consumer::bus() const noexcept { return impl_->bus; }
EndReason Consumer::end_reason() const noexcept { return impl_->end; }
bool Consumer::resumed() const noexcept { return impl_->had_bookmark && impl_->opt.start == Start::resume; }
std::uint64_t Consumer::resume_gap() const noexcept { return impl_->resume_gap; }

namespace detail {

bool ConsumerAccess::has_news(Consumer& c, bool probe) noexcept { return c.impl_->has_news(probe); }
ConsumerWatch ConsumerAccess::watch(Consumer& c) noexcept { return c.impl_->watch(); }

bool watch_fired(const ConsumerWatch& w, bool probe) noexcept {
  // Acquire: pairs with the producer's release of the commit tag.
  const std::uint64_t t = w.tag->load(std::memory_order_acquire);
  // A ready tag counts once head is past the record (see announced()); the
  // producer wakes sleepers after it stores head.
  if (t == w.tag_ready) {
    const std::uint64_t hd = w.h->head.load(std::memory_order_acquire);
    if (hd > w.seq && hd < layout::kMaxSequence) return true;
  } else if (t != w.tag_seen) {
    return true;
  }
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
