// shmbus — durable reader names: the bookmark table (layout.hpp, Bookmark).
// A named reader's cursor outlives its attachment here. Private to the
// library.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "layout.hpp"
#include "segment.hpp"

namespace shmbus::detail {

// The name stored in a bookmark or reader slot, read once (untrusted bytes).
std::string stored_name(const char (&name)[layout::kReaderNameSize]);

// The valid bookmark named `name`, if any.
std::optional<std::uint32_t> find_bookmark(const Segment& s, std::string_view name) noexcept;

// Takes the bookmark named `name` by locking its role byte through `fd`,
// creating it with `initial_cursor` if it does not exist. A dead holder's
// bookmark is taken over. Throws Errc::name_in_use (naming the live
// holder's pid) or Errc::bookmarks_full. Sets `created` when the bookmark is new.
std::uint32_t hold_bookmark(Segment& s, std::string_view name, int fd, std::uint64_t initial_cursor,
                            bool& created);

// Lets go of a bookmark held through `fd` (its cursor stays remembered).
void release_bookmark(Segment& s, std::uint32_t i, int fd) noexcept;

// Holds the bookmark named `name` through a lock of its own for as long as
// `body(bookmark)` runs, so that no reader takes the name meanwhile, and
// returns true; false if there is no such bookmark. Throws
// Errc::name_in_use if a live reader holds it. `body` may store the
// bookmark's cursor (relaxed): the unlock after it orders that store
// before the next holder's loads, which come after its lock.
bool with_bookmark_held(Segment& s, std::string_view name, const std::function<void(layout::Bookmark&)>& body);

// Drops the bookmark named `name`. Returns false if there is none; throws
// Errc::name_in_use if a live reader holds it.
bool forget_bookmark(Segment& s, std::string_view name);

}  // namespace shmbus::detail
