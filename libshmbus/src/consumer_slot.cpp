// shmbus — a consumer's reader slot (consumer_impl.hpp): attaching at its
// start position, detaching, its copy buffer and durable name, and a slot
// the reader finds changed: let go by the hold limit, or taken from it.
#include "consumer_impl.hpp"

#include <unistd.h>

#include <cstring>
#include <string>

#include "bookmarks.hpp"
#include "reader_table.hpp"

namespace shmbus {

void Consumer::Impl::make_copy_buffer() {
  batch_cap = std::clamp<std::size_t>(detail::kCopyBudget / std::max<std::uint32_t>(1, max_payload), 1, 64);
  copy_room = batch_cap * max_payload;
  copy = std::make_unique<std::byte[]>(copy_room);
}

void Consumer::Impl::grow_copy_buffer(std::size_t length) {
  std::size_t room = copy_room;
  while (room < length) room *= 2;
  room = std::max<std::size_t>(std::min<std::size_t>(room, ring.max_message()), length);
  copy = std::make_unique<std::byte[]>(room);
  copy_room = room;
}

void Consumer::Impl::drop_bookmark() noexcept {
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

std::uint64_t Consumer::Impl::activate(std::uint64_t c) noexcept {
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

bool Consumer::Impl::view_overwritten() const noexcept {
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

bool Consumer::Impl::take_let_go(bool& stale_view) noexcept {
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

void Consumer::Impl::slot_taken(bool& let_go, bool& evicted, std::uint64_t& lost_now, bool& stale_view) noexcept {
  if (take_let_go(stale_view)) {
    let_go = true;
  } else {
    evicted = true;
    lost_now += rejoin(stale_view);
  }
}

void Consumer::Impl::slot_taken(ReadResult& r) noexcept {
  bool let_go = false, evicted = false;
  slot_taken(let_go, evicted, r.lost, r.stale_view);
  r.status = let_go ? ReadStatus::let_go : ReadStatus::evicted;
  r.message = {};
  r.message.seq = cursor;
}

std::uint64_t Consumer::Impl::rejoin(bool& stale_view) noexcept {
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
  int lock_error = 0;
  const std::optional<std::uint32_t> claimed = detail::claim_slot(seg, role.get(), lock_error);
  if (!claimed) {
    drop_bookmark();  // not started: a name created just now is not remembered
    if (lock_error)
      detail::fail(Errc::system, seg.info().name,
                   std::string("cannot lock a reader slot: ") + std::strerror(lock_error));
    detail::fail(Errc::reader_table_full, seg.info().name,
                 "all " + std::to_string(seg.max_readers()) + " reader slots hold live readers");
  }
  index = *claimed;
  slot = seg.reader(index);
  owner_pid = ::getpid();
  ticket = detail::open_slot(seg, index, owner_pid, opt.name);

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
  detail::close_slot(seg, index, ticket, delivered, lost, holds);
  detail::unlock(role.get(), layout::reader_lock_byte(index));
  role = detail::RoleFd();
  slot = nullptr;
}

}  // namespace shmbus
