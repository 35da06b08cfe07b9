// shmbus-bridge — one-line log messages on stderr ("shmbus-bridge: ...").
#pragma once

#include <string_view>

namespace shmbus::bridge {

// Writes "shmbus-bridge: line\n" with one write() so lines from several
// threads never interleave; newlines inside become spaces. Silenced by set_quiet.
void log_line(std::string_view line) noexcept;
// The same, even under set_quiet(true): for what must never go unseen (a gap, stats).
void log_always(std::string_view line) noexcept;
void set_quiet(bool quiet) noexcept;

}  // namespace shmbus::bridge
