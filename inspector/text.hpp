// shmbus-inspect — small text helpers: sizes, rates, ages, times. (Durations,
// escapes and the clock are tools/common's, shared with the other programs.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shmbus::inspect_tool {

// Seconds from `then_ns` to `now_ns`; empty when `then_ns` is 0 (never).
std::optional<double> age_seconds(std::uint64_t then_ns, std::uint64_t now_ns) noexcept;

std::string human_bytes(std::uint64_t bytes);           // "4.0 KiB", "16.8 MiB"
std::string human_duration(double seconds);             // "850ms", "3.2s", "4m05s", "2h13m", "3d04h"
std::string human_age(std::optional<double> seconds);   // "3.2s ago", or "never"
std::string human_rate(std::optional<double> per_sec);  // "1.23M/s", "850/s", or "-"
std::string utc_time(std::uint64_t realtime_ns);        // "2024-05-01 12:00:00.123456789 UTC"
std::string utc_hms(std::uint64_t realtime_ns);         // "12:00:00" (UTC)

}  // namespace shmbus::inspect_tool
