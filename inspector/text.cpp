#include "inspector/text.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <ctime>

namespace shmbus::inspect_tool {

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
  return fmt::format("{:%Y-%m-%d %H:%M:%S}.{:09} UTC", fmt::gmtime(secs), realtime_ns % 1'000'000'000u);
}

std::string utc_hms(std::uint64_t realtime_ns) {
  return fmt::format("{:%H:%M:%S}", fmt::gmtime(static_cast<std::time_t>(realtime_ns / 1'000'000'000u)));
}

}  // namespace shmbus::inspect_tool
