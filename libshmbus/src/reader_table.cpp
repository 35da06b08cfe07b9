// shmbus — the reader table: freeing the slots of readers that are gone.
#include "reader_table.hpp"

#include <climits>
#include <mutex>

#include "sys.hpp"

namespace shmbus::detail {

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

void forget_best_effort_reader(Segment& s) noexcept {
  std::atomic<std::uint32_t>& n = s.header()->best_effort_readers;
  std::uint32_t v = n.load(std::memory_order_relaxed);
  // Relaxed: only the count matters; a producer that still sees the old one
  // writes word by word a little longer.
  while (v != 0 && !n.compare_exchange_weak(v, v - 1, std::memory_order_relaxed)) {
  }
}

}  // namespace shmbus::detail
