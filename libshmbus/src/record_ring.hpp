// shmbus — the record protocol, over any memory. Private to the library.
//
// A RecordRing is `capacity` records of `record_size` bytes (layout.hpp,
// "Record") laid end to end in memory it does not own: the log of a mapped
// segment, or an ordinary buffer in a test. Sequence s lives in record
// s mod capacity. Every rule about one record lives here: how a writer
// begins and finishes it, what its commit tag says to a reader, how a
// reader copies it and knows the copy is whole, and what a gap marker says.
// Who may write, and whether a reader must copy, is the caller's business:
// one producer writes (producer.cpp); in `block` no writer is ever on a
// record a reader is reading, so a reader reads in place (consumer_impl.hpp);
// in `overwrite`, and for the inspector in either policy, a writer may be, so
// a reader copies and checks (shared_copy.hpp explains why word by word):
//
//   writer                                    reader
//   begin_write   tag = BUSY|s+1 (relaxed)    t = load_tag()      (acquire)
//                 fence(release) ------.      copy length, timestamp,
//   payload       words          (relaxed) |     payload or gap   (relaxed)
//   finish_write  length, timestamp (relaxed)'-> unchanged(t): fence(acquire),
//                 tag = s+1      (release)       tag == t ? whole : torn
//
// A message longer than one record spans several (layout.hpp, "Spans"): the
// writer also marks the slots inside the span before its payload, and a
// checked reader re-checks its record's mark with its tag:
//
//   writer                                    reader (checked copy)
//   begin_write   tag = BUSY|s+1              t = load_tag()      (acquire)
//   mark_span     span[s+1..] = p+1 (relaxed) copy length, records, payload
//                 fence(release) ------.          (relaxed)
//   payload       words over the slots |   '-> unchanged(t, s): fence(acquire),
//                 that follow (relaxed)'       tag == t && span[s] not p >= s
//   finish_write  ..., records, tag = s+1 (release)
//
// Tags and sequences read from the ring are untrusted: every function here
// that follows one checks it against the slot it was found in and against
// kMaxSequence, and says "not what you hoped" rather than trusting it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "layout.hpp"
#include "shared_copy.hpp"
#include "span_marks.hpp"

namespace shmbus::detail {

// ---- commit tags (layout.hpp, RecordHeader::tag) ----

constexpr std::uint64_t committed_tag(std::uint64_t seq) noexcept { return seq + 1; }
constexpr std::uint64_t busy_tag(std::uint64_t seq) noexcept { return layout::kBusyBit | (seq + 1); }
constexpr bool is_busy(std::uint64_t tag) noexcept { return (tag & layout::kBusyBit) != 0; }
// The sequence a non-zero tag names, committed or being written.
constexpr std::uint64_t tag_seq(std::uint64_t tag) noexcept { return (tag & ~layout::kBusyBit) - 1; }

// What record seq's slot holds, for a reader waiting for seq.
enum class TagState {
  ready,    // seq, committed
  not_yet,  // nothing, an older sequence, or seq being written
  passed,   // a later sequence, committed or being written: seq is gone
};
constexpr TagState tag_state(std::uint64_t tag, std::uint64_t seq) noexcept {
  if (tag == committed_tag(seq)) return TagState::ready;
  if (tag == 0 || tag_seq(tag) <= seq) return TagState::not_yet;
  return TagState::passed;
}

// A gap marker (layout.hpp): where the stream continues, and whether the
// sequences in between count as lost.
struct Gap {
  std::uint64_t to;
  bool lost;
  bool pad = false;  // padding before a span (lost is false)
};

// A reader at sequence `cursor` found a later sequence, `found` (a committed
// tag's), in its slot: it was lapped. Where it resumes: past everything
// certainly gone (`found` - capacity and before), and past what `head` (the
// producer's, untrusted, used only when plausible) says is gone too. nullopt
// when `found` cannot be explained by a lap: a full ring past head (no
// publish writes that far ahead), or at kMaxSequence or beyond.
constexpr std::optional<std::uint64_t> resume_after_lap(std::uint64_t cursor, std::uint64_t found,
                                                        std::uint64_t head, std::uint64_t capacity) noexcept {
  if ((found >= head && found - head >= capacity) || found >= layout::kMaxSequence) return std::nullopt;
  std::uint64_t n = cursor + 1;
  if (found + 1 > capacity) n = std::max(n, found + 1 - capacity);
  if (head >= capacity && head <= found + capacity + 1) n = std::max(n, head - capacity);
  return n;
}

class RecordRing {
 public:
  RecordRing() = default;
  // `log`: capacity * record_size bytes, 8-byte aligned; capacity a power of
  // two; record_size a multiple of 8, at least layout::kMinRecordSize.
  // `spans`: capacity span marks (layout.hpp, "Spans").
  RecordRing(std::byte* log, layout::SpanMark* spans, std::uint64_t capacity, std::uint32_t record_size) noexcept
      : log_(log),
        spans_(spans),
        mask_(capacity - 1),
        record_size_(record_size),
        max_span_(layout::max_span_for(capacity)),
        max_message_(layout::max_message_for(capacity, record_size)) {}

