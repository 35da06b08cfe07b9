#include "tools/common/duration.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace shmbus::tools {

std::chrono::nanoseconds parse_duration(std::string_view text, std::chrono::nanoseconds bare_unit) {
  auto bad = [&](const char* why) {
    return std::invalid_argument(fmt::format(
        "invalid duration '{}': {} (use e.g. 100us, 500ms, 2s, 1m, or forever)", text, why));
  };
  if (text == "forever" || text == "inf" || text == "infinite") {
    return std::chrono::nanoseconds::max();
  }
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end == first) throw bad("no number");
  if (!std::isfinite(value) || value < 0) throw bad("must be a non-negative number");
  const std::string_view unit(end, static_cast<std::size_t>(last - end));
  double scale = 0;
  if (unit.empty()) {
    scale = static_cast<double>(bare_unit.count());
  } else if (unit == "s") {
    scale = 1e9;
  } else if (unit == "ns") {
    scale = 1;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "m" || unit == "min") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else {
    throw bad("unknown unit");
  }
  const double ns = value * scale;
  if (ns >= static_cast<double>(std::numeric_limits<std::int64_t>::max() / 2)) throw bad("too long");
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

std::chrono::milliseconds parse_duration_ms(std::string_view text, std::chrono::nanoseconds bare_unit) {
  const std::chrono::nanoseconds d = parse_duration(text, bare_unit);
  if (d == std::chrono::nanoseconds::max()) return std::chrono::milliseconds::max();
  return std::chrono::duration_cast<std::chrono::milliseconds>(d);
}

std::string format_duration(std::chrono::nanoseconds d) {
  if (d == std::chrono::nanoseconds::max()) return "forever";
  const double ns = static_cast<double>(d.count());
  if (ns >= 1e9) return fmt::format("{:.3g} s", ns / 1e9);
  if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.3g} us", ns / 1e3);
  return fmt::format("{} ns", d.count());
}

}  // namespace shmbus::tools
