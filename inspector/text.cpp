#include "inspector/text.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <ctime>

namespace shmbus::inspect_tool {

std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr == first || !std::isfinite(value) || value < 0) return std::nullopt;
  const std::string_view unit(ptr, static_cast<std::size_t>(last - ptr));
  double ns_per_unit = 0;
  if (unit.empty() || unit == "s") {
    ns_per_unit = 1e9;
  } else if (unit == "ms") {
    ns_per_unit = 1e6;
  } else if (unit == "us") {
    ns_per_unit = 1e3;
  } else if (unit == "ns") {
    ns_per_unit = 1;
  } else if (unit == "m" || unit == "min") {
    ns_per_unit = 60e9;
  } else {
    return std::nullopt;
  }
  const double ns = value * ns_per_unit;
  if (ns > 1e18) return std::nullopt;  // ~31 years: surely a typo
  return std::chrono::nanoseconds(static_cast<std::int64_t>(ns));
}

std::uint64_t realtime_now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::optional<double> age_seconds(std::uint64_t then_ns, std::uint64_t now_ns) noexcept {
  if (then_ns == 0) return std::nullopt;
  // A clock step can put `then` in the future; show that as "just now".
  if (then_ns >= now_ns) return 0.0;
  return static_cast<double>(now_ns - then_ns) / 1e9;
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(units)) {
    v /= 1024.0;
    ++u;
  }
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string human_duration(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 1e-3) return fmt::format("{:.0f}us", seconds * 1e6);
  if (seconds < 1.0) return fmt::format("{:.0f}ms", seconds * 1e3);
  if (seconds < 60.0) return fmt::format("{:.1f}s", seconds);
  const auto s = static_cast<std::uint64_t>(seconds);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string human_age(std::optional<double> seconds) {
  if (!seconds) return "never";
  return human_duration(*seconds) + " ago";
}

std::string human_rate(std::optional<double> per_sec) {
  if (!per_sec) return "-";
  const double r = *per_sec;
  if (r >= 1e9) return fmt::format("{:.2f}G/s", r / 1e9);
  if (r >= 1e6) return fmt::format("{:.2f}M/s", r / 1e6);
  if (r >= 1e4) return fmt::format("{:.1f}k/s", r / 1e3);
  if (r >= 100) return fmt::format("{:.0f}/s", r);
  return fmt::format("{:.1f}/s", r);
}

std::string utc_time(std::uint64_t realtime_ns) {
  const auto secs = static_cast<std::time_t>(realtime_ns / 1'000'000'000u);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:09} UTC", buf, realtime_ns % 1'000'000'000u);
}

namespace {
void escape_byte(std::string& out, unsigned char c) {
  switch (c) {
    case '\n': out += "\\n"; return;
    case '\t': out += "\\t"; return;
    case '\r': out += "\\r"; return;
    case '\\': out += "\\\\"; return;
    case '"': out += "\\\""; return;
    default: break;
  }
  if (c >= 0x20 && c < 0x7f) {
    out += static_cast<char>(c);
  } else {
    out += fmt::format("\\x{:02x}", c);
  }
}
}  // namespace

std::string escape(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::byte b : bytes) escape_byte(out, static_cast<unsigned char>(b));
  return out;
}

std::string escape(std::string_view text) {
  return escape(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

bool is_text(std::span<const std::byte> bytes) noexcept {
  std::size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f) return false;
      ++i;
      continue;
    }
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if ((c & 0xe0) == 0xc0) {
      extra = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      extra = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= bytes.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto cc = static_cast<unsigned char>(bytes[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t min_for[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_for[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

std::string hex(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 3);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i) out += ' ';
    out += fmt::format("{:02x}", static_cast<unsigned>(bytes[i]));
  }
  return out;
}

}  // namespace shmbus::inspect_tool
