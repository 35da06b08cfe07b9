// shmbus — owner trust: whose segment a process may map (docs/SECURITY.md,
// Trust in shmbus/bus.hpp). Private to the library.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <string_view>

#include "shmbus/bus.hpp"

namespace shmbus::detail {

// Refuses (Errc::foreign_owner, naming owner, group and mode) a segment
// owned by anyone this process does not trust: by default only its own
// effective uid and root, else the owners and groups in `trust`. `st` must
// come from fstat on the descriptor that gets mapped, so the file cannot be
// swapped between the check and the use.
void check_owner(std::string_view name, const std::string& path, const struct stat& st, const Trust& trust);

// The permission bits of `m` as people write them: "0600".
std::string mode_label(mode_t m);

}  // namespace shmbus::detail
