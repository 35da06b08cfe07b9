// shmbus — back-pressure in a `block` bus: how far the producer may write
// before the readers that hold it must move on, and the wait until they do.
// Private to the library; the producer's (producer.cpp) only.
//
// Space accounting. The producer may write sequence s only while s < limit,
// where limit = floor + capacity and `floor` is at most every active
// reader's cursor at the last rescan. limit is cached: the reader table is
// rescanned only when s reaches it, which happens at least every
// capacity/16 messages (so a late joiner always finds most of the ring
// retained) and whenever the ring would otherwise be full.
//
// A joining reader and a rescan meet in a Dekker handshake: the producer
// stores header.oldest = floor, fences, and scans cursors again; the reader
// stores its cursor, fences, and loads header.oldest, moving its cursor up to
// it if needed. Either the producer sees the new cursor and lowers floor, or
// the reader sees the floor and starts at or after it; both are safe.
//
// Waiting for space. Spin, then yield, then sleep on header.space_futex
// (waiter.hpp), asking for a whole chunk so that readers wake the producer
// once per chunk, not on every cursor update. Once per liveness period a
// reader holding the ring that died is reclaimed; with a hold limit
// (hold_limit.hpp) one that stopped is let go. The wait shows in the header
// (blocked_on_slot, wait_start_ns, producer_waits) for the inspector, and
// lasts across calls that time out until one finds room or the role goes.
#pragma once

#include <chrono>
#include <cstdint>

#include "hold_limit.hpp"
#include "segment.hpp"
#include "shmbus/wait.hpp"

namespace shmbus::detail {

class BackPressure {
 public:
  // `max_hold`: ProducerOptions::max_hold (ignored in `overwrite`).
  BackPressure(Segment& seg, const WaitOptions& wait, std::chrono::nanoseconds max_hold);

  // Sequences up to `last_seq` may be written without a look at the readers.
  bool below(std::uint64_t last_seq) const noexcept { return last_seq < limit_; }
  // The first sequence that needs a look: a record below it is one every
  // reader is done with (what the producer may prefetch for writing).
  std::uint64_t limit() const noexcept { return limit_; }
  // The next write looks at the readers first (the floor moved).
  void rescan_next() noexcept { limit_ = 0; }

  // A producer taking the role, publishing next at `s`.
  void start(std::uint64_t s) noexcept;
  // The role is given up: a wait that timed out last ends with it.
  void leave() noexcept;

  enum class Wait { room, timeout, removed };
  // Until sequence `last_seq` may be written, up to `timeout` (or the
  // caller's Interrupt). `removed`: the bus was removed by force meanwhile.
  Wait wait(std::uint64_t last_seq, std::chrono::nanoseconds timeout) noexcept;

  // Readers attached and alive (one system call per attached reader).
  std::uint32_t count_live_readers() const;

 private:
  std::uint64_t min_active_cursor(std::uint64_t upper, std::uint32_t* holder) const noexcept;
  // `holder`, if given: the reader with the lowest cursor below s (unchanged if none).
  void recompute(std::uint64_t s, std::uint32_t* holder = nullptr) noexcept;
  void reclaim_dead_holders(std::uint64_t needed_floor) noexcept;
  void show_holder(std::uint32_t holder) noexcept;
  void end_wait() noexcept;

  Segment& seg_;
  layout::SegmentHeader* h_;
  WaitOptions wait_;
  std::uint64_t cap_;
  std::uint64_t chunk_;      // rescan at least every `chunk_` messages
  std::uint64_t limit_ = 0;  // may write sequences < limit_ without rescanning
  std::uint64_t next_liveness_ = 0;  // when to check the readers holding us back
  // A wait for space is under way (see the top of this file).
  bool waiting_ = false;
  HoldLimit hold_;
};

}  // namespace shmbus::detail
