// shmbus — read-only inspection of a bus (the basis of shmbus-inspect);
// what changes a bus is in admin.cpp.
#include "shmbus/inspect.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "bookmarks.hpp"
#include "reader_table.hpp"
#include "reader_views.hpp"
#include "segment.hpp"
#include "sys.hpp"

namespace shmbus {

struct Inspector::Impl {
  std::shared_ptr<detail::Segment> seg;
};

Inspector::Inspector() : impl_(std::make_unique<Impl>()) {}
Inspector::~Inspector() = default;
Inspector::Inspector(Inspector&&) noexcept = default;
Inspector& Inspector::operator=(Inspector&&) noexcept = default;

Inspector Inspector::open(std::string_view name, const Trust& trust, std::string_view dir) {
  Inspector i;
  i.impl_->seg = detail::Segment::open(name, detail::Segment::Access::read_only, trust, std::nullopt, dir);
  return i;
}

const BusInfo& Inspector::info() const noexcept { return impl_->seg->info(); }

namespace {

std::string printable(std::string s) {
  for (char& c : s) {
    if (c < 0x20 || c >= 0x7f) c = '?';  // untrusted bytes
  }
  return s;
}

std::string slot_name(const layout::ReaderSlot& r) { return printable(detail::stored_name(r.name)); }

// Whether the live holder of a role, labelled `pid` (started at
// `start_ticks`) in PID namespace `pid_ns`, is stopped: state T or t in
// /proc/PID/stat. Only a process of ours with that pid and the same start
// time is the holder; one in another PID namespace, or without /proc, is
// never judged stopped.
bool process_stopped(pid_t pid, std::uint64_t start_ticks, std::uint32_t pid_ns) noexcept {
  if (start_ticks == 0 || in_other_pid_namespace(pid_ns)) return false;
  const std::optional<ProcessStat> st = process_stat(pid);
  return st && (st->state == 'T' || st->state == 't') && st->start_ticks == start_ticks;
}

}  // namespace

namespace detail {

Liveness liveness_of(detail::Holder h) {
  switch (h) {
    case detail::Holder::alive: return Liveness::alive;
    case detail::Holder::none: return Liveness::dead;
    case detail::Holder::unknown: break;
  }
  return Liveness::unknown;
}

ReaderView reader_view(const detail::Segment& seg, std::uint32_t i) {
  const layout::ReaderSlot& r = *seg.reader(i);
  ReaderView v;
  v.slot = i;
  v.pid = static_cast<pid_t>(r.pid.load(std::memory_order_relaxed));
  v.generation = r.generation.load(std::memory_order_relaxed);
  v.start_ticks = r.start_ticks.load(std::memory_order_relaxed);
  v.pid_namespace = r.pid_ns.load(std::memory_order_relaxed);
  v.liveness = liveness_of(seg.reader_holder(i));
  v.name = slot_name(r);
  v.cursor = r.cursor.load(std::memory_order_acquire);
  v.delivered = r.delivered.load(std::memory_order_relaxed);
  v.lost = r.lost.load(std::memory_order_relaxed);
  v.attach_time_ns = r.attach_time_ns.load(std::memory_order_relaxed);
  v.last_active_ns = r.last_active_ns.load(std::memory_order_relaxed);
  v.sleeping = r.sleeping.load(std::memory_order_relaxed) != 0;
  const std::uint32_t state = r.state.load(std::memory_order_relaxed);
  v.best_effort = state == layout::kSlotBestEffort;
  // Shown (in_use) with a free state: it has an owner the producer ignores.
  v.evicted = state == layout::kSlotFree;
  // A stamp left by an earlier attachment of the slot (or half-written by a
  // producer that raced with a new one) is not this reader's.
  const std::uint64_t let_go = r.let_go_ns.load(std::memory_order_relaxed);
  v.let_go_ns = v.best_effort && let_go >= v.attach_time_ns ? let_go : 0;
  v.stopped = v.liveness == Liveness::alive && process_stopped(v.pid, v.start_ticks, v.pid_namespace);
  return v;
}

// "reader 3 'name' (pid 1234, alive)", as warnings name a reader.
std::string reader_label(const ReaderView& r) {
  return "reader " + std::to_string(r.slot) + " '" + display_name(r.name) + "' (" +
         pid_label(r.pid, r.pid_namespace) + ", " + (r.stopped ? "stopped" : to_string(r.liveness)) + ")";
}

// HH:MM:SS (UTC) of a CLOCK_REALTIME time.
std::string utc_hms(std::uint64_t realtime_ns) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000u);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// A slot is shown while it has an owner or counts for the producer.
bool in_use(const layout::ReaderSlot& r) {
  return r.owner.load(std::memory_order_acquire) != layout::kOwnerFree ||
         r.state.load(std::memory_order_acquire) != layout::kSlotFree;
}

}  // namespace detail