  std::uint64_t capacity() const noexcept { return mask_ + 1; }
  std::uint32_t record_size() const noexcept { return record_size_; }
  std::uint32_t max_payload() const noexcept { return record_size_ - layout::kRecordHeaderSize; }
  std::uint32_t max_message() const noexcept { return max_message_; }
  std::uint64_t max_span() const noexcept { return max_span_; }
  std::uint64_t slot_of(std::uint64_t seq) const noexcept { return seq & mask_; }
  // Slots a message of `length` bytes takes.
  std::uint64_t records_for(std::uint64_t length) const noexcept { return layout::records_for(length, record_size_); }
  // Whether `records` slots from `seq` stay inside the ring (no wrap).
  bool fits_before_wrap(std::uint64_t seq, std::uint64_t records) const noexcept {
    return slot_of(seq) + records <= capacity();
  }

  layout::RecordHeader* record(std::uint64_t seq) const noexcept {
    return reinterpret_cast<layout::RecordHeader*>(log_ + (seq & mask_) * record_size_);
  }
  static std::byte* payload(layout::RecordHeader* r) noexcept {
    return reinterpret_cast<std::byte*>(r) + layout::kRecordHeaderSize;
  }
  // Whether sequences a and b live in the same record.
  bool same_slot(std::uint64_t a, std::uint64_t b) const noexcept { return ((a ^ b) & mask_) == 0; }

  // ---- writing: one writer at a time ----

