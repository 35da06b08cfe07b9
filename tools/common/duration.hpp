// shmbus tools — durations on the command line: "250ns", "100us", "500ms",
// "2s", "1.5m", "1h"; a bare number means seconds; "forever" (or "inf") means
// no limit. Used by every shmbus program for timeouts.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace shmbus::tools {

// Throws std::invalid_argument with a one-line reason naming `text`.
std::chrono::nanoseconds parse_duration(std::string_view text);

// "forever", "1.5 s", "250 ms", "12 us", "800 ns": for messages.
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace shmbus::tools
