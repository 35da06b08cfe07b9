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
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tools/common/duration.hpp"
#include "tools/common/latency_histogram.hpp"
#include "tools/common/message_format.hpp"
#include "tools/common/program.hpp"
#include "consumer/source.hpp"
#include "tools/common/synthetic.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::consumer;
using Clock = std::chrono::steady_clock;

constexpr const char* kProgram = "shmbus-consumer";
constexpr std::chrono::milliseconds kStopCheck{100};  // longest wait before noticing a signal
constexpr int kMaxProblemLines = 10;

struct Options {
  std::string bus;
  std::string from;  // empty: resume with --name, else earliest
  std::string name = "shmbus-consumer";
  bool named = false;  // --name was given: a durable reader
  bool follow = false;
  std::uint64_t count = 0;  // 0: no limit
  std::string idle_timeout = "forever";
  std::string format = "text";
  bool verify = false;
  bool stats = false;
  bool json = false;
  std::optional<std::string> wait_for_bus;
  std::string wait = "adaptive";
  TrustArgs trust;
  std::string tls_ca;      // tcp:// only
  std::string token_file;  // tcp:// only
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

enum class Format { text, hex, json, binary, none };

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
        append_escaped_text(out.buf, m.payload);
        out.buf.push_back('\n');
        break;
      case Format::hex:
        fmt::format_to(std::back_inserter(out.buf), "{} ", m.seq);
        append_hex(out.buf, m.payload);
        out.buf.push_back('\n');
        break;
      case Format::json:
        append_message_json(out.buf, m.seq, m.timestamp_ns, m.payload);
        out.buf.push_back('\n');
        break;
      case Format::binary: {
        // The frames shmbus-producer --binary reads: u32 little-endian length, bytes.
        const auto n = static_cast<std::uint32_t>(m.payload.size());
        const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                             static_cast<char>(n >> 24)};
        out.buf.append(len, len + 4);
        out.buf.append(reinterpret_cast<const char*>(m.payload.data()),
                       reinterpret_cast<const char*>(m.payload.data()) + m.payload.size());
        break;
      }
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
        verify.problem(o.bus,
                       "message seq {} ({} bytes) is corrupt: checksum {:016x}, its seq, send time and length "
                       "give {:016x}",
                       m.seq, m.payload.size(), f.checksum, synthetic_checksum(m.payload));
        break;
      case SyntheticCheck::bad_filler:
        verify.problem(o.bus, "message seq {} ({} bytes) is corrupt: byte {} differs from the filler of seq {}",
                       m.seq, m.payload.size(), f.bad_offset, f.seq);
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
      verify.problem(o.bus, "the library skipped {} before seq {}",
                     plural(r.corrupt, "corrupt record"), verify.expected.value_or(0));
    }
    if (verify.gaps > verify.reported_lost) {
      verify.problem(o.bus, "{} missing before seq {} that the library did not report as lost",
                     plural(verify.gaps - verify.reported_lost, "message"), last_seq);
      verify.reported_lost = verify.gaps;  // report each unexplained gap once
    }
  }
};

// A failure whose message already names the bus: printed as "shmbus-consumer: line".
// `code` is the "code" of the JSON error (docs/programs.md).
struct Reported {
  std::string line;
  std::string code = "error";
};