  // Marks record `r` as being written for `seq`. Anyone still copying the
  // old occupant (an overwrite reader, the inspector) sees the tag change:
  // the release fence orders this store before the payload stores and pairs
  // with the reader's acquire fence in unchanged().
  static void begin_write(layout::RecordHeader* r, std::uint64_t seq) noexcept {
    r->tag.store(busy_tag(seq), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }

  // The payload into record `r`. `shared`: a reader may be copying this
  // record now (overwrite), so word by word with relaxed atomic stores
  // (shared_copy.hpp); otherwise a plain copy.
  static void write_payload(layout::RecordHeader* r, std::span<const std::byte> data, bool shared) noexcept {
    if (data.empty()) return;
    if (shared)
      store_shared_words(payload(r), data.data(), data.size());
    else
      std::memcpy(payload(r), data.data(), data.size());
  }

  // Length and timestamp, then the commit mark, written last: it publishes
  // payload, length and timestamp (pairs with the reader's acquire load of
  // the tag). Relaxed atomic stores: a seqlock reader may be copying them.
  static void finish_write(layout::RecordHeader* r, std::uint64_t seq, std::uint32_t length,
                           std::uint64_t timestamp_ns, std::uint32_t records = 1) noexcept {
    std::atomic_ref<std::uint64_t>(r->timestamp_ns).store(timestamp_ns, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(r->length).store(length, std::memory_order_relaxed);
    std::atomic_ref<std::uint32_t>(r->records).store(records, std::memory_order_relaxed);
    r->tag.store(committed_tag(seq), std::memory_order_release);
  }

  // A span of `records` slots from `seq` (begin_write'n already): marks the
  // slots inside it, then a release fence, so that whoever sees a payload
  // byte stored after this over one of those slots' headers also sees its
  // mark (pairs with the acquire fence in unchanged(), and with the acquire
  // load of a tag word the payload rewrote).
  // Where the span mark of `seq`'s slot is stored.
  layout::SpanMark* mark_slot(std::uint64_t seq) const noexcept { return spans_ + slot_of(seq); }
  void mark_span(std::uint64_t seq, std::uint64_t records) const noexcept {
    // One run of the table: a span never crosses the end of the ring.
    store_mark_run(spans_ + slot_of(seq + 1), seq + 1, records - 1);
    std::atomic_thread_fence(std::memory_order_release);
  }

  // What the span mark of seq's slot says about position `seq`.
  enum class Mark {
    start,    // no mark: the slot's header is seq's record (if anyone's)
    earlier,  // the slot was inside a span on an earlier lap: until seq's
              // record is written there, its tag word may hold that span's
              // payload, so a tag found there that no lap explains is no
              // sign of corruption
    inside,   // seq lies inside a span that began before it
    later,    // the slot was taken by a later lap's span
  };
  // Acquire: mark_span() stores marks after begin_write()'s release fence, so
  // a reader that sees a mark also sees what the producer stored before it
  // began that span (head among it).
  Mark span_mark(std::uint64_t seq) const noexcept {
    const std::uint64_t m = spans_[slot_of(seq)].load(std::memory_order_acquire);
    // Untrusted: a mark for another slot, or past any sequence, says nothing.
    if (m == 0 || m >= layout::kMaxSequence || !same_slot(m - 1, seq)) return Mark::start;
    if (m == seq + 1) return Mark::inside;
    return m > seq + 1 ? Mark::later : Mark::earlier;
  }
  // Whether the mark says the slot's header belongs to seq or before.
  static bool is_header(Mark m) noexcept { return m == Mark::start || m == Mark::earlier; }
  // The position a `later` mark names (a lap ahead of seq, or more).
  std::uint64_t span_mark_seq(std::uint64_t seq) const noexcept {
    return spans_[slot_of(seq)].load(std::memory_order_acquire) - 1;
  }
  // Forgets the marks a span begun at `start` left inside it (the run of
  // marks from start + 1 that name their own positions): a producer that
  // died inside the span left them, and the records written there next are
  // starts. Only by the producer, for sequences it has not yet written.
  // Each such slot's tag word (the dead span's payload) becomes 0, "never
  // written", before its mark goes: a reader that sees the mark gone and
  // loads the tag again sees 0 (the release store pairs with span_mark()'s
  // acquire load).
  void clear_marks_after(std::uint64_t start) const noexcept {
    for (std::uint64_t p = start + 1; p < start + max_span_; ++p) {
      if (spans_[slot_of(p)].load(std::memory_order_relaxed) != p + 1) break;
      record(p)->tag.store(0, std::memory_order_relaxed);
      spans_[slot_of(p)].store(0, std::memory_order_release);
    }
  }
  // The first position at or after `seq` (and before `end`) that is not
  // inside a span: where a reader that lands at `seq` can start.
  std::uint64_t skip_inside(std::uint64_t seq, std::uint64_t end) const noexcept {
    while (seq < end && span_mark(seq) == Mark::inside) ++seq;
    return seq;
  }

  // The gap marker for sequence `seq`: the stream continues at `to`.
  void write_gap_marker(std::uint64_t seq, Gap gap, std::uint64_t timestamp_ns, bool shared,
                        std::uint32_t kind = 0) const noexcept {
    layout::RecordHeader* r = record(seq);
    begin_write(r, seq);
    const std::uint64_t word = gap.to;
    write_payload(r, std::as_bytes(std::span<const std::uint64_t, 1>(&word, 1)), shared);
    if (kind == 0) kind = gap.lost ? layout::kGapLost : layout::kGapStart;
    finish_write(r, seq, kind, timestamp_ns);
  }

  // Markers for every sequence in [lo, gap.to): first each slot is marked
  // BUSY in order, so that a reader copying what a slot held (a message that
  // may span the slots after it) sees its record change before any of its
  // bytes do; then the markers, highest first and the lowest last, so that
  // a takeover finding the lowest committed knows the rest are
  // (committed_end()).
  void write_markers(std::uint64_t lo, Gap gap, std::uint64_t timestamp_ns, bool shared,
                     std::uint32_t kind = 0) const noexcept {
    if (shared)
      for (std::uint64_t m = lo; m < gap.to; ++m) begin_write(record(m), m);
    for (std::uint64_t m = gap.to; m-- > lo;) write_gap_marker(m, gap, timestamp_ns, shared, kind);
  }

  // ---- reading ----

  // Pairs with finish_write's release store: a committed tag publishes the
  // record's contents.
  static std::uint64_t load_tag(const layout::RecordHeader* r) noexcept {
    return r->tag.load(std::memory_order_acquire);
  }
  // One read each of the (untrusted) fields; relaxed atomic loads, since a
  // writer may be rewriting them (in `block` they cost what plain loads do).
  static std::uint32_t load_length(layout::RecordHeader* r) noexcept {
    return std::atomic_ref<std::uint32_t>(r->length).load(std::memory_order_relaxed);
  }
  static std::uint64_t load_timestamp(layout::RecordHeader* r) noexcept {
    return std::atomic_ref<std::uint64_t>(r->timestamp_ns).load(std::memory_order_relaxed);
  }
  static std::uint32_t load_records(layout::RecordHeader* r) noexcept {
    return std::atomic_ref<std::uint32_t>(r->records).load(std::memory_order_relaxed);
  }

  // The slots a committed message of `length` bytes at `seq` occupies, as
  // its header's `records` says (read as `records`), or 0 if that is
  // impossible: fewer than its length needs, more than a span may take, or
  // across the end of the ring.
  std::uint64_t checked_records(std::uint64_t seq, std::uint32_t length, std::uint32_t records) const noexcept {
    if (records == 1) [[likely]] return length <= max_payload() ? 1 : 0;  // no division on the common path
    if (records == 0 || records > max_span_ || records < records_for(length) || !fits_before_wrap(seq, records))
      return 0;
    return records;
  }

  // The seqlock's re-check: true if record `r` still carries tag `t`, so
  // that everything copied from it since `t` was loaded belongs to that
  // occupant. Pairs with begin_write's release fence.
  static bool unchanged(const layout::RecordHeader* r, std::uint64_t t) noexcept {
    std::atomic_thread_fence(std::memory_order_acquire);
    return r->tag.load(std::memory_order_relaxed) == t;
  }
  // The same for the record of `seq`, also through its span mark: a span
  // written over the slot since marked it before its payload rewrote the tag
  // word (mark_span()), whatever bytes that payload put there.
  bool unchanged(std::uint64_t seq, std::uint64_t t) const noexcept {
    return unchanged(record(seq), t) && is_header(span_mark(seq));
  }

  // The gap marker in record `r`, committed for `seq` (the caller checked
  // the tag), or nullopt if it holds a message. skip_to writes markers only
  // within one ring of their target, so a target not after `seq`, more than
  // a ring past it, or at kMaxSequence or beyond is not a gap (the caller
  // sees a corrupt record). A reader that may race a writer re-checks the
  // tag afterwards (unchanged()), as for a payload.
  static bool is_gap_kind(std::uint32_t len) noexcept {
    return len == layout::kGapLost || len == layout::kGapStart || len == layout::kGapPad;
  }
  std::optional<Gap> read_gap(layout::RecordHeader* r, std::uint64_t seq) const noexcept {
    const std::uint32_t len = load_length(r);
    if (!is_gap_kind(len)) return std::nullopt;
    const std::uint64_t to =
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(payload(r))).load(std::memory_order_relaxed);
    if (to <= seq || to - seq > capacity() || to >= layout::kMaxSequence) return std::nullopt;
    return Gap{to, len == layout::kGapLost, len == layout::kGapPad};
  }

  // What a checked copy of one record holds.
  struct Copy {
    std::uint64_t timestamp_ns = 0;
    std::uint32_t length = 0;   // as stored: above max_message() for a gap or a corrupt record
    std::uint64_t records = 0;  // slots the message takes (checked_records()); 0 if impossible
    std::optional<Gap> gap;     // set for a gap marker; then nothing was copied
    bool no_room = false;       // a message longer than `room`: nothing was copied
  };
  // Copies the record of `seq`, whose tag `t` the caller loaded (load_tag)
  // and found committed for `seq`: its fields, and either its gap or its
  // payload into `dst` (`room` bytes; a longer message is not copied and
  // sets no_room). False if a writer began rewriting it meanwhile: discard
  // `out`.
  bool copy_checked(std::uint64_t seq, std::uint64_t t, std::byte* dst, std::size_t room,
                    Copy& out) const noexcept {
    layout::RecordHeader* r = record(seq);
    out.timestamp_ns = load_timestamp(r);
    out.length = load_length(r);
    out.records = 0;
    out.gap.reset();
    out.no_room = false;
    if (out.length > max_message()) {
      out.gap = read_gap(r, seq);
      if (out.gap) out.records = 1;
    } else {
      out.records = checked_records(seq, out.length, load_records(r));
      if (out.records == 0) {
        // Corrupt (or torn: the re-check says which); nothing to copy.
      } else if (out.length > room) {
        out.no_room = true;
      } else if (out.length != 0) {
        load_shared_words(dst, payload(r), out.length);
      }
    }
    return unchanged(seq, t);
  }

  // ---- the end of the committed stream ----

  // A gap longer than the ring, written from `seq` by a skip_to whose
  // producer died before it stored head: its markers fill the ring's last
  // lap before the target, so the slot of `seq` holds a marker for a later
  // sequence. Its target, if the gap's lowest marker (a ring before the
  // target, written last) is committed; else nullopt.
  std::optional<std::uint64_t> long_gap_end(std::uint64_t seq) const noexcept {
    layout::RecordHeader* r = record(seq);
    const std::uint64_t t = load_tag(r);
    if (t == 0 || is_busy(t)) return std::nullopt;
    const std::uint64_t m = tag_seq(t);
    if (m <= seq || !same_slot(m, seq)) return std::nullopt;
    const std::optional<Gap> gap = read_gap(r, m);
    if (!gap || gap->to - seq <= capacity()) return std::nullopt;
    const std::uint64_t lo = gap->to - capacity();
    layout::RecordHeader* low = record(lo);
    if (load_tag(low) != committed_tag(lo)) return std::nullopt;
    const std::optional<Gap> low_gap = read_gap(low, lo);
    if (!low_gap || low_gap->to != gap->to || low_gap->lost != gap->lost) return std::nullopt;
    return gap->to;
  }

  // The first sequence at or after `from` that is not committed, following
  // committed gap markers (a whole gap is written once its lowest marker is
  // committed): where a writer taking over a ring goes on, so that no
  // sequence repeats. Looks at most one ring ahead.
  std::uint64_t committed_end(std::uint64_t from) const noexcept {
    std::uint64_t s = from;
    for (std::uint64_t i = 0; i < capacity(); ++i) {
      layout::RecordHeader* r = record(s);
      if (load_tag(r) == committed_tag(s) && is_header(span_mark(s))) {
        const std::optional<Gap> gap = read_gap(r, s);
        const std::uint64_t n = checked_records(s, load_length(r), load_records(r));
        s = gap ? gap->to : s + std::max<std::uint64_t>(n, 1);
      } else if (const std::optional<std::uint64_t> to = long_gap_end(s)) {
        s = *to;
      } else {
        break;
      }
    }
    return s;
  }

 private:
  std::byte* log_ = nullptr;
  layout::SpanMark* spans_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint32_t record_size_ = 0;
  std::uint64_t max_span_ = 1;
  std::uint32_t max_message_ = 0;
};

}  // namespace shmbus::detail
