// shmbus — the consumer's state and its per-message read path. Private to
// the library: consumer.cpp (the public calls), consumer_read.cpp (what the
// read path meets besides a message: laps, gaps, padding, corrupt records),
// consumer_slot.cpp (attaching, detaching, a slot let go or taken) and
// consumer_wait.cpp (waiting for data, and what a WaitSet asks).
//
// A consumer owns one ReaderSlot: it writes the slot's cursor line and reads
// everything else. Record `cursor` is ready when head is past it and its
// commit tag equals cursor + 1. Head is loaded (acquire) only when the
// reader reaches the last head it saw (announced()): a reader behind the
// producer reads record after record without touching the producer's
// lines, and one that has caught up waits on head's line (it has one of
// its own, written by the producer alone), as the Disruptor's readers wait
// on a sequence barrier and Aeron's on a tail counter. It never spins on
// the record the producer is about to write: with many readers, each of
// the producer's stores to that line (the BUSY tag, the first payload
// bytes, the commit) would first take it back from every one of them.
// The tag is checked after head (a lap, a gap marker, a record rewritten
// under a copying reader).
//
// The cursor in the slot is published lazily, so the line the producer reads
// when it rescans moves rarely: at the start of a call (so a `block` view
// stays valid until then) once `release_every` messages have been read since
// the last store, and always before waiting (the producer may be waiting for
// exactly those records) and on detach. The producer therefore sees every
// reader at most `release_every - 1` records behind where it really is.
// A store during a call (crossing a gap) never goes past the first message
// that call hands out (`keep_from`).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "attachment.hpp"
#include "consumer_watch.hpp"
#include "role_lock.hpp"
#include "shmbus/consumer.hpp"
#include "sys.hpp"
#include "thread_check.hpp"

namespace shmbus::detail {

constexpr std::size_t kCopyBudget = 4u << 20;  // copy buffer of a checked reader, bytes
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

}  // namespace shmbus::detail

namespace shmbus {

static_assert(Consumer::max_sequence == layout::kMaxSequence);

struct Consumer::Impl : detail::Attachment {
  using Step = detail::Step;
  using Dest = detail::Dest;
  static constexpr std::uint64_t kMaxSequence = layout::kMaxSequence;

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
  // read_batch: the first message of the batch in hand. A release() during
  // the call (crossing padding or a gap after it) stops there: in place,
  // or the producer could write over the views it hands out; for every
  // reader, or a durable name could be stored past messages the caller has
  // not handled yet (a crash then would skip them).
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
  void make_copy_buffer();
  // Room for a message of `length` bytes, which spans records: the buffer
  // grows (to a power of two, at most the bus's max_message), once per
  // longer message than any before. Views into the old buffer die with it,
  // which only a later call may do.
  void grow_copy_buffer(std::size_t length);
  Dest whole_buffer() const noexcept { return {copy.get(), copy_room}; }

  // A reader that lands where it did not come to in order (attach, a lap,
  // a rejoin) may land inside a span: the first position from `c` that is
  // not (layout.hpp, "Spans").
  std::uint64_t land(std::uint64_t c) const noexcept { return ring.skip_inside(c, c + ring.max_span()); }

  void attach();
  void detach() noexcept;
  void drop_bookmark() noexcept;

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
    // At the producer's frontier, head says when the record is there: a
    // reader waits on head's line, never on the record the producer is
    // writing (see the top of this file).
    if (c >= head_seen && !announced(c)) [[unlikely]] return Step::empty;
    layout::RecordHeader* r = ring.record(c);
    const std::uint64_t t = detail::RecordRing::load_tag(r);
    if (t != detail::committed_tag(c)) [[unlikely]] return not_committed(c, t, out);
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

  // Whether record `c` was announced by head: it may be read.
  // A tag word in a slot that held the inside of a span on an earlier lap
  // is that span's payload until the producer writes the slot again, and a
  // payload that ends inside the word leaves the old tag's other bytes:
  // either can read as `c + 1` before record c exists (a 1-byte tail of a
  // span over the tag of the record two laps before it, on a 64-record
  // ring). Head moves past c only after c is written, so a reader looks at
  // a record only below head: it loads head when it reaches the last one
  // it saw, as it catches up with the producer, not per message. The
  // acquire load pairs with publish_head()'s release store, after the
  // record's commit: what the reader loads of the record from here is the
  // producer's. A producer that died between its commit and head leaves a
  // record only the tag announces: looked at where the slot never held a
  // span's inside (its word is a tag's), so that the stream drains.
  [[gnu::noinline]] bool announced(std::uint64_t c) noexcept;

  // In place, a message that spans records, a gap marker, or a corrupt record.
  [[gnu::noinline]] Step read_in_place_unusual(std::uint64_t c, layout::RecordHeader* r, std::uint32_t len,
                                               std::uint32_t records, Message& out) noexcept;

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