Bus open_bus(const Options& o) {
  const OpenOptions open_options{.trust = resolve_trust(o.trust)};
  if (!o.wait_for_bus) return Bus::open(o.bus, open_options);
  const std::chrono::nanoseconds limit = parse_duration(*o.wait_for_bus);
  const auto start = Clock::now();
  for (;;) {
    // A bus appears under its name only once complete (its creator renames
    // it into place): whatever is there is judged at once.
    if (Bus::exists(o.bus)) {
      try {
        return Bus::open(o.bus, open_options);
      } catch (const Error& e) {
        if (e.errc() != Errc::not_found) throw;  // else removed again: wait on
      }
    }
    if (stop_requested()) {
      throw Reported{fmt::format("bus '{}': stopped while waiting for it to exist", o.bus),
                     "interrupted"};
    }
    if (limit != std::chrono::nanoseconds::max() && Clock::now() - start >= limit) {
      throw Reported{
          fmt::format("bus '{}': does not exist (waited {})", o.bus, format_duration(limit)),
          "not_found"};
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

// Whether a stream ended the way a script can take as success: not by the
// producer's death nor by the bus being removed under it.
bool ended_cleanly(std::string_view stopped_by) {
  return stopped_by != to_string(EndReason::producer_died) &&
         stopped_by != to_string(EndReason::removed) && stopped_by != "evicted";
}

// tcp://HOST:PORT/BUS: a bridge subscription with the same start choices as a bus.
std::unique_ptr<Source> open_tcp(const Options& o) {
  const auto bad = [&](const char* flag) {
    return Reported{fmt::format("{}: {} applies to a local bus only, not to tcp://", o.bus, flag), "usage"};
  };
  if (o.named) throw bad("--name");
  if (o.follow) throw bad("--follow");
  if (o.wait_for_bus) throw bad("--wait-for-bus");
  if (!o.trust.owners.empty() || !o.trust.groups.empty()) throw bad("--trust-owner/--trust-group");
  if (o.from == "resume") throw bad("--from resume");
  TcpAddress a;
  try {
    a = parse_tcp_url(o.bus);
  } catch (const std::exception& e) {
    throw Reported{e.what(), "usage"};
  }
  bridge::ClientOptions co;
  co.host = a.host;
  co.port = a.port;
  co.bus = a.bus;
  co.tls_ca = o.tls_ca;
  if (!o.token_file.empty()) co.token = bridge::read_token_file(o.token_file);
  if (o.from.empty() || o.from == "earliest") {
    co.start = bridge::StartKind::earliest;
  } else if (o.from == "latest") {
    co.start = bridge::StartKind::latest;
  } else {
    co.start = bridge::StartKind::sequence;
    std::from_chars(o.from.data(), o.from.data() + o.from.size(), co.start_seq);
  }
  // Each poll waits at most kStopCheck, so signals are noticed without an interrupt hook.
  return std::make_unique<TcpSource>(co);
}

int run(const Options& o) {
  const bool tcp = is_tcp_url(o.bus);
  if (!tcp) validate_name(o.bus);
  if (!tcp && (!o.tls_ca.empty() || !o.token_file.empty())) {
    throw Reported{fmt::format("bus '{}': --tls-ca and --token-file apply to tcp://HOST:PORT/BUS only", o.bus),
                   "usage"};
  }
  const std::chrono::nanoseconds idle = parse_duration(o.idle_timeout);

  ConsumerOptions co;
  co.name = o.name;
  co.durable = o.named;
  co.wait = wait_options(o.wait);
  const std::string from = !o.from.empty() ? o.from : o.named ? "resume" : "earliest";
  if (from == "earliest") {
    co.start = Start::earliest;
  } else if (from == "latest") {
    co.start = Start::latest;
  } else if (from == "resume") {
    if (!o.named) {
      throw Reported{fmt::format("bus '{}': --from resume needs --name (the reader to resume)", o.bus),
                     "usage"};
    }
    co.start = Start::resume;
  } else {
    co.start = Start::sequence;
    std::from_chars(from.data(), from.data() + from.size(), co.start_seq);
  }

  std::unique_ptr<Source> source;
  BusSource* local = nullptr;  // the local bus's source, when reading one
  if (tcp) {
    source = open_tcp(o);
  } else {
  Bus bus = open_bus(o);
  Consumer consumer = [&] {
    try {
      return Consumer(bus, co);
    } catch (const Error& e) {
      // The library says "not retained" either way; a start past the head
      // has not been published yet.
      const std::uint64_t head = bus.head();
      if (e.errc() == Errc::not_retained && co.start == Start::sequence && co.start_seq > head) {
        const std::string now =
            head == 0 ? std::string("nothing is published yet")
                      : fmt::format("the newest message is seq {}", head - 1);
        throw Reported{fmt::format("bus '{}': --from {} is in the future: {} (the next one "
                                   "published will be seq {})",
                                   o.bus, co.start_seq, now, head),
                       "not_retained"};
      }
      throw;
    }
  }();
  auto bs = std::make_unique<BusSource>(std::move(consumer));
  local = bs.get();
  source = std::move(bs);
  }
  const auto resume_gap = [&] { return local ? local->consumer().resume_gap() : 0; };
  if (local && co.start == Start::resume && resume_gap() > 0) {
    const Consumer& consumer = local->consumer();
    print_error(kProgram, fmt::format("bus '{}': reader '{}': {} message{} after where it stopped {} no "
                                      "longer retained; resuming at seq {} (counted as lost)",
                                      o.bus, o.name, consumer.resume_gap(),
                                      consumer.resume_gap() == 1 ? "" : "s",
                                      consumer.resume_gap() == 1 ? "is" : "are", consumer.cursor()));
  }

  Run run(o);
  run.format = o.format == "hex"      ? Format::hex
               : o.format == "json"   ? Format::json
               : o.format == "binary" ? Format::binary
               : o.format == "none"   ? Format::none
                                      : Format::text;
  // Losses can come before the first message: count gaps from where the cursor started.
  if (o.verify) run.verify.expected = source->cursor();
  // A resumed reader whose bookmark is no longer retained starts with a loss.
  run.lost = resume_gap();
  run.verify.gaps = run.verify.reported_lost = resume_gap();

  const std::uint64_t start_seq = source->cursor();
  const auto started = Clock::now();
  auto last_activity = started;
  const char* stopped_by = "closed";
  std::uint64_t streams_ended = 0;  // --follow: ends seen and followed past
  bool announced = false;           // --follow: this end was reported
  std::uint64_t evictions = 0;      // times the reader slot was taken from us
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
    const PollResult r = source->poll([&](const Message& m) { run.on_message(m); }, max, timeout);
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
    if (r.evicted) {
      // Our reader slot was taken from us: what the producer overwrote
      // meanwhile is gone, and may have been what we were reading.
      ++evictions;
      print_error(kProgram,
                  fmt::format("bus '{}': this reader's slot was taken from it (a stray write into the segment, or "
                              "freed by force): {} lost{}; {}",
                              o.bus, r.lost,
                              r.stale_view ? ", and a message already handed out was overwritten while read" : "",
                              o.follow ? fmt::format("reading on at seq {}", source->cursor()) : "stopping"));
      if (r.stale_view && o.verify) run.verify.problem(o.bus, "a message was overwritten while it was read");
      if (!o.follow) {
        stopped_by = "evicted";
        break;
      }
    }
    if (r.count > 0) announced = false;
    if (r.end_of_stream) {
      stopped_by = to_string(r.end_reason);
      if (!o.follow || r.end_reason == EndReason::removed) break;
      if (announced) continue;  // still waiting for the next producer
      // Like tail -F: say so once per end, then wait for the next producer.
      announced = true;
      ++streams_ended;
      print_error(kProgram, fmt::format("bus '{}': {} after seq {}; following (waiting for a new producer)",
                                        o.bus, r.end_reason == EndReason::closed ? "producer closed the bus"
                                                                                 : "producer died",
                                        source->cursor() == 0 ? std::string("(none)")
                                                            : std::to_string(source->cursor() - 1)));
      last_activity = Clock::now();  // --idle-timeout counts from here
    }
  }
  run.out.flush();
  const std::uint64_t library_lost = source->lost();

  bool verify_ok = true;
  if (o.verify) {
    if (run.lost > run.verify.gaps) {
      run.verify.problem(o.bus, "the library reported {} lost but the sequence skipped only {}",
                         run.lost, run.verify.gaps);
    }
    if (o.count > 0 && run.messages < o.count && std::string_view(stopped_by) != "signal") {
      run.verify.problem(o.bus, "stream ended ({}) after {} of {}", stopped_by, run.messages,
                         plural(o.count, "message"));
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
        {"start_seq", start_seq},
    };
    if (o.named && local) {
      j["reader"] = {{"name", o.name},
                     {"resumed", local->consumer().resumed()},
                     {"resume_gap", resume_gap()}};
    }
    if (o.follow) j["streams_followed"] = streams_ended;
    if (evictions > 0) j["evictions"] = evictions;
    if (!verify_ok) {
      j["error"] = fmt::format("bus '{}': verify failed", o.bus);
      j["code"] = "verify_failed";
    } else if (!ended_cleanly(stopped_by)) {
      j["error"] = fmt::format("bus '{}': the stream ended without a close ({})", o.bus, stopped_by);
      j["code"] = stopped_by;
    } else if (run.corrupt > 0) {
      j["error"] = fmt::format("bus '{}': {} skipped", o.bus, plural(run.corrupt, "corrupt record"));
      j["code"] = "corrupt";
    }
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
    std::string line = fmt::format("{}: bus '{}': {}, {} lost in {:.3f} s: {:.0f} msgs/s, {:.1f} MB/s; stopped by {}",
                                   kProgram, o.bus, plural(run.messages, "message"), run.lost,
                                   seconds, rate, mbps, stopped_by);
    if (run.first_seq) line += fmt::format("; seq {}..{}", *run.first_seq, run.last_seq);
    if (o.named && local && co.start == Start::resume) {
      line += local->consumer().resumed() ? fmt::format("; reader '{}' resumed at seq {}", o.name, start_seq)
                                 : fmt::format("; reader '{}' is new, started at seq {}", o.name, start_seq);
    }
    if (o.follow && streams_ended > 0)
      line += fmt::format("; followed across {} end{} of stream", streams_ended, streams_ended == 1 ? "" : "s");
    if (run.corrupt > 0) line += fmt::format("; {} skipped", plural(run.corrupt, "corrupt record"));
    if (o.verify) {
      if (!verify_ok) {
        line += fmt::format("; verify FAILED ({})", plural(run.verify.problems, "problem"));
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
  // A stream that ended without a close (the producer died, the bus was
  // removed) is a failure for scripts, like a pipeline whose writer crashed;
  // so is a skipped corrupt record, even without --verify.
  return verify_ok && ended_cleanly(stopped_by) && run.corrupt == 0 ? exit_ok : exit_failure;
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
      "(\"SEQ HEX\"), json (one object per line), binary (length-prefixed frames) or none. "
      "--verify checks the synthetic messages "
      "of shmbus-producer --count; --stats measures their one-way latency. --name makes a durable "
      "reader that resumes where it stopped. Stops at "
      "end-of-stream (closed: exit 0; producer died or bus removed: exit 1), or when its reader slot is "
      "taken from it (exit 1), unless --follow, at "
      "--count, --idle-timeout, SIGINT or SIGTERM. The summary goes to stderr.",
      kProgram};
  Options o;
  app.add_option("bus", o.bus,
                 "Bus name, or tcp://HOST:PORT/BUS to read BUS from a shmbus-bridge (numeric address; "
                 "IPv6 as [::1])")
      ->required();
  app.add_option("--from", o.from,
                 "Where to start: earliest (oldest retained), latest (only new), a sequence number, "
                 "or resume (where the reader --name stopped; earliest for a new name). Default: "
                 "resume with --name, else earliest")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s == "earliest" || s == "latest" || s == "resume") return {};
            std::uint64_t v = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || p != s.data() + s.size()) {
              return "must be earliest, latest, resume or a sequence number";
            }
            return {};
          },
          "earliest|latest|resume|SEQ"));
  auto* name = app.add_option("--name", o.name,
                              "Make this a durable reader with this name (up to 31 bytes): its "
                              "position is remembered in the bus when it stops, and the next "
                              "consumer with the name resumes there (--from resume is then the "
                              "default); one live reader per name. Without it the reader is "
                              "anonymous and shown as shmbus-consumer")
      ->check(reader_name_validator());
  app.add_flag("--follow", o.follow,
               "Keep reading across producer close, crash and takeover (like tail -F), and after "
               "the reader slot was taken from it (the loss is reported), until SIGINT, --count or "
               "--idle-timeout");
  app.add_option("--count", o.count, "Stop after N messages");
  app.add_option("--idle-timeout", o.idle_timeout, "Stop after this long with nothing new (e.g. 500ms, 2s)")
      ->check(duration_validator());
  app.add_option("--format", o.format,
                 "Output: text (one line per message, control bytes and backslash escaped), hex "
                 "(\"SEQ HEX\"), json (one object per line, see docs/programs.md), binary (u32 "
                 "little-endian length + bytes: what shmbus-producer --binary reads) or none")
      ->check(CLI::IsMember({"text", "hex", "json", "binary", "none"}))
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
      ->check(wait_strategy_check())
      ->capture_default_str();
  add_trust_options(app, o.trust);
  app.add_option("--tls-ca", o.tls_ca,
                 "tcp:// only: speak TLS and trust only servers whose certificate chains to this PEM CA "
                 "and names the address connected to");
  app.add_option("--token-file", o.token_file, "tcp:// only: present the token in this file's first line");
  add_version_flag(app, kProgram);
  refuse_negative_numbers(app);

  const ErrorSink sink{kProgram, wants_json(argc, argv)};
  try {
    std::vector<std::string> args = normalise_args(argc, argv);
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, sink);
  }

  o.named = name->count() > 0;
  install_stop_handlers();
  signal(SIGPIPE, SIG_IGN);  // a closed stdout is seen as EPIPE and stops the consumer
  try {
    return run(o);
  } catch (const SourceError& r) {
    sink.report(r.line, r.code);
    return exit_failure;
  } catch (const Reported& r) {
    sink.report(r.line, r.code);
    return r.code == "usage" ? exit_usage : exit_failure;
  } catch (const Error& e) {
    std::string what = e.what();
    if (e.errc() == Errc::permission_denied) {
      what += " (a consumer needs read and write access: it takes a reader slot and moves its "
              "cursor in the segment; shmbus-inspect needs only read access)";
    }
    sink.report(what, errc_name(e.errc()));
    return exit_code_for(e.errc());
  } catch (const std::invalid_argument& e) {  // an unknown --trust-owner, say
    sink.report(fmt::format("bus '{}': {}", o.bus, e.what()), "usage");
    return exit_usage;
  } catch (const std::exception& e) {
    sink.report(fmt::format("bus '{}': {}", o.bus, e.what()), "error");
  }
  return exit_failure;
}
