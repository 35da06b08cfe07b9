#include "inspector/reset.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "inspector/commands.hpp"
#include "inspector/report.hpp"
#include "inspector/text.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/program.hpp"

namespace shmbus::inspect_tool {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad_target(std::string_view text) {
  throw std::invalid_argument(fmt::format(
      "--to: '{}' is not earliest, latest, a sequence number, or a time (UTC: 2026-11-22T03:53:43Z, "
      "2026-11-22 03:53:43.767 UTC, or now-5m)",
      text));
}

// Reads `n` digits at `pos` into `v`.
bool digits(std::string_view s, std::size_t& pos, std::size_t n, int& v) {
  if (pos + n > s.size()) return false;
  v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  pos += n;
  return true;
}

bool expect(std::string_view s, std::size_t& pos, char c) {
  if (pos >= s.size() || s[pos] != c) return false;
  ++pos;
  return true;
}

// "YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z| UTC]", UTC: CLOCK_REALTIME ns.
std::optional<std::uint64_t> parse_utc(std::string_view s) {
  std::size_t pos = 0;
  std::tm tm{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digits(s, pos, 4, year) || !expect(s, pos, '-') || !digits(s, pos, 2, month) || !expect(s, pos, '-') ||
      !digits(s, pos, 2, day))
    return std::nullopt;
  if (pos >= s.size() || (s[pos] != 'T' && s[pos] != ' ')) return std::nullopt;
  ++pos;
  if (!digits(s, pos, 2, hour) || !expect(s, pos, ':') || !digits(s, pos, 2, minute) || !expect(s, pos, ':') ||
      !digits(s, pos, 2, second))
    return std::nullopt;
  std::uint64_t frac_ns = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    std::uint64_t scale = 100'000'000;
    std::size_t n = 0;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (n++ >= 9) return std::nullopt;  // finer than a nanosecond
      frac_ns += static_cast<std::uint64_t>(s[pos++] - '0') * scale;
      scale /= 10;
    }
    if (n == 0) return std::nullopt;
  }
  const std::string_view rest = s.substr(pos);
  if (!rest.empty() && rest != "Z" && rest != " UTC") return std::nullopt;
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const std::time_t t = ::timegm(&tm);
  if (t < 0 || tm.tm_mday != day) return std::nullopt;  // before 1970, or 31 February
  return static_cast<std::uint64_t>(t) * 1'000'000'000u + frac_ns;
}

const char* kind_name(ReaderNameTarget::Kind k) {
  switch (k) {
    case ReaderNameTarget::Kind::earliest: return "earliest";
    case ReaderNameTarget::Kind::latest: return "latest";
    case ReaderNameTarget::Kind::sequence: return "sequence";
    case ReaderNameTarget::Kind::time: return "time";
  }
  return "?";
}

}  // namespace

ReaderNameTarget parse_reset_target(std::string_view text, std::uint64_t now_ns) {
  if (text == "earliest") return {ReaderNameTarget::Kind::earliest, 0};
  if (text == "latest") return {ReaderNameTarget::Kind::latest, 0};
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
      text.find_first_not_of("0123456789") == std::string_view::npos) {
    std::uint64_t seq = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), seq);
    if (ec != std::errc() || p != text.data() + text.size())
      throw std::invalid_argument(fmt::format("--to: sequence '{}' is too large", text));
    return {ReaderNameTarget::Kind::sequence, seq};
  }
  if (text.starts_with("now-")) {
    const std::chrono::nanoseconds d = tools::parse_duration(text.substr(4));  // its own one-line error
    const auto back = static_cast<std::uint64_t>(d.count());
    return {ReaderNameTarget::Kind::time, back < now_ns ? now_ns - back : 0};
  }
  if (text == "now") return {ReaderNameTarget::Kind::time, now_ns};
  if (const std::optional<std::uint64_t> t = parse_utc(text)) return {ReaderNameTarget::Kind::time, *t};
  bad_target(text);
}

int run_reset(const std::string& bus, const std::string& reader, const std::string& to, bool json_out) {
  const ReaderNameTarget target = parse_reset_target(to, tools::realtime_ns());
  const std::optional<ReaderNameMove> moved = move_reader_name(bus, reader, target, inspect_trust());
  if (!moved) throw bus_failure(bus, fmt::format("no remembered reader named '{}'", reader), "not_found");
  const ReaderNameMove& m = *moved;
  if (json_out) {
    json j{{"bus", bus},       {"reader", reader},   {"from", m.from},     {"to", m.to},
           {"target", kind_name(target.kind)},       {"oldest", m.oldest}, {"head", m.head}};
    if (target.kind == ReaderNameTarget::Kind::time) {
      j["time_ns"] = target.value;
      j["timestamp_ns"] = m.timestamp_ns ? json(m.timestamp_ns) : json(nullptr);
      j["unstamped"] = m.unstamped;
    }
    std::fputs((dump_json(j, false) + "\n").c_str(), stdout);
    return tools::exit_ok;
  }
  std::string why;
  switch (target.kind) {
    case ReaderNameTarget::Kind::earliest: why = "earliest: the oldest retained message"; break;
    case ReaderNameTarget::Kind::latest: why = "latest: the next message published"; break;
    case ReaderNameTarget::Kind::sequence: why = "as asked"; break;
    case ReaderNameTarget::Kind::time:
      why = m.timestamp_ns
                ? fmt::format("the first message stamped at or after {}: {}", utc_time(target.value),
                              utc_time(m.timestamp_ns))
                : fmt::format("no retained message is stamped at or after {}: the next message published",
                              utc_time(target.value));
      if (m.unstamped)
        why += fmt::format("; {} without a timestamp passed over", tools::plural(m.unstamped, "message"));
      break;
  }
  std::fputs(fmt::format("bus '{}': reader name '{}' moved from seq {} to seq {} ({})\n", bus, display_name(reader), m.from, m.to,
                         why)
                 .c_str(),
             stdout);
  return tools::exit_ok;
}

}  // namespace shmbus::inspect_tool