  [[gnu::noinline]] Step gap_or_corrupt(std::uint64_t c, std::optional<detail::Gap> gap, Message& out) noexcept;

  // Record `c` does not hold `c`, committed (its tag is `t`).
  [[gnu::noinline]] Step not_committed(std::uint64_t c, std::uint64_t t, Message& out) noexcept;

  // In place, nobody laps us: in a slot that was inside a span on an
  // earlier lap, a later tag is that span's payload left in the tag word
  // (layout.hpp, "Spans") until our record is written, or corruption, which
  // lost_commit() judges once the producer is a ring past us. One thing
  // puts a real later record there: a gap longer than the ring
  // (Producer::skip_to), whose markers fill every slot before head moves
  // more than a ring past us (the acquire load pairs with its release
  // store of head, after the markers).
  bool stale_span_word(std::uint64_t c) const noexcept;

  // Record `c` was overwritten before we read it. Resume at the oldest
  // retained record and count every sequence skipped. (If that one is
  // overwritten too before we read it, the next lap is counted the same way.)
  // A tag no lap can explain makes record `c` corrupt (`out.seq` says which).
  [[gnu::noinline]] Step lapped(std::uint64_t c, Message& out) noexcept;

  // We are lapped: the slot of `c` holds (or is being written for) a later
  // position, `found`, which its tag (`from_tag`) or its span mark says.
  // Resume past everything gone, and past the inside of any span there.
  Step resume_from(std::uint64_t c, std::uint64_t found, Message& out, bool from_tag) noexcept;

  // The cursor `c` is at or before a gap that ends at gap.to: move there.
  // Counted as lost unless the bus started at gap.to (nothing was skipped).
  Step cross_gap(std::uint64_t c, detail::Gap gap) noexcept;

  // True when no more data can come: the producer closed the bus, or the
  // producer that holds the role is dead. Checked only when the ring is empty.
  // `probe`: allowed to test the producer's role lock (one system call; the
  // Waiter says when, at most once per liveness period).
  bool end_of_stream(bool probe) noexcept;

  // A record we wait for that can never come. In `block` the producer
  // commits a record before it stores a head past it, and cannot write a
  // full ring past our cursor; a head a full ring past us with our record
  // still uncommitted means its commit mark was destroyed (a stray store
  // into the segment). Without this, producer and reader would wait for each
  // other forever. Reported as corrupt and skipped; checked only while
  // waiting, with the producer's liveness.
  Step lost_commit(Message& out) noexcept;

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
  std::uint64_t activate(std::uint64_t c) noexcept;

  // True if a record handed out by the last call (in place:
  // `block`, holding the producer) has been overwritten since.
  bool view_overwritten() const noexcept;

  // The producer let us go (its hold limit ran out while it waited for us):
  // it moved our slot from kSlotActive to kSlotBestEffort and counted us in
  // best_effort_readers. From here we read as a best-effort reader does,
  // with checked copies; a lap is reported as ReadStatus::lost by the reads
  // that follow. False if that is not what happened to the slot.
  bool take_let_go(bool& stale_view) noexcept;

  // The slot is not in the state we left it in: we were let go, or it was
  // taken from us. Nothing is read; says which, and what it cost.
  void slot_taken(bool& let_go, bool& evicted, std::uint64_t& lost_now, bool& stale_view) noexcept;

  // slot_taken() for next(): the outcome as a ReadResult.
  [[gnu::cold, gnu::noinline]] void slot_taken(ReadResult& r) noexcept;

  // Our slot was taken from us (cleared by a stray store, or freed by
  // force): the producer stopped counting our cursor and may have
  // overwritten records we had not read. We still hold the slot's role
  // lock, so no other reader can have it: take it back as at attach, at the
  // oldest record the producer has not been free to overwrite, and count
  // what lies between as lost. Sets `stale_view` if a record handed out by
  // the last call (in place: `block`, holding the producer) has been
  // overwritten since.
  std::uint64_t rejoin(bool& stale_view) noexcept;

  // Whether next() has something to say now (WaitSet), without taking it:
  // a message, a loss or corrupt record (what try_read() does not call
  // empty), a slot taken from us, or an end of stream not yet reported.
  // `probe`: allowed to test the producer's role lock.
  bool has_news(bool probe) noexcept;

  detail::ConsumerWatch watch() noexcept;

  // Reads one record, waiting up to `timeout`: spin, then yield, then sleep
  // on data_futex, as WaitOptions say.
  [[gnu::noinline]] Step read_one(Message& out, Dest copy_to, std::chrono::nanoseconds timeout) noexcept;
};

}  // namespace shmbus
