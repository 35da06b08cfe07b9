// shmbus — the calls that change a bus from outside its producer and
// readers (the basis of shmbus-inspect gc, let-go, reset and rm): reclaim
// the slots of dead readers, let a reader go, forget or move a remembered
// reader name, remove a bus in use. Each maps the bus read-write and says
// what it did; inspection, which changes nothing, is inspect.cpp.
#include "shmbus/inspect.hpp"

#include <climits>
#include <string>

#include "bookmarks.hpp"
#include "reader_table.hpp"
#include "reader_views.hpp"
#include "segment.hpp"
#include "sys.hpp"

namespace shmbus {

using detail::in_use;
using detail::reader_label;
using detail::reader_view;
using detail::utc_hms;

std::vector<ReaderView> reclaim_dead_readers(std::string_view name, const Trust& trust, std::string_view dir) {
  auto seg = detail::Segment::open(name, detail::Segment::Access::read_write, trust, std::nullopt, dir);
  std::vector<ReaderView> out;
  for (std::uint32_t i = 0; i < seg->max_readers(); ++i) {
    if (!in_use(*seg->reader(i))) continue;
    ReaderView before = reader_view(*seg, i);
    // Only a holder the kernel says is gone: an untestable one is kept.
    if (before.liveness != Liveness::dead) continue;
    if (detail::reclaim_if_dead(*seg, i)) out.push_back(std::move(before));
  }
  return out;
}

ReaderView let_go_reader(std::string_view name, std::uint32_t slot, std::optional<std::uint64_t> generation,
                         const Trust& trust, std::string_view dir) {
  auto seg = detail::Segment::open(name, detail::Segment::Access::read_write, trust, std::nullopt, dir);
  const std::string bus = "bus '" + std::string(name) + "': ";
  if (slot >= seg->max_readers()) {
    throw Error(Errc::not_found, bus + "no reader slot " + std::to_string(slot) + " (it has " +
                                     std::to_string(seg->max_readers()) + ")");
  }
  layout::ReaderSlot* r = seg->reader(slot);
  // The ticket is only compared: a reader that attached in between is
  // caught by detail::let_go().
  const std::uint64_t owner = r->owner.load(std::memory_order_acquire);
  const ReaderView before = reader_view(*seg, slot);
  if (!in_use(*r) || (generation && before.generation != *generation)) {
    throw Error(Errc::not_found, bus + "no reader in slot " + std::to_string(slot) +
                                     (generation ? " any more (it detached)" : ""));
  }
  const auto refuse = [&](const std::string& why) {
    return Error(Errc::invalid_options, bus + reader_label(before) + " does not hold the producer: " + why);
  };
  if (seg->info().policy == Policy::overwrite) throw refuse("on an overwrite bus no reader does");
  if (before.let_go_ns != 0) throw refuse("it was let go at " + utc_hms(before.let_go_ns) + " UTC");
  if (before.best_effort) throw refuse("it is a best-effort reader");
  if (before.evicted) throw refuse("its slot was taken from it");
  const detail::LetGo done = detail::let_go(*seg, slot, owner, /*give_back=*/false);
  if (done == detail::LetGo::reclaimed) {
    throw Error(Errc::not_found, bus + reader_label(before) + " is gone (its slot was freed)");
  }
  if (done == detail::LetGo::not_active) throw refuse("it detached, or was let go, meanwhile");
  // A producer asleep waiting for space on this reader looks again now.
  layout::SegmentHeader* h = seg->header();
  h->space_futex.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&h->space_futex, INT32_MAX);
  // Another attachment took the slot in that instant: it is the one let go.
  return done == detail::LetGo::changed_hands ? reader_view(*seg, slot) : before;
}

std::vector<std::string> remove_abandoned_creations(std::string_view name, std::string_view dir) {
  validate_name(name);
  return detail::remove_dead_temporaries(name, detail::resolve_dir(dir, name).path);
}

bool forget_reader_name(std::string_view name, std::string_view reader, const Trust& trust, std::string_view dir) {
  auto seg = detail::Segment::open(name, detail::Segment::Access::read_write, trust, std::nullopt, dir);
  return detail::forget_bookmark(*seg, reader);
}

