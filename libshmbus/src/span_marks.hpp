// shmbus — storing a run of span marks (layout.hpp, "Spans").
//
// A message of k records takes k - 1 marks, one u64 per slot inside it, all
// in one run of the span table (a span never crosses the end of the ring).
// For large messages those stores were most of what handing a message over
// cost (a 64 KiB message in 256-byte records: 256 of them), so they go in
// the widest stores the CPU has: two, four or eight marks at a time.
#pragma once

#include <cstdint>

#include "layout.hpp"

namespace shmbus::detail {

// Stores marks[i] = first + i + 1 for i in [0, count): the mark of position
// first + i. Relaxed: the caller's release fence orders them before the
// payload (RecordRing::mark_span()). Each 8-byte mark is stored whole.
void store_mark_run(layout::SpanMark* marks, std::uint64_t first, std::uint64_t count) noexcept;

}  // namespace shmbus::detail
