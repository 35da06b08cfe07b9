// shmbus — the hold limit (ProducerOptions::max_hold): how long a reader
// that stops may hold a `block` producer before the producer lets it go.
// Private to the library.
//
// Only time the producer spends waiting for space counts. While it waits it
// looks at the readers holding it back every eighth of the limit (within
// bounds); a reader whose cursor has not moved since the last look is
// charged the time since then, and one charged the whole limit is let go
// (reader_table.hpp, let_go()): best-effort from then on, told of each lap
// as a loss. A reader seen for the first time, one that moved, or a new
// attachment in the slot starts from zero.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "segment.hpp"

namespace shmbus::detail {

class HoldLimit {
 public:
  // `applies`: a `block` bus (an `overwrite` producer is never held).
  HoldLimit(std::chrono::nanoseconds max_hold, bool applies, std::uint32_t max_readers);

  // The limit in nanoseconds; 0 = none.
  std::uint64_t limit_ns() const noexcept { return limit_ns_; }
  // How often a waiting producer looks; UINT64_MAX with no limit.
  std::uint64_t period_ns() const noexcept;

  // One look while waiting for `needed_floor` (every cursor must reach it):
  // charges each reader holding it back `waited_ns`, and lets go one
  // charged the whole limit. Returns true if it let one go.
  bool account(Segment& seg, std::uint64_t needed_floor, std::uint64_t waited_ns) noexcept;

 private:
  // Per reader slot: how long we have waited for the attachment holding it
  // without its cursor moving (our own memory; sized once).
  struct Held {
    std::uint64_t owner = 0;   // the attachment's ticket when last seen holding us
    std::uint64_t cursor = 0;  // its cursor then
    std::uint64_t waited_ns = 0;
    bool seen = false;  // seen holding us at the last look
  };
  std::uint64_t limit_ns_;
  std::vector<Held> held_;
};

}  // namespace shmbus::detail