using detail::in_use;
using detail::liveness_of;
using detail::reader_label;
using detail::reader_view;
using detail::utc_hms;

Snapshot Inspector::snapshot() const {
  const detail::Segment& seg = *impl_->seg;
  const layout::SegmentHeader& h = *seg.header();
  Snapshot s;
  s.info = seg.info();
  s.head = h.head.load(std::memory_order_acquire);
  s.oldest = detail::oldest_retained(seg, s.head);
  if (s.head > 0) {
    layout::RecordHeader* r = seg.record(s.head - 1);
    if (detail::RecordRing::load_tag(r) == detail::committed_tag(s.head - 1))
      s.last_publish_ns = detail::RecordRing::load_timestamp(r);
  }
  s.counters.published = s.head;
  s.counters.producer_waits = h.producer_waits.load(std::memory_order_relaxed);
  s.counters.producer_wait_ns = h.producer_wait_ns.load(std::memory_order_relaxed);
  s.counters.wakeups = h.wakeups.load(std::memory_order_relaxed);
  s.counters.readers_reclaimed = h.readers_reclaimed.load(std::memory_order_relaxed);
  s.counters.readers_let_go = h.readers_let_go.load(std::memory_order_relaxed);
  s.counters.data_sleepers = h.data_sleepers.load(std::memory_order_relaxed);

  ProducerView& p = s.producer;
  p.attached = h.producer_owner.load(std::memory_order_acquire) != 0;
  p.pid = static_cast<pid_t>(h.producer_pid.load(std::memory_order_relaxed));
  p.start_ticks = h.producer_start_ticks.load(std::memory_order_relaxed);
  p.pid_namespace = h.producer_pid_ns.load(std::memory_order_relaxed);
  // The role lock says whether a producer lives, attached or not (one that
  // detached without closing leaves no owner but may still run).
  p.liveness = liveness_of(seg.producer_holder());
  p.closed = h.closed.load(std::memory_order_acquire) != 0;
  const std::uint32_t blocked = h.blocked_on_slot.load(std::memory_order_relaxed);
  p.waiting_for_space = h.producer_sleeping.load(std::memory_order_relaxed) != 0 || blocked != 0;
  if (blocked != 0 && blocked <= seg.max_readers()) p.blocked_on_slot = blocked - 1;
  p.takeovers = h.takeovers.load(std::memory_order_relaxed);
  p.waiting_since_ns = h.wait_start_ns.load(std::memory_order_relaxed);
  p.max_hold_ns = p.attached ? h.max_hold_ns.load(std::memory_order_relaxed) : 0;
  p.stopped = p.attached && p.liveness == Liveness::alive &&
              process_stopped(p.pid, p.start_ticks, p.pid_namespace);

  for (std::uint32_t i = 0; i < seg.max_readers(); ++i) {
    if (in_use(*seg.reader(i))) s.readers.push_back(reader_view(seg, i));
  }
  for (std::uint32_t i = 0; i < seg.max_readers(); ++i) {
    const layout::Bookmark& b = *seg.bookmark(i);
    if (b.state.load(std::memory_order_acquire) != layout::kBookmarkValid) continue;
    BookmarkView v;
    v.index = i;
    v.name = printable(detail::stored_name(b.name));
    v.cursor = b.cursor.load(std::memory_order_relaxed);
    v.updated_ns = b.updated_ns.load(std::memory_order_relaxed);
    v.held = seg.bookmark_holder(i) == detail::Holder::alive;
    if (v.held) {
      v.holder_pid = static_cast<pid_t>(b.holder.load(std::memory_order_relaxed));
      v.holder_pid_namespace = b.holder_pid_ns.load(std::memory_order_relaxed);
    }
    s.bookmarks.push_back(std::move(v));
  }
  s.removed = h.removed.load(std::memory_order_relaxed) != 0;
  // Cursors were read after head; a busy bus may have moved on meanwhile.
  // Report the later head so that no cursor appears ahead of it.
  const std::uint64_t later = h.head.load(std::memory_order_acquire);
  for (const ReaderView& r : s.readers) s.head = std::max(s.head, std::min(r.cursor, later));
  s.counters.published = s.head;
  return s;
}

