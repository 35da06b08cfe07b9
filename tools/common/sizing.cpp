#include "tools/common/sizing.hpp"

#include <fmt/format.h>
#include <shmbus/bus.hpp>
#include <shmbus/placement.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "tools/common/duration.hpp"

namespace shmbus::tools {

namespace {

// A non-negative decimal number ("1", "1.5", "1e6") at the start of `s`;
// the rest of `s` is left in `rest`. NaN when there is none.
double leading_number(std::string_view s, std::string_view& rest) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || !(v >= 0) || !std::isfinite(v)) return std::nan("");
  rest = s.substr(static_cast<std::size_t>(p - s.data()));
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

}  // namespace

std::uint64_t parse_bytes(std::string_view text, std::string_view option) {
  std::string_view unit;
  const double v = leading_number(trim(text), unit);
  unit = trim(unit);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "kB" || unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  if (std::isnan(v) || scale == 0 || v * scale >= 0x1p63) {
    throw std::invalid_argument(
        fmt::format("{} '{}' is not a byte count: N, or N with B, KiB, MiB, GiB (or K, M, G; kB, MB, GB "
                    "are powers of 1000), e.g. 1MiB",
                    option, text));
  }
  return static_cast<std::uint64_t>(std::ceil(v * scale));
}

std::uint64_t parse_retention(std::string_view text) {
  const std::string_view t = trim(text);
  const auto fail = [&] {
    return std::invalid_argument(
        fmt::format("--retain '{}' is neither a message count N nor DURATION@RATE (e.g. 2s@50000/s)", text));
  };
  const std::size_t at = t.find('@');
  std::string_view rest;
  if (at == std::string_view::npos) {
    const double n = leading_number(t, rest);
    if (std::isnan(n) || !rest.empty() || n >= 0x1p62) throw fail();
    return static_cast<std::uint64_t>(std::ceil(n));
  }
  std::chrono::nanoseconds d;
  try {
    d = parse_duration(t.substr(0, at));
  } catch (const std::invalid_argument&) {
    throw fail();
  }
  std::string_view rate_text = trim(t.substr(at + 1));
  if (rate_text.ends_with("/s")) rate_text.remove_suffix(2);
  const double rate = leading_number(rate_text, rest);
  if (std::isnan(rate) || !rest.empty() || d == std::chrono::nanoseconds::max()) throw fail();
  const double n = std::ceil(rate * std::chrono::duration<double>(d).count());
  if (n >= 0x1p62) throw fail();
  return static_cast<std::uint64_t>(n);
}

Sizing size_bus(const SizingAsk& ask) {
  Sizing s;
  s.record_size = ask.record_size;
  if (s.record_size == 0) {
    s.record_size = ask.message == 0 ? BusOptions{}.record_size
                    : ask.message <= max_record_size ? record_size_for(static_cast<std::uint32_t>(ask.message))
                                                     : 0;
    // A usual message longer than any record spans records of the default size.
    if (s.record_size == 0) s.record_size = BusOptions{}.record_size;
  }
  if (s.record_size < 64 || s.record_size > max_record_size || s.record_size % 8 != 0) {
    throw std::invalid_argument(fmt::format(
        "a record size of {} bytes is not one a bus takes (a multiple of 8, 64 to {})", s.record_size,
        max_record_size));
  }
  if (ask.max_message > max_message_limit) {
    throw std::invalid_argument(
        fmt::format("no bus takes a message of {} bytes: the limit is 1 GiB ({} bytes)", ask.max_message,
                    max_message_limit));
  }
  const std::uint64_t usual = ask.message == 0 ? s.record_size - record_header_size : ask.message;
  const std::uint64_t per_message = records_for(usual, s.record_size);
  s.capacity = default_min_capacity;
  s.decided_by = "minimum";
  const std::uint64_t for_max = capacity_for(std::max(ask.max_message, usual), s.record_size, s.capacity);
  if (for_max == 0) {
    throw std::invalid_argument(fmt::format("no ring of up to {} records of {} bytes takes a message of {} bytes",
                                            max_capacity, s.record_size, ask.max_message));
  }
  if (for_max > s.capacity) {
    s.capacity = for_max;
    s.decided_by = "max message";
  }
  if (ask.retain != 0) {
    if (ask.retain > max_capacity / per_message) {
      throw std::invalid_argument(fmt::format("no ring of up to {} records of {} bytes retains {} messages of {} bytes",
                                              max_capacity, s.record_size, ask.retain, usual));
    }
    std::uint64_t c = s.capacity;
    while (c < ask.retain * per_message) c *= 2;
    if (c > s.capacity) {
      s.capacity = c;
      s.decided_by = "retain";
    }
  }
  s.max_message = max_message_for(s.capacity, s.record_size);
  s.ring_bytes = s.capacity * s.record_size;
  s.retains = s.capacity / per_message;
  return s;
}

}  // namespace shmbus::tools
