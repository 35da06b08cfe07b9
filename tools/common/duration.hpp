// shmbus tools — durations on the command line, the one grammar of every
// shmbus program: "250ns", "100us", "500ms", "2s", "1.5m" (or "1.5min"),
// "1h"; "forever" (or "inf", "infinite") means no limit. A bare number counts
// in the option's own unit: seconds, except where a program documents
// milliseconds (shmbus-nats's --connect-timeout, say, which took only
// milliseconds before units were accepted).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace shmbus::tools {

// Throws std::invalid_argument with a one-line reason naming `text`.
std::chrono::nanoseconds parse_duration(std::string_view text,
                                        std::chrono::nanoseconds bare_unit = std::chrono::seconds(1));

// The same in whole milliseconds ("forever" stays milliseconds::max()).
std::chrono::milliseconds parse_duration_ms(std::string_view text,
                                            std::chrono::nanoseconds bare_unit = std::chrono::seconds(1));

// "forever", "1.5 s", "250 ms", "12 us", "800 ns": for messages.
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace shmbus::tools
