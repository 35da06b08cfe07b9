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

// Lets reader slot `i` (attachment `owner`, ReaderSlot::owner as the
// caller saw it) go: kSlotActive -> kSlotBestEffort, stamped let_go_ns and
// counted in readers_let_go. From then on it does not hold the producer; it
// reads on with checked copies and is told what it loses. Counted as a
// best-effort reader first, so that from the moment it may see its new
// state every record is written as it reads it (word by word). A holder
// that died is reclaimed instead. Done by a producer whose hold limit ran
// out, and by an administrator at any time (let_go_reader()).
//
// A slot that changed hands between the caller's look and the exchange
// (another attachment in it now) is given back to kSlotActive only with
// `give_back`, which only the producer may ask: between its own two
// exchanges nobody else judges the state. Any other caller leaves the newer
// reader let go (changed_hands): a producer may already have moved past it.
enum class LetGo { let_go, changed_hands, not_active, reclaimed };
LetGo let_go(Segment& s, std::uint32_t i, std::uint64_t owner, bool give_back) noexcept;

// One best-effort reader fewer (header.best_effort_readers), never below
// zero: a count left too high (a slot freed by a stray store) only keeps the
// producer writing word by word, which is safe.
void forget_best_effort_reader(Segment& s) noexcept;

}  // namespace shmbus::detail