namespace {

// The first message at or after `from` (before `end`) stamped at `time_ns`
// or later, in sequence order; `end` when none is. `found_ns` is its
// timestamp; `unstamped` counts the messages passed over that carry none,
// `any_stamped` says whether one did. Reads each record's fields with the
// consumer's torn-read check and copies no payload; a record rewritten
// while it is looked at is passed over (the producer lapped us: what it
// held is gone).
std::uint64_t first_stamped_at_or_after(const detail::RecordRing& ring, std::uint64_t from, std::uint64_t end,
                                        std::uint64_t time_ns, std::uint64_t& unstamped, bool& any_stamped,
                                        std::uint64_t& found_ns) {
  std::uint64_t seq = from;
  while (seq < end) {
    if (ring.span_mark(seq) == detail::RecordRing::Mark::inside) {
      ++seq;
      continue;
    }
    // Acquire: pairs with the producer's release store of the tag after
    // the record's fields (RecordRing), so the fields read below are its.
    const std::uint64_t t = detail::RecordRing::load_tag(ring.record(seq));
    detail::RecordRing::Copy c;
    if (t != detail::committed_tag(seq) || !ring.copy_checked(seq, t, nullptr, 0, c) || c.records == 0) {
      ++seq;  // uncommitted, overwritten meanwhile, or corrupt
      continue;
    }
    if (c.gap) {
      seq = std::max(seq + 1, c.gap->to);
      continue;
    }
    if (c.timestamp_ns == 0) {
      ++unstamped;
    } else {
      any_stamped = true;
      if (c.timestamp_ns >= time_ns) {
        found_ns = c.timestamp_ns;
        return seq;
      }
    }
    seq += c.records;
  }
  return end;
}

}  // namespace

std::optional<ReaderNameMove> move_reader_name(std::string_view name, std::string_view reader,
                                               ReaderNameTarget target, const Trust& trust, std::string_view dir) {
  auto seg = detail::Segment::open(name, detail::Segment::Access::read_write, trust, std::nullopt, dir);
  const detail::RecordRing ring = seg->ring();
  const std::string& bus = seg->info().name;
  ReaderNameMove out;
  const bool found = detail::with_bookmark_held(*seg, reader, [&](layout::Bookmark& b) {
    // Relaxed: the bookmark's lock, taken by with_bookmark_held(), orders
    // this after the last holder's store (see bookmarks.hpp).
    out.from = b.cursor.load(std::memory_order_relaxed);
    // Acquire: pairs with the producer's release store of head, so every
    // record before it is committed (or a gap marker) when looked at.
    out.head = seg->header()->head.load(std::memory_order_acquire);
    out.oldest = detail::oldest_retained(*seg, out.head);
    std::uint64_t to = 0;
    switch (target.kind) {
      case ReaderNameTarget::Kind::earliest: to = out.oldest; break;
      case ReaderNameTarget::Kind::latest: to = out.head; break;
      case ReaderNameTarget::Kind::sequence: {
        to = target.value;
        if (to < out.oldest || to > out.head) {
          const std::string held =
              out.head > out.oldest
                  ? "the bus holds " + std::to_string(out.oldest) + ".." + std::to_string(out.head - 1)
                  : "the bus holds no message; the next is seq " + std::to_string(out.head);
          detail::fail(Errc::not_retained, bus, "sequence " + std::to_string(to) + " is not retained (" + held + ")");
        }
        break;
      }
      case ReaderNameTarget::Kind::time: {
        bool any_stamped = false;
        to = first_stamped_at_or_after(ring, out.oldest, out.head, target.value, out.unstamped, any_stamped,
                                       out.timestamp_ns);
        if (!any_stamped && out.head > out.oldest)
          detail::fail(Errc::not_retained, bus,
                       "none of the " + std::to_string(out.head - out.oldest) +
                           " retained records carries a timestamp (its producer does not stamp them: "
                           "shmbus-producer --timestamps coarse|precise), so a time cannot be found");
        break;
      }
    }
    // Never inside a message that spans records: a consumer resuming there
    // would move on to the next message and count the rest as lost.
    if (to < out.head) {
      const std::uint64_t next = ring.skip_inside(to, to + ring.max_span());
      if (next != to)
        detail::fail(Errc::not_retained, bus,
                     "sequence " + std::to_string(to) +
                         " is inside a message that spans records (the next message starts at " +
                         std::to_string(next) + ")");
    }
    out.to = to;
    // Relaxed: no reader can hold the name while we do; the unlock in
    // with_bookmark_held() orders this store before the next holder's load
    // of the cursor, which comes after its lock (Consumer attach).
    b.cursor.store(to, std::memory_order_relaxed);
    b.updated_ns.store(detail::realtime_ns(), std::memory_order_relaxed);
  });
  if (!found) return std::nullopt;
  return out;
}

bool remove_in_use(std::string_view name, const Trust& trust, std::string_view dir) {
  // Mapped before the unlink, to tell its users after it.
  std::shared_ptr<detail::Segment> seg;
  try {
    seg = detail::Segment::open(name, detail::Segment::Access::read_write, trust, std::nullopt, dir);
  } catch (const Error& e) {
    if (e.errc() == Errc::not_found) return false;
    throw;
  }
  if (!Bus::remove(name, dir)) return false;
  layout::SegmentHeader& h = *seg->header();
  h.removed.store(1, std::memory_order_relaxed);
  // Consumers read `removed` after their acquire load of `closed`.
  h.closed.store(1, std::memory_order_release);
  h.data_futex.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&h.data_futex, INT32_MAX);
  // A producer asleep waiting for space sees the flag when it wakes.
  h.space_futex.fetch_add(1, std::memory_order_release);
  detail::futex_wake(&h.space_futex, INT32_MAX);
  return true;
}

}  // namespace shmbus
