// shmbus — what a WaitSet needs of a consumer. Private to the library.
//
// has_news() is exact but reads the consumer's own state: only the thread
// that reads its messages may call it. A Watch, taken by that thread when it
// found no news, holds only words of the shared segment: another thread (the
// set's, see wait_set.cpp) may test it while the first one sleeps elsewhere.
#pragma once

#include <atomic>
#include <cstdint>

#include "layout.hpp"

namespace shmbus {
class Consumer;
}

namespace shmbus::detail {

class Segment;

struct ConsumerWatch {
  layout::SegmentHeader* h = nullptr;
  layout::ReaderSlot* slot = nullptr;
  const Segment* seg = nullptr;
  std::uint64_t seq = 0;         // the cursor: news once head is past it
  std::uint32_t state_seen = 0;  // the slot's state while it is the consumer's
  bool end_pending = false;      // its end of stream not reported yet: closed, or a dead producer, is news
  bool sleeping_mine = false;    // this watcher set slot->sleeping (and counted itself in data_sleepers)
};

struct ConsumerAccess {
  static bool has_news(Consumer& c, bool probe) noexcept;
  static ConsumerWatch watch(Consumer& c) noexcept;
};

// Whether a watch has seen a change that may be news; `probe` allows a
// test of the producer's role lock (a system call).
bool watch_fired(const ConsumerWatch& w, bool probe) noexcept;

// A reader's side of the sleep handshake with the producer, for a consumer
// about to sleep in next() and for a WaitSet's thread sleeping for it.
// arm_data_sleep() marks the slot asleep (slot->sleeping, shown by the
// inspector; one count of data_sleepers goes with it, owned by whoever set
// the flag, which a reclaimer gives back if the holder dies asleep) and
// sets data_armed, which makes the producer's next commit wake data_futex.
// Returns whether this caller set the flag. Then the caller loads
// data_futex, issues heavy_barrier() and looks at head (and the record
// below it) once more before it sleeps: Dekker with the producer, which
// stores the tag and head, then loads data_armed. disarm_data_sleep() undoes what arm took (`mine`).
inline bool arm_data_sleep(layout::SegmentHeader* h, layout::ReaderSlot* slot) noexcept {
  bool mine = false;
  if (slot->sleeping.load(std::memory_order_relaxed) == 0) {
    h->data_sleepers.fetch_add(1, std::memory_order_acq_rel);
    if (slot->sleeping.exchange(1, std::memory_order_acq_rel) == 0)
      mine = true;
    else
      h->data_sleepers.fetch_sub(1, std::memory_order_acq_rel);
  }
  h->data_armed.store(1, std::memory_order_relaxed);
  return mine;
}
inline void disarm_data_sleep(layout::SegmentHeader* h, layout::ReaderSlot* slot, bool mine) noexcept {
  if (mine && slot->sleeping.exchange(0, std::memory_order_acq_rel) != 0)
    h->data_sleepers.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace shmbus::detail
