// shmbus-inspect — small text helpers: durations, sizes, rates, times, escapes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace shmbus::inspect_tool {

// "200ms", "1s", "1.5s", "250us", "2m", or a bare number of seconds.
// Empty optional when `text` is not a duration.
std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text);

// CLOCK_REALTIME now, in nanoseconds since the epoch (the clock the segment uses).
std::uint64_t realtime_now_ns() noexcept;

// Seconds from `then_ns` to `now_ns`; empty when `then_ns` is 0 (never).
std::optional<double> age_seconds(std::uint64_t then_ns, std::uint64_t now_ns) noexcept;

std::string human_bytes(std::uint64_t bytes);           // "4.0 KiB", "16.8 MiB"
std::string human_duration(double seconds);             // "850ms", "3.2s", "4m05s", "2h13m", "3d04h"
std::string human_age(std::optional<double> seconds);   // "3.2s ago", or "never"
std::string human_rate(std::optional<double> per_sec);  // "1.23M/s", "850/s", or "-"
std::string utc_time(std::uint64_t realtime_ns);        // "2024-05-01 12:00:00.123456789 UTC"

// Printable ASCII as is, everything else as C escapes (\n, \t, \xNN).
std::string escape(std::span<const std::byte> bytes);
std::string escape(std::string_view text);

// True when `bytes` is valid UTF-8 without control characters other than
// tab, newline and carriage return: safe to show as text.
bool is_text(std::span<const std::byte> bytes) noexcept;

// "00 1a ff" style, no separators at the ends.
std::string hex(std::span<const std::byte> bytes);

}  // namespace shmbus::inspect_tool
