// shmbus — the reader table (reader_table.hpp).
#include "reader_table.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>

#include "role_lock.hpp"
#include "sys.hpp"

namespace shmbus::detail {

std::optional<std::uint32_t> claim_slot(Segment& s, int fd, int& lock_error) noexcept {
  const std::uint32_t n = s.max_readers();
  lock_error = 0;
  for (int pass = 0; pass < 4 && lock_error == 0; ++pass) {
    bool briefly_locked = false;  // a slot in nobody's use, locked for a moment by a reclaimer
    for (std::uint32_t i = 0; i < n; ++i) {
      // Free for us exactly when no live process holds its lock.
      if (!try_lock(fd, layout::reader_lock_byte(i))) {
        if (errno != EAGAIN && errno != EACCES) lock_error = errno;
        const layout::ReaderSlot* r = s.reader(i);
        briefly_locked |= r->owner.load(std::memory_order_relaxed) == layout::kOwnerFree &&
                          r->state.load(std::memory_order_relaxed) == layout::kSlotFree;
        continue;
      }
      clean_slot(s, i);  // left in use by a reader that died
      return i;
    }
    if (!briefly_locked) break;
    ::sched_yield();  // setup path: let the reclaimer finish
  }
  return std::nullopt;
}

std::uint64_t open_slot(Segment& s, std::uint32_t i, pid_t pid, std::string_view name) noexcept {
  layout::ReaderSlot* slot = s.reader(i);
  // Before the ticket: a stamp from a producer that let the slot's last
  // attachment go must never be taken for ours.
  slot->let_go_ns.store(0, std::memory_order_relaxed);
  // Only the holder of the slot's lock writes its first line.
  const std::uint64_t ticket = slot->generation.fetch_add(1, std::memory_order_relaxed) + 1;
  slot->owner.store(ticket, std::memory_order_relaxed);
  slot->pid.store(static_cast<std::uint32_t>(pid), std::memory_order_relaxed);
  slot->start_ticks.store(self_start_ticks(), std::memory_order_relaxed);
  slot->pid_ns.store(self_pid_namespace(), std::memory_order_relaxed);
  std::memset(slot->name, 0, sizeof slot->name);
  std::memcpy(slot->name, name.data(), std::min(name.size(), sizeof slot->name - 1));
  slot->attach_time_ns.store(realtime_ns(), std::memory_order_relaxed);
  slot->delivered.store(0, std::memory_order_relaxed);
  slot->lost.store(0, std::memory_order_relaxed);
  slot->sleeping.store(0, std::memory_order_relaxed);
  slot->last_active_ns.store(realtime_ns(), std::memory_order_relaxed);
  return ticket;
}

void close_slot(Segment& s, std::uint32_t i, std::uint64_t ticket, std::uint64_t delivered,
                std::uint64_t lost, bool held_producer) noexcept {
  layout::ReaderSlot* slot = s.reader(i);
  if (slot->owner.load(std::memory_order_relaxed) != ticket) return;
  slot->delivered.store(delivered, std::memory_order_relaxed);
  slot->lost.store(lost, std::memory_order_relaxed);
  // The producer stops counting our cursor (pairs with its acquire load).
  const std::uint32_t was = slot->state.exchange(layout::kSlotFree, std::memory_order_acq_rel);
  slot->owner.store(layout::kOwnerFree, std::memory_order_release);
  if (was == layout::kSlotBestEffort) forget_best_effort_reader(s);
  if (held_producer) {
    s.header()->space_futex.fetch_add(1, std::memory_order_release);
    futex_wake(&s.header()->space_futex, INT_MAX);
  }
}

bool clean_slot(Segment& s, std::uint32_t i) noexcept {
  layout::ReaderSlot* r = s.reader(i);
  if (r->owner.load(std::memory_order_relaxed) == layout::kOwnerFree &&
      r->state.load(std::memory_order_relaxed) == layout::kSlotFree)
    return false;
  // A reader killed while asleep still holds one count of data_sleepers:
  // give it back, or the inspector would go on showing it asleep.
  if (r->sleeping.exchange(0, std::memory_order_acq_rel) != 0)
    s.header()->data_sleepers.fetch_sub(1, std::memory_order_acq_rel);
  // A later attachment gets a ticket nobody held before.
  r->generation.fetch_add(1, std::memory_order_relaxed);
  // The producer stops counting this cursor once it sees kSlotFree (pairs with its acquire load).
  const std::uint32_t was = r->state.exchange(layout::kSlotFree, std::memory_order_acq_rel);
  r->owner.store(layout::kOwnerFree, std::memory_order_release);
  if (was == layout::kSlotBestEffort) forget_best_effort_reader(s);
  s.header()->readers_reclaimed.fetch_add(1, std::memory_order_relaxed);
  // A producer asleep on this reader can go on now.
  s.header()->space_futex.fetch_add(1, std::memory_order_release);
  futex_wake(&s.header()->space_futex, INT32_MAX);
  return true;
}

bool reclaim_if_dead(Segment& s, std::uint32_t i) noexcept {
  const layout::ReaderSlot* r = s.reader(i);
  if (r->owner.load(std::memory_order_relaxed) == layout::kOwnerFree &&
      r->state.load(std::memory_order_relaxed) == layout::kSlotFree)
    return false;
  if (s.reader_holder(i) != Holder::none) return false;
  // Locked through the mapping's own description while we clean it, so an
  // attacher (which takes the same lock) never meets a half-cleaned slot.
  // That description is shared by every thread of this process using this
  // Segment: they take turns.
  const std::lock_guard<std::mutex> one_at_a_time(s.reclaim_mutex());
  const std::uint64_t byte = layout::reader_lock_byte(i);
  if (!try_lock(s.fd(), byte)) return false;  // held after all, or a read-only mapping
  const bool cleaned = clean_slot(s, i);
  unlock(s.fd(), byte);
  return cleaned;
}

LetGo let_go(Segment& s, std::uint32_t i, std::uint64_t owner, bool give_back) noexcept {
  if (reclaim_if_dead(s, i)) return LetGo::reclaimed;
  layout::SegmentHeader* h = s.header();
  layout::ReaderSlot* r = s.reader(i);
  // Counted first, so that a producer that sees the new state (acquire)
  // also sees the count and writes every record this reader may read from
  // then on word by word (best_effort_readers). Relaxed: every writer of
  // the count uses a read-modify-write.
  h->best_effort_readers.fetch_add(1, std::memory_order_relaxed);
  std::uint32_t want = layout::kSlotActive;
  // Acq_rel. Acquire: a state stored by a new attachment (release, after its
  // owner ticket) makes its ticket visible to the check below; a reader
  // detaching (or a reclaimer) at the same moment makes this fail. Release:
  // pairs with the producer's acquire load of the state (min_active_cursor)
  // when another process lets the reader go; the producer's fence after
  // that look then orders it before every tag it stores next, so a reader
  // that finds its record rewritten also finds itself let go.
  if (!r->state.compare_exchange_strong(want, layout::kSlotBestEffort, std::memory_order_acq_rel)) {
    forget_best_effort_reader(s);
    return LetGo::not_active;
  }
  LetGo done = LetGo::let_go;
  if (r->owner.load(std::memory_order_relaxed) != owner) {
    // The slot changed hands between the caller's look and the exchange:
    // the reader let go is a newer one. The producer (give_back) puts its
    // state back, unless it detached meanwhile (it then took its count down
    // itself): nobody else looks at the state between our two exchanges.
    // Anyone else must not: a producer that saw the reader let go may
    // already have moved past it, so it stays let go, and is stamped.
    if (give_back) {
      want = layout::kSlotBestEffort;
      if (r->state.compare_exchange_strong(want, layout::kSlotActive, std::memory_order_acq_rel))
        forget_best_effort_reader(s);
      return LetGo::not_active;
    }
    done = LetGo::changed_hands;
  }
  // Relaxed: labels for the inspector and the reader's own report.
  r->let_go_ns.store(realtime_ns(), std::memory_order_relaxed);
  h->readers_let_go.fetch_add(1, std::memory_order_relaxed);
  return done;
}

void forget_best_effort_reader(Segment& s) noexcept {
  std::atomic<std::uint32_t>& n = s.header()->best_effort_readers;
  std::uint32_t v = n.load(std::memory_order_relaxed);
  // Relaxed: only the count matters; a producer that still sees the old one
  // writes word by word a little longer.
  while (v != 0 && !n.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
  }
}

}  // namespace shmbus::detail
