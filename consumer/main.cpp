// shmbus-consumer: reads a bus from a chosen start and prints its messages
// (text, hex, JSON lines, or nothing) on stdout; verifies synthetic messages
// (tools/common/synthetic.hpp) and measures their one-way latency. Summary on
// stderr.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <shmbus/shmbus.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "duration.hpp"
#include "latency_histogram.hpp"
#include "program.hpp"
#include "synthetic.hpp"
#include "trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using Clock = std::chrono::steady_clock;

constexpr const char* kProgram = "shmbus-consumer";
constexpr std::chrono::milliseconds kStopCheck{100};  // longest wait before noticing a signal
constexpr int kMaxProblemLines = 10;

struct Options {
  std::string bus;
  std::string from = "earliest";
  std::string name = "shmbus-consumer";
  std::uint64_t count = 0;  // 0: no limit
  std::string idle_timeout = "forever";
  std::string format = "text";
  bool verify = false;
  bool stats = false;
  bool json = false;
  std::optional<std::string> wait_for_bus;
  std::string wait = "adaptive";
  TrustArgs trust;
};

// stdout, buffered per batch. A closed pipe (EPIPE) stops the consumer quietly.
class Output {
 public:
  fmt::memory_buffer buf;
  bool closed = false;

  void flush() {
    const char* p = buf.data();
    std::size_t left = buf.size();
    while (left > 0 && !closed) {
      const ssize_t n = ::write(STDOUT_FILENO, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        closed = true;  // EPIPE or another error: nobody reads any more
        break;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    buf.clear();
  }
};

constexpr char kHex[] = "0123456789abcdef";

void append_hex(fmt::memory_buffer& b, std::span<const std::byte> p) {
  for (std::byte x : p) {
    const auto v = static_cast<unsigned>(x);
    b.push_back(kHex[v >> 4]);
    b.push_back(kHex[v & 15]);
  }
}

bool valid_utf8(std::span<const std::byte> p) {
  const std::size_t n = p.size();
  std::size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(p[i]);
    std::size_t extra = 0;
    if (c < 0x80) {
      extra = 0;
    } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
      extra = 1;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
    } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
      extra = 3;
    } else {
      return false;
    }
    if (extra > n - i - 1) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(p[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

void append_json_string(fmt::memory_buffer& b, std::span<const std::byte> p) {
  b.push_back('"');
  for (std::byte x : p) {
    const auto c = static_cast<unsigned char>(x);
    switch (c) {
      case '"': b.append(std::string_view("\\\"")); break;
      case '\\': b.append(std::string_view("\\\\")); break;
      case '\n': b.append(std::string_view("\\n")); break;
      case '\r': b.append(std::string_view("\\r")); break;
      case '\t': b.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(b), "\\u{:04x}", c);
        } else {
          b.push_back(static_cast<char>(c));
        }
    }
  }
  b.push_back('"');
}

enum class Format { text, hex, json, none };

struct Verifier {
  std::optional<std::uint64_t> expected;  // next bus sequence
  std::uint64_t gaps = 0;                 // messages skipped by sequence
  std::uint64_t reported_lost = 0;        // what the library reported as lost
  std::uint64_t problems = 0;

  template <class... Args>
  void problem(const std::string& bus, fmt::format_string<Args...> f, Args&&... args) {
    if (++problems <= kMaxProblemLines) {
      print_error(kProgram, fmt::format("bus '{}': verify: {}", bus,
                                        fmt::format(f, std::forward<Args>(args)...)));
    } else if (problems == kMaxProblemLines + 1) {
      print_error(kProgram, fmt::format("bus '{}': verify: more problems, not shown", bus));
    }
  }
};

struct Run {
  const Options& o;
  Format format = Format::text;
  Output out;
  Verifier verify;
  LatencyHistogram latency;
  std::uint64_t negative_latency = 0;
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint64_t lost = 0;
  std::uint64_t corrupt = 0;
  std::optional<std::uint64_t> first_seq;
  std::uint64_t last_seq = 0;
  Clock::time_point first_time{};
  Clock::time_point last_time{};

  explicit Run(const Options& opts) : o(opts) {}

