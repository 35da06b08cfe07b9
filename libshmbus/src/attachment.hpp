// shmbus — what a producer or a consumer holds of the bus it works on.
// Private to the library.
#pragma once

#include <cstdint>

#include "record_ring.hpp"
#include "segment.hpp"
#include "shmbus/bus.hpp"

namespace shmbus::detail {

// The mapping (kept alive by `bus`) and its fixed geometry, read once from
// the validated segment: never from the shared header again.
struct Attachment {
  explicit Attachment(const Bus& b)
      : bus(b),
        seg(*segment_of(b)),
        h(seg.header()),
        ring(seg.ring()),
        cap(seg.capacity()),
        max_payload(seg.max_payload()),
        overwrite(seg.overwrite()) {}

  Bus bus;
  Segment& seg;
  layout::SegmentHeader* h;
  RecordRing ring;
  std::uint64_t cap;
  std::uint32_t max_payload;
  bool overwrite;
};

}  // namespace shmbus::detail
