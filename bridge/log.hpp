// shmbus-bridge — one-line log messages on stderr ("shmbus-bridge: ..."), or
// with --json one JSON object per line (docs/programs.md, "Every line is JSON").
#pragma once

#include <string_view>

namespace shmbus::bridge {

// Writes "shmbus-bridge: line\n" (under tools::set_json_lines(true):
// {"program":"shmbus-bridge","notice":"line"}) with one write() so lines from
// several threads never interleave; newlines inside become spaces. Silenced
// by set_quiet.
void log_line(std::string_view line) noexcept;
// The same, even under set_quiet(true): for what must never go unseen (a gap, stats).
void log_always(std::string_view line) noexcept;
// Writes `object`, one JSON object already formatted, as one line, even
// under set_quiet(true) (the stats lines of --json).
void log_json(std::string_view object) noexcept;
void set_quiet(bool quiet) noexcept;

}  // namespace shmbus::bridge