  void on_message(const Message& m) {
    if (!first_seq) {
      first_seq = m.seq;
      first_time = Clock::now();
    }
    last_seq = m.seq;
    ++messages;
    bytes += m.payload.size();

    switch (format) {
      case Format::text:
        out.buf.append(reinterpret_cast<const char*>(m.payload.data()),
                       reinterpret_cast<const char*>(m.payload.data()) + m.payload.size());
        out.buf.push_back('\n');
        break;
      case Format::hex:
        fmt::format_to(std::back_inserter(out.buf), "{} ", m.seq);
        append_hex(out.buf, m.payload);
        out.buf.push_back('\n');
        break;
      case Format::json:
        fmt::format_to(std::back_inserter(out.buf), "{{\"seq\":{},\"timestamp_ns\":{},\"length\":{},",
                       m.seq, m.timestamp_ns, m.payload.size());
        if (valid_utf8(m.payload)) {
          out.buf.append(std::string_view("\"text\":"));
          append_json_string(out.buf, m.payload);
        } else {
          out.buf.append(std::string_view("\"hex\":\""));
          append_hex(out.buf, m.payload);
          out.buf.push_back('"');
        }
        out.buf.append(std::string_view("}\n"));
        break;
      case Format::none:
        break;
    }

    if (!o.verify && !o.stats) return;
    SyntheticFields f;
    const SyntheticCheck check = synthetic_check(m.payload, f);
    if (o.stats && check != SyntheticCheck::too_short && f.send_ns != 0) {  // 0: not stamped
      const std::uint64_t now = realtime_ns();
      if (now >= f.send_ns) {
        latency.record(now - f.send_ns);
      } else {
        latency.record(0);
        ++negative_latency;
      }
    }
    if (!o.verify) return;
    if (verify.expected) {
      const std::uint64_t want = *verify.expected;
      if (m.seq < want) {
        verify.problem(o.bus, "duplicate or out of order: seq {} after seq {}", m.seq, want - 1);
      } else if (m.seq > want) {
        verify.gaps += m.seq - want;  // judged against reported losses after the batch
      }
    }
    verify.expected = m.seq + 1;
    switch (check) {
      case SyntheticCheck::ok:
        if (f.seq != m.seq) {
          verify.problem(o.bus, "message seq {} carries the payload of seq {}", m.seq, f.seq);
        }
        break;
      case SyntheticCheck::too_short:
        verify.problem(o.bus,
                       "message seq {} is {} bytes, shorter than a synthetic message's {}-byte "
                       "fixed part (not from shmbus-producer --count?)",
                       m.seq, m.payload.size(), synthetic_header_size);
        break;
      case SyntheticCheck::bad_checksum:
        verify.problem(o.bus, "message seq {} ({} bytes) is corrupt: checksum {:016x}, contents give {:016x}",
                       m.seq, m.payload.size(), f.checksum, synthetic_checksum(m.payload));
        break;
    }
  }