Diagnosis diagnose(const Snapshot& s) {
  Diagnosis d;
  const std::uint64_t cap = s.info.capacity;
  const ProducerView& p = s.producer;
  d.producer_alive = p.attached && p.liveness == Liveness::alive;
  std::vector<const ReaderView*> readers;
  for (const ReaderView& r : s.readers) readers.push_back(&r);
  std::sort(readers.begin(), readers.end(), [](const ReaderView* a, const ReaderView* b) { return a->slot < b->slot; });
  const auto lag = [&s](const ReaderView& r) { return s.head > r.cursor ? s.head - r.cursor : 0; };
  if (d.producer_alive && p.waiting_for_space && p.blocked_on_slot) {
    for (const ReaderView* r : readers) {
      if (r->slot == *p.blocked_on_slot && lag(*r) > 0) d.blocked_on_slot = r->slot;
    }
  }

  for (const ReaderView* r : readers) {
    if (r->liveness == Liveness::alive) continue;
    d.warnings.push_back({"dead_reader", r->slot,
                          reader_label(*r) + " is dead but still holds its slot at cursor " +
                              std::to_string(r->cursor) + "; `shmbus-inspect gc " + s.info.name +
                              "` reclaims it"});
  }
  if (p.attached && p.liveness != Liveness::alive) {
    d.warnings.push_back({"producer_dead", std::nullopt,
                          "producer " + pid_label(p.pid, p.pid_namespace) + " is " + to_string(p.liveness) +
                              ": consumers drain what it committed, then see end-of-stream; a new producer "
                              "can take the bus over"});
  }
  if (d.producer_alive && p.waiting_for_space) {
    std::string who = "a reader";
    for (const ReaderView* r : readers) {
      if (d.blocked_on_slot && r->slot == *d.blocked_on_slot) who = reader_label(*r);
    }
    d.warnings.push_back({"producer_blocked", d.blocked_on_slot,
                          "producer " + pid_label(p.pid, p.pid_namespace) +
                              " is blocked on a full ring, held back by " + who});
  }
  for (const ReaderView* r : readers) {
    if (!r->evicted) continue;
    d.warnings.push_back({"reader_evicted", r->slot,
                          reader_label(*r) + " was evicted: its slot's state was cleared while it held it "
                              "(a stray store into the segment, or a slot freed by force); the producer no "
                              "longer waits for it and may lap it; it is told at its next read and takes "
                              "the slot back"});
  }
  for (const ReaderView* r : readers) {
    if (r->let_go_ns == 0) continue;
    d.warnings.push_back({"reader_let_go", r->slot,
                          reader_label(*r) + " was let go at " + utc_hms(r->let_go_ns) +
                              " UTC (the producer's hold limit, or shmbus-inspect let-go): it no longer holds the "
                              "producer and is lapped if it falls a ring behind"});
  }
  for (const ReaderView* r : readers) {
    const std::uint64_t behind = lag(*r);
    if (cap == 0 || behind * 2 <= cap) continue;
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.1f", 100.0 * static_cast<double>(behind) / static_cast<double>(cap));
    d.warnings.push_back({"reader_lagging", r->slot,
                          reader_label(*r) + " lags " + std::to_string(behind) + " messages (" + percent +
                              "% of the ring)"});
  }
  return d;
}

