// shmbus — the reader table: freeing the slots of readers that are gone
// (layout.hpp, "Role locks"). Private to the library.
#pragma once

#include <cstdint>

#include "segment.hpp"

namespace shmbus::detail {

// Frees reader slot `i`, left in use by a holder that is gone. The caller
// holds the slot's role lock. Returns false if there was nothing to free.
bool clean_slot(Segment& s, std::uint32_t i) noexcept;

// Reclaims reader slot `i` if nobody holds its role lock (its holder is
// gone). A holder that cannot be tested is never reclaimed. Returns true if
// it did.
bool reclaim_if_dead(Segment& s, std::uint32_t i) noexcept;

// One best-effort reader fewer (header.best_effort_readers), never below
// zero: a count left too high (a slot freed by a stray store) only keeps the
// producer writing word by word, which is safe.
void forget_best_effort_reader(Segment& s) noexcept;

}  // namespace shmbus::detail
