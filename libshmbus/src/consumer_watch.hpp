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
  const std::atomic<std::uint64_t>* tag = nullptr;  // of the record at the cursor
  std::uint64_t tag_seen = 0;   // its value when the watch was taken
  std::uint64_t tag_ready = 0;  // the committed tag of the cursor's sequence
  std::uint64_t seq = 0;        // the cursor: a ready tag is news once head is past it
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

}  // namespace shmbus::detail