std::string escape_ascii(std::span<const std::byte> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (std::byte x : bytes) {
    const auto c = static_cast<unsigned char>(x);
    switch (c) {
      case '\n': out += "\\n"; continue;
      case '\t': out += "\\t"; continue;
      case '\r': out += "\\r"; continue;
      case '\\': out += "\\\\"; continue;
      case '"': out += "\\\""; continue;
      default: break;
    }
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string display_name(std::string_view name) {
  if (name.empty()) return "-";
  return escape_ascii(std::as_bytes(std::span<const char>(name.data(), name.size())));
}

std::optional<RecordView> Inspector::record(std::uint64_t seq) const {
  const detail::RecordRing ring = impl_->seg->ring();
  layout::RecordHeader* r = ring.record(seq);
  RecordView v;
  v.seq = seq;
  if (ring.span_mark(seq) == detail::RecordRing::Mark::inside) {
    v.inside = true;  // no header of its own: part of the span before it
    return v;
  }
  const std::uint64_t t = detail::RecordRing::load_tag(r);
  if (t != detail::committed_tag(seq)) return std::nullopt;
  // Copied as an overwrite consumer does: the producer may be rewriting the
  // record meanwhile, in either policy once we are behind.
  const std::uint32_t len = detail::RecordRing::load_length(r);
  v.payload.resize(len <= ring.max_message() ? len : 0);
  detail::RecordRing::Copy copied;
  if (!ring.copy_checked(seq, t, v.payload.data(), v.payload.size(), copied) || copied.no_room) return std::nullopt;
  v.timestamp_ns = copied.timestamp_ns;
  v.length = copied.length;
  v.records = static_cast<std::uint32_t>(copied.records);
  if (copied.gap) {
    v.gap_to = copied.gap->to;
    v.gap_lost = copied.gap->lost;
    v.padding = copied.length == layout::kGapPad;
    v.payload.clear();
  } else if (copied.records == 0) {
    // Corrupt (check() says why): show what one record holds.
    v.records = 0;
    v.payload.resize(std::min(copied.length, ring.max_payload()));
    if (!v.payload.empty()) detail::load_shared_words(v.payload.data(), detail::RecordRing::payload(r), v.payload.size());
    if (!ring.unchanged(seq, t)) return std::nullopt;
  }
  return v;
}

namespace {

// One look at a part of the segment a live process may be rewriting (a
// record's slot, a reader's slot, the header's oldest): what it found, and
// the words it found it in.
struct Look {
  std::string part;  // "record (slot 185)", "reader[3]", "header.oldest"
  std::vector<Problem> problems;
  // Every word of the part the look read that a writer may change, in the
  // order read: two looks that read the same words saw the part hold still.
  std::vector<std::uint64_t> words;
  // The part changed while it was read (its seqlock re-check failed): the
  // look judges nothing.
  bool torn = false;
  // A problem it found lies ahead of head, within the ring: the state a
  // write of a live producer leaves until it stores head (padding, a batch,
  // a span, skip_to's markers are committed first; a reader may read them).
  // It excuses the look only if it is the one problem found.
  bool ahead = false;
};

// How often check() looks at a part that seems wrong before it judges it,
// and how long it waits before each look again: together (3.4 ms) long
// enough for a producer that lost its CPU in the middle of a write to get
// it back and finish.
constexpr int kLooks = 7;
void pause_before_look(int n) {
  if (n == 1) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(10) * (1 << (2 * (n - 2))));  // 10 us .. 2.56 ms
}

// Judges parts of a segment whose writers may be at work, as a seqlock
// reader reads: a look that finds nothing wrong settles a part; so do two
// looks in a row that read the same words and find something wrong, unless
// an unfinished write of a live producer explains it. A part that never
// settles is not judged.
class Judge {
 public:
  Judge(const detail::Segment& seg, std::vector<Problem>& problems, std::vector<Problem>& undecided)
      : seg_(seg), problems_(problems), undecided_(undecided) {}

  template <class LookAt>
  void operator()(LookAt look_at) {
    Look prev = look_at();
    if (!prev.torn && prev.problems.empty()) return;
    bool still = false;  // the last two looks read the same words
    for (int n = 1; n < kLooks; ++n) {
      pause_before_look(n);
      Look now = look_at();
      if (!now.torn && now.problems.empty()) return;
      still = !now.torn && !prev.torn && now.words == prev.words;
      if (still && !(now.ahead && now.problems.size() == 1 && producer_may_write())) {
        for (Problem& p : now.problems) problems_.push_back(std::move(p));
        return;
      }
      prev = std::move(now);
    }
    if (!still) {
      undecided_.push_back({prev.part, "changed while it was read, " + std::to_string(kLooks) + " looks in a row"});
      return;
    }
    for (Problem& p : prev.problems)
      undecided_.push_back(
          {std::move(p.where), std::move(p.what) + ", as a write its live producer has not finished leaves it"});
  }

 private:
  // Tested once, when first needed: a holder that cannot be tested counts
  // as alive (a live process is never taken for dead).
  bool producer_may_write() {
    if (producer_ < 0) producer_ = seg_.producer_holder() != detail::Holder::none ? 1 : 0;
    return producer_ == 1;
  }

  const detail::Segment& seg_;
  std::vector<Problem>& problems_;
  std::vector<Problem>& undecided_;
  int producer_ = -1;  // not tested yet
};

Look look_at_oldest(const detail::Segment& seg) {
  const layout::SegmentHeader& h = *seg.header();
  Look look;
  look.part = "header.oldest";
  // Acquire (both): pair with the producer's release stores of head; oldest
  // is read between them, so the first head is at most a ring past it and
  // it is at most the second, unless a write is under way.
  const std::uint64_t h0 = h.head.load(std::memory_order_acquire);
  const std::uint64_t o = h.oldest.load(std::memory_order_acquire);
  const std::uint64_t h1 = h.head.load(std::memory_order_acquire);
  look.words = {o};
  if (o > h1 || h0 - o > seg.capacity()) {
    look.problems.push_back(
        {look.part, "oldest " + std::to_string(o) + " is outside the ring (head " + std::to_string(h1) + ")"});
    look.ahead = o > h1 && o - h1 <= seg.capacity();
  }
  return look;
}

Look look_at_reader(const detail::Segment& seg, std::uint32_t i) {
  const layout::SegmentHeader& h = *seg.header();
  const layout::ReaderSlot& r = *seg.reader(i);
  const std::uint64_t cap = seg.capacity();
  Look look;
  look.part = "reader[" + std::to_string(i) + "]";
  auto add = [&](std::string what) { look.problems.push_back({look.part, std::move(what)}); };
  // Acquire: pairs with the producer's release store of head (read before
  // the cursor, so a cursor a ring behind it is behind every head since).
  const std::uint64_t h0 = h.head.load(std::memory_order_acquire);
  const std::uint64_t owner = r.owner.load(std::memory_order_acquire);
  const std::uint32_t state = r.state.load(std::memory_order_acquire);
  const std::uint64_t generation = r.generation.load(std::memory_order_relaxed);
  look.words = {owner, state, generation};
  if (state > layout::kSlotBestEffort) add("state " + std::to_string(state) + " is unknown");
  if (owner == layout::kOwnerFree && state != layout::kSlotFree) add("active but has no owner");
  if (owner != layout::kOwnerFree && seg.reader_holder(i) == detail::Holder::alive && owner != generation)
    add("owner ticket " + std::to_string(owner) + " is not the slot's generation " + std::to_string(generation));
  if (owner == layout::kOwnerFree || state == layout::kSlotFree || state > layout::kSlotBestEffort) return look;
  const std::uint64_t c = r.cursor.load(std::memory_order_acquire);
  const std::uint64_t h1 = h.head.load(std::memory_order_acquire);
  look.words.push_back(c);
  // A reader reads what is committed, and a producer stores head after
  // committing: a cursor runs ahead of head while a write is unfinished.
  if (c > h1) {
    add("cursor " + std::to_string(c) + " is beyond head " + std::to_string(h1));
    look.ahead = c - h1 <= cap;
  }
  if (!seg.overwrite() && state == layout::kSlotActive && c + cap < h0)
    add("cursor " + std::to_string(c) + " is more than a ring behind head " + std::to_string(h0) + " in a block bus");
  if (std::find(std::begin(r.name), std::end(r.name), '\0') == std::end(r.name)) add("name is not NUL-terminated");
  return look;
}

Look look_at_record(const detail::Segment& seg, const detail::RecordRing& ring, std::uint64_t i) {
  const layout::SegmentHeader& h = *seg.header();
  const std::uint64_t cap = ring.capacity();
  Look look;
  const std::string where_slot = "slot " + std::to_string(i);
  look.part = "record (" + where_slot + ")";
  layout::RecordHeader* r = ring.record(i);
  // Acquire: pairs with the producer's release store of head, so every
  // position before h0 was written when the slot is read below.
  const std::uint64_t h0 = h.head.load(std::memory_order_acquire);
  // The inside of a span of the last ring has no header (its start is
  // checked with it); an older mark only says the tag word may be stale.
  // The position the slot's mark names (all ones when unmarked, which is
  // past kMaxSequence like any impossible mark).
  const std::uint64_t inside = ring.span_mark_seq(i);
  look.words.push_back(inside);
  if (inside < layout::kMaxSequence && ring.same_slot(inside, i) && inside + cap >= h0) return look;
  const std::uint64_t t = detail::RecordRing::load_tag(r);
  const std::uint32_t len = detail::RecordRing::load_length(r);
  const std::uint32_t recs = detail::RecordRing::load_records(r);
  const std::optional<detail::Gap> gap =
      t != 0 && !detail::is_busy(t) ? ring.read_gap(r, detail::tag_seq(t)) : std::nullopt;
  // The seqlock's re-check, through the slot's mark too: a span begun over
  // the slot since was marked there before its payload rewrote any word
  // read above (RecordRing::mark_span(); the fence in unchanged() pairs
  // with its release fence), in whatever order the payload was stored.
  if (!detail::RecordRing::unchanged(r, t) || ring.span_mark_seq(i) != inside) {
    look.torn = true;
    return look;
  }
  look.words.insert(look.words.end(), {t, len, recs, gap ? gap->to : 0});
  // Acquire: as h0; read after the tag, so a record committed before it
  // was stored is no further ahead of it than a write under way reaches.
  const std::uint64_t h1 = h.head.load(std::memory_order_acquire);
  if (t == 0) {
    // A takeover clears the commit marks inside the span its predecessor
    // died writing (from head on, and from the next lap's start when
    // that span followed padding): those slots stay unmarked until a
    // producer gets there. Anywhere else, a slot head has passed was written.
    const std::uint64_t next_here = h0 + ((i - h0) & (cap - 1));  // the slot's next position from head
    const std::uint64_t next_lap = (h0 | (cap - 1)) + 1;
    const bool cleared = next_here - h0 < ring.max_span() ||
                         (next_here >= next_lap && next_here - next_lap < ring.max_span());
    if (h0 > i && !cleared)
      look.problems.push_back({look.part, "never committed, but head " + std::to_string(h0) + " is past it"});
    return look;
  }
  const bool busy = detail::is_busy(t);
  const std::uint64_t seq = detail::tag_seq(t);
  const std::string where = "record " + std::to_string(seq) + " (" + where_slot + ")";
  auto add = [&](std::string what) { look.problems.push_back({where, std::move(what)}); };
  if (!ring.same_slot(seq, i)) {
    look.problems.push_back({look.part, "commit tag names sequence " + std::to_string(seq) +
                                            ", which belongs in slot " + std::to_string(seq & (cap - 1))});
    return look;
  }
  if (seq > h1 + (busy ? cap : 0)) {
    add("sequence is beyond head " + std::to_string(h1));
    // Within a ring of head, or skip_to's markers up to its target (the
    // BUSY tags it stores first, then each marker).
    look.ahead = seq - h1 < cap || busy || gap;
  } else if (seq + cap < h0) {
    add("stale: the ring is at head " + std::to_string(h0) + ", a write was lost");
  }
  if (busy || gap) return look;
  if (len > ring.max_message()) {
    add("length " + std::to_string(len) + " exceeds the bus's max message " + std::to_string(ring.max_message()));
    return look;
  }
  if (ring.checked_records(seq, len, recs) == 0) {
    add("takes " + std::to_string(recs) + " records, which cannot hold " + std::to_string(len) + " bytes within " +
        std::to_string(ring.max_span()) + " records before the end of the ring");
    return look;
  }
  for (std::uint64_t j = 1; j < recs; ++j) {
    const std::uint64_t m = ring.span_mark_seq(seq + j);
    look.words.push_back(m);
    if (m == seq + j) continue;
    // A later lap's span over the tail: the producer wrote over this
    // record's own slot first (its tag or its mark, which the re-check
    // sees), unless both marks are stores of one run still under way.
    if (!detail::RecordRing::unchanged(r, t) || ring.span_mark_seq(i) != inside) {
      look.torn = true;
      return look;
    }
    add("spans " + std::to_string(recs) + " records, but slot " + std::to_string((seq + j) & (cap - 1)) +
        " is not marked as its part " + std::to_string(j));
    look.ahead = m < layout::kMaxSequence && ring.same_slot(m, seq + j) && m > seq + j && m < h1 + cap;
    break;
  }
  return look;
}

}  // namespace

std::vector<Problem> Inspector::check() const {
  std::vector<Problem> undecided;
  return check(undecided);
}

std::vector<Problem> Inspector::check(std::vector<Problem>& undecided) const {
  const detail::Segment& seg = *impl_->seg;
  const layout::SegmentHeader& h = *seg.header();
  std::vector<Problem> out;
  undecided.clear();
  auto add = [&](std::string where, std::string what) { out.push_back({std::move(where), std::move(what)}); };
  Judge judge(seg, out, undecided);

  if (!seg.overwrite()) judge([&] { return look_at_oldest(seg); });
  if (const std::uint32_t c = h.closed.load(std::memory_order_relaxed); c > 1)
    add("header.closed", "value " + std::to_string(c) + " is neither 0 nor 1");
  if (const std::uint32_t c = h.removed.load(std::memory_order_relaxed); c > 1)
    add("header.removed", "value " + std::to_string(c) + " is neither 0 nor 1");
  for (std::uint32_t i = 0; i < seg.max_readers(); ++i) {
    const std::uint32_t st = seg.bookmark(i)->state.load(std::memory_order_relaxed);
    if (st > layout::kBookmarkValid)
      add("bookmark[" + std::to_string(i) + "]", "state " + std::to_string(st) + " is unknown");
  }
  if (const std::uint32_t b = h.blocked_on_slot.load(std::memory_order_relaxed); b > seg.max_readers())
    add("header.blocked_on_slot", "slot " + std::to_string(b) + " is beyond the reader table");

  for (std::uint32_t i = 0; i < seg.max_readers(); ++i) judge([&] { return look_at_reader(seg, i); });

  const detail::RecordRing ring = seg.ring();
  for (std::uint64_t i = 0; i < seg.capacity(); ++i) judge([&] { return look_at_record(seg, ring, i); });
  return out;
}

std::optional<bool> segment_in_use(std::string_view name, std::string_view dir) {
  validate_name(name);
  const int fd = ::open(segment_path(name, dir).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<bool> out;
  // Every role lock of the file at once: the header need not be valid.
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const detail::Holder h = detail::test_lock(fd, 0, 0);
    if (h != detail::Holder::unknown) out = h == detail::Holder::alive;
  }
  ::close(fd);
  return out;
}

std::vector<ListEntry> list_buses(const Trust& trust, std::string_view dir_option) {
  std::vector<ListEntry> out;
  const std::string dir = detail::resolve_dir(dir_option, {}).path;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error(Errc::bad_directory, "bus directory " + dir + ": " + std::strerror(errno));
  while (dirent* e = ::readdir(d)) {
    const std::string_view fn = e->d_name;
    constexpr std::string_view prefix = "shmbus.";
    if (fn.substr(0, prefix.size()) != prefix || fn.size() == prefix.size()) continue;
    ListEntry entry;
    entry.name = std::string(fn.substr(prefix.size()));
    struct stat st {};
    // lstat: a FIFO, device or symlink planted here is listed, never opened.
    if (::lstat(detail::path_in(dir, entry.name).c_str(), &st) == 0)
      entry.file_size = static_cast<std::uint64_t>(st.st_size);
    try {
      entry.snapshot = Inspector::open(entry.name, trust, dir).snapshot();
    } catch (const std::exception& ex) {
      entry.error = ex.what();
    }
    out.push_back(std::move(entry));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const ListEntry& a, const ListEntry& b) { return a.name < b.name; });
  return out;
}

std::vector<CreationFile> list_creations(std::string_view dir_option) {
  std::vector<CreationFile> out;
  for (detail::Temporary& t : detail::find_temporaries(detail::resolve_dir(dir_option, {}).path)) {
    CreationFile f;
    f.name = std::move(t.bus);
    f.path = std::move(t.path);
    f.file_size = t.file_size;
    f.creator = t.creator == detail::Holder::alive  ? Liveness::alive
                : t.creator == detail::Holder::none ? Liveness::dead
                                                    : Liveness::unknown;
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const CreationFile& a, const CreationFile& b) {
    return a.name != b.name ? a.name < b.name : a.path < b.path;
  });
  return out;
}

}  // namespace shmbus
