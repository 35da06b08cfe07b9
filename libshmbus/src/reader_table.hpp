// shmbus — the reader table: claiming a slot for a new reader, freeing it
// when the reader detaches or is gone (layout.hpp, "Role locks"), and
// letting a reader go. Private to the library.
//
// A slot is free for a new reader exactly when no live process holds its
// role lock. The holder of the lock alone writes the slot's first line
// (owner ticket, pid, name, counters); the state word says whether the
// producer counts the slot's cursor (kSlotActive), sees it as a best-effort
// reader, or ignores it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "segment.hpp"

namespace shmbus::detail {

// Claims a reader slot through `fd`, a role descriptor of this process:
// the first whose lock no live process holds. One left in use by a reader
// that died is cleaned first; one locked only for a moment by a reclaimer
// is waited out. Returns its index, its lock held through `fd`; nullopt if
// none, with `lock_error` the errno of a lock that failed otherwise than by
// being held (0: every slot holds a live reader).
std::optional<std::uint32_t> claim_slot(Segment& s, int fd, int& lock_error) noexcept;

// Makes claimed slot `i` a new attachment's: a ticket nobody held before
// (returned; it is ReaderSlot::owner while the slot is ours), `pid` and its
// namespace, `name` (cut to fit), counters from zero. The state stays free
// until the reader activates it.
std::uint64_t open_slot(Segment& s, std::uint32_t i, pid_t pid, std::string_view name) noexcept;

// Frees slot `i` if attachment `ticket` still has it (it may have been
// reclaimed), leaving `delivered` and `lost` behind for the inspector. A
// reader that held the producer wakes it. The caller unlocks the slot.
void close_slot(Segment& s, std::uint32_t i, std::uint64_t ticket, std::uint64_t delivered,
                std::uint64_t lost, bool held_producer) noexcept;

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