  // After each poll: every sequence gap must be covered by losses the
  // library reported (overwrite policy); anything else is a failure.
  void after_poll(const PollResult& r) {
    lost += r.lost;
    corrupt += r.corrupt;
    if (!o.verify) return;
    verify.reported_lost += r.lost;
    if (r.corrupt > 0) {
      verify.problem(o.bus, "the library skipped {} corrupt record(s) before seq {}", r.corrupt,
                     verify.expected.value_or(0));
    }
    if (verify.gaps > verify.reported_lost) {
      verify.problem(o.bus, "{} message(s) missing before seq {} that the library did not report as lost",
                     verify.gaps - verify.reported_lost, last_seq);
      verify.reported_lost = verify.gaps;  // report each unexplained gap once
    }
  }
};

// A failure whose message already names the bus: printed as "shmbus-consumer: line".
struct Reported {
  std::string line;
};

Bus open_bus(const Options& o) {
  const OpenOptions open_options{.trust = resolve_trust(o.trust)};
  if (!o.wait_for_bus) return Bus::open(o.bus, open_options);
  const std::chrono::nanoseconds limit = parse_duration(*o.wait_for_bus);
  // A segment that exists but does not validate yet may be one its creator is
  // still initialising: keep trying for this long after it appeared.
  constexpr auto kSettle = std::chrono::seconds(2);
  const auto start = Clock::now();
  std::optional<Clock::time_point> appeared;
  for (;;) {
    if (Bus::exists(o.bus)) {
      if (!appeared) appeared = Clock::now();
      try {
        return Bus::open(o.bus, open_options);
      } catch (const Error& e) {
        const Errc c = e.errc();
        const bool settling = c == Errc::not_ready || c == Errc::not_a_bus || c == Errc::truncated;
        if (c != Errc::not_found && !(settling && Clock::now() - *appeared < kSettle)) throw;
        if (c == Errc::not_found) appeared.reset();  // removed again
      }
    }
    if (stop_requested()) {
      throw Reported{fmt::format("bus '{}': stopped while waiting for it to exist", o.bus)};
    }
    if (limit != std::chrono::nanoseconds::max() && Clock::now() - start >= limit) {
      throw Reported{
          fmt::format("bus '{}': does not exist (waited {})", o.bus, format_duration(limit))};
    }
    // Setup path only: a short sleep between looks is fine here.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::string latency_text(const LatencyHistogram& h) {
  auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e3; };
  return fmt::format("latency us: p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f} ({} samples)",
                     us(h.percentile(0.50)), us(h.percentile(0.90)), us(h.percentile(0.99)),
                     us(h.percentile(0.999)), us(h.max()), h.count());
}

int run(const Options& o) {
  validate_name(o.bus);
  const std::chrono::nanoseconds idle = parse_duration(o.idle_timeout);

  ConsumerOptions co;
  co.name = o.name;
  co.wait = wait_options(o.wait);
  if (o.from == "earliest") {
    co.start = Start::earliest;
  } else if (o.from == "latest") {
    co.start = Start::latest;
  } else {
    co.start = Start::sequence;
    std::from_chars(o.from.data(), o.from.data() + o.from.size(), co.start_seq);
  }

  Bus bus = open_bus(o);
  Consumer consumer(bus, co);

  Run run(o);
  run.format = o.format == "hex" ? Format::hex : o.format == "json" ? Format::json
               : o.format == "none" ? Format::none : Format::text;
  // Losses can come before the first message: count gaps from where the cursor started.
  if (o.verify) run.verify.expected = consumer.cursor();

  const auto started = Clock::now();
  auto last_activity = started;
  const char* stopped_by = "end_of_stream";
  for (;;) {
    if (stop_requested()) {
      stopped_by = "signal";
      break;
    }
    if (o.count > 0 && run.messages >= o.count) {
      stopped_by = "count";
      break;
    }
    auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(kStopCheck);
    if (idle != std::chrono::nanoseconds::max()) {
      const auto left = idle - (Clock::now() - last_activity);
      if (left <= std::chrono::nanoseconds::zero()) {
        stopped_by = "idle_timeout";
        break;
      }
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
    const std::size_t max =
        o.count > 0 ? static_cast<std::size_t>(std::min<std::uint64_t>(256, o.count - run.messages))
                    : 256;
    const PollResult r = consumer.poll([&](const Message& m) { run.on_message(m); }, max, timeout);
    run.after_poll(r);
    if (r.count > 0 || r.lost > 0) {
      last_activity = Clock::now();
      run.last_time = last_activity;
    }
    if (run.out.buf.size() > 0) run.out.flush();
    if (run.out.closed) {
      stopped_by = "output_closed";
      break;
    }
    if (r.end_of_stream) break;
  }
  run.out.flush();
  const std::uint64_t library_lost = consumer.lost();

  bool verify_ok = true;
  if (o.verify) {
    if (run.lost > run.verify.gaps) {
      run.verify.problem(o.bus, "the library reported {} lost but the sequence skipped only {}",
                         run.lost, run.verify.gaps);
    }
    if (o.count > 0 && run.messages < o.count && std::string_view(stopped_by) != "signal") {
      run.verify.problem(o.bus, "stream ended ({}) after {} of {} messages",
                         stopped_by, run.messages, o.count);
    }
    if (run.messages == 0 && std::string_view(stopped_by) != "signal") {
      run.verify.problem(o.bus, "no messages to verify");
    }
    verify_ok = run.verify.problems == 0;
  }

  const double seconds =
      run.first_seq ? std::chrono::duration<double>(run.last_time - run.first_time).count() : 0;
  const double rate = seconds > 0 ? static_cast<double>(run.messages) / seconds : 0;
  const double mbps = seconds > 0 ? static_cast<double>(run.bytes) / seconds / 1e6 : 0;

  if (o.json) {
    nlohmann::json j = {
        {"program", kProgram},
        {"bus", o.bus},
        {"messages", run.messages},
        {"bytes", run.bytes},
        {"lost", run.lost},
        {"corrupt", run.corrupt},
        {"seconds", seconds},
        {"msgs_per_sec", rate},
        {"mb_per_sec", mbps},
        {"first_seq", run.first_seq ? nlohmann::json(*run.first_seq) : nlohmann::json()},
        {"last_seq", run.first_seq ? nlohmann::json(run.last_seq) : nlohmann::json()},
        {"stopped_by", stopped_by},
        {"library_lost", library_lost},
    };
    if (o.verify) {
      j["verify"] = {{"ok", verify_ok},
                     {"problems", run.verify.problems},
                     {"gaps_reported_lost", std::min(run.verify.gaps, run.verify.reported_lost)}};
    }
    if (o.stats) {
      const LatencyHistogram& h = run.latency;
      j["latency_ns"] = {{"samples", h.count()},          {"min", h.min()},
                         {"p50", h.percentile(0.50)},     {"p90", h.percentile(0.90)},
                         {"p99", h.percentile(0.99)},     {"p99_9", h.percentile(0.999)},
                         {"max", h.max()},                {"negative", run.negative_latency}};
    }
    fmt::print(stderr, "{}\n", j.dump());
  } else {
    std::string line = fmt::format("{}: bus '{}': {} messages, {} lost in {:.3f} s: {:.0f} msgs/s, {:.1f} MB/s; stopped by {}",
                                   kProgram, o.bus, run.messages, run.lost, seconds, rate, mbps,
                                   stopped_by);
    if (run.first_seq) line += fmt::format("; seq {}..{}", *run.first_seq, run.last_seq);
    if (run.corrupt > 0) line += fmt::format("; {} corrupt records skipped", run.corrupt);
    if (o.verify) {
      if (!verify_ok) {
        line += fmt::format("; verify FAILED ({} problems)", run.verify.problems);
      } else if (run.verify.gaps == 0) {
        line += "; verified OK (no gaps, no duplicates, checksums match)";
      } else {
        line += fmt::format("; verified OK (the {} missing were all reported lost)", run.verify.gaps);
      }
    }
    fmt::print(stderr, "{}\n", line);
    if (o.stats) {
      fmt::print(stderr, "{}: bus '{}': {}{}\n", kProgram, o.bus, latency_text(run.latency),
                 run.negative_latency ? fmt::format("; {} negative (clock stepped?) counted as 0",
                                                    run.negative_latency)
                                      : std::string());
    }
  }
  return verify_ok ? exit_ok : exit_failure;
}

// --wait-for-bus takes an optional DURATION. CLI11 would swallow the bus name
// after it ("--wait-for-bus demo"), so an argument that is not a duration is
// left alone and the option gets "forever".
std::vector<std::string> normalise_args(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--wait-for-bus") continue;
    bool has_value = false;
    if (i + 1 < args.size()) {
      try {
        (void)parse_duration(args[i + 1]);
        has_value = true;
      } catch (const std::invalid_argument&) {
      }
    }
    if (!has_value) args[i] = "--wait-for-bus=forever";
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them in reverse order
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Reads a shmbus bus and writes its messages to stdout: text (one per line), hex "
      "(\"SEQ HEX\"), json (one object per line) or none. --verify checks the synthetic messages "
      "of shmbus-producer --count; --stats measures their one-way latency. Stops at "
      "end-of-stream, --count, --idle-timeout, SIGINT or SIGTERM. The summary goes to stderr.",
      kProgram};
  Options o;
  app.add_option("bus", o.bus, "Bus name")->required();
  app.add_option("--from", o.from, "Where to start: earliest (oldest retained), latest (only new), or a sequence number")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s == "earliest" || s == "latest") return {};
            std::uint64_t v = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || p != s.data() + s.size()) {
              return "must be earliest, latest or a sequence number";
            }
            return {};
          },
          "earliest|latest|SEQ"))
      ->capture_default_str();
  app.add_option("--name", o.name, "Reader name shown by shmbus-inspect (up to 31 bytes)")
      ->capture_default_str();
  app.add_option("--count", o.count, "Stop after N messages");
  app.add_option("--idle-timeout", o.idle_timeout, "Stop after this long with nothing new (e.g. 500ms, 2s)")
      ->check(duration_validator());
  app.add_option("--format", o.format, "Output: text, hex, json or none")
      ->check(CLI::IsMember({"text", "hex", "json", "none"}))
      ->capture_default_str();
  app.add_flag("--verify", o.verify,
               "Check synthetic messages: sequence, payload sequence, checksum; exit 1 on any gap "
               "not reported as lost, duplicate or corruption");
  app.add_flag("--stats", o.stats, "Measure one-way latency from the synthetic messages' timestamps");
  app.add_flag("--json", o.json, "Write the summary to stderr as one JSON object");
  app.add_option("--wait-for-bus", o.wait_for_bus,
                 "Wait up to DURATION (default: forever) for the bus to exist instead of failing")
      ->type_name("[DURATION]")
      ->check(duration_validator());
  app.add_option("--wait", o.wait, "How to wait for data: adaptive, spin-yield or busy-spin")
      ->check(CLI::IsMember({"adaptive", "spin-yield", "busy-spin"}))
      ->capture_default_str();
  add_trust_options(app, o.trust);

  try {
    std::vector<std::string> args = normalise_args(argc, argv);
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, kProgram);
  }

  install_stop_handlers();
  signal(SIGPIPE, SIG_IGN);  // a closed stdout is seen as EPIPE and stops the consumer
  try {
    return run(o);
  } catch (const Reported& r) {
    print_error(kProgram, r.line);
  } catch (const Error& e) {
    print_error(kProgram, e.what());
  } catch (const std::exception& e) {
    print_error(kProgram, fmt::format("bus '{}': {}", o.bus, e.what()));
  }
  return exit_failure;
}
