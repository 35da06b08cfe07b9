// shmbus-producer: publishes lines from stdin or a file, length-prefixed
// binary frames, or synthetic messages (see tools/common/synthetic.hpp) to a
// bus, then marks end-of-stream. Summary on stderr; stdout is unused.
#include <fcntl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <shmbus/shmbus.hpp>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "producer/input_reader.hpp"
#include "tools/common/choice.hpp"
#include "tools/common/created_bus.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/synthetic.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::producer;
using Clock = std::chrono::steady_clock;

constexpr const char* kProgram = "shmbus-producer";

const Choices<Policy> policy_names = {{"block", Policy::block}, {"overwrite", Policy::overwrite}};
const Choices<Oversize> oversize_names = {
    {"error", Oversize::error}, {"skip", Oversize::skip}, {"truncate", Oversize::truncate}};
const Choices<Timestamps> timestamp_names = {
    {"off", Timestamps::off}, {"coarse", Timestamps::coarse}, {"precise", Timestamps::precise}};

// A publish that failed mid-run: the summary reports it ("bus 'NAME': what")
// with its JSON "code" (docs/programs.md), and the bus is left open.
struct PublishFailure {
  std::string message;
  std::string code = "error";
};

// "bus 'NAME': what", exit 1 (or `exit_code`).
Failure bus_failure(const std::string& bus, const std::string& what, std::string code,
                    int exit_code = exit_failure) {
  return Failure(exit_code, fmt::format("bus '{}': {}", bus, what), std::move(code));
}

struct Options {
  std::string bus;
  bool create = false;
  std::uint64_t capacity = BusOptions{}.capacity;
  std::uint32_t record_size = BusOptions{}.record_size;
  Policy policy = Policy::block;
  std::string mode = "0600";
  std::uint32_t max_readers = BusOptions{}.max_readers;
  std::string file;
  bool binary = false;
  Oversize oversize = Oversize::error;
  std::uint64_t count = 0;
  bool synthetic = false;  // --count was given (even 0)
  std::uint32_t size = 64;
  double rate = 0;
  bool keep_open = false;
  std::string wait_timeout = "forever";
  std::uint32_t wait_for_readers = 0;
  WaitStrategy wait = WaitStrategy::adaptive;
  Timestamps timestamps = Timestamps::off;
  std::uint64_t stamp_every = 0;  // 0: 1 with --rate, 64 without
  bool json = false;
  TrustArgs trust;
};

struct Totals {
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint64_t skipped = 0;    // oversized input messages left out (--oversize skip)
  std::uint64_t truncated = 0;  // oversized input messages cut (--oversize truncate)
  std::optional<std::uint64_t> first_seq;
  std::uint64_t last_seq = 0;
};

// Waits until `deadline` on CLOCK_MONOTONIC: sleeps while far ahead, spins
// with sched_yield for the last stretch. Pacing for --rate only; never called
// when the schedule is already due.
void wait_until(const timespec& deadline) {
  for (;;) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const std::int64_t left = (deadline.tv_sec - now.tv_sec) * 1'000'000'000LL +
                              (deadline.tv_nsec - now.tv_nsec);
    if (left <= 0 || stop_requested()) return;
    if (left > 50'000) {
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    } else {
      sched_yield();
    }
  }
}

timespec add_ns(const timespec& t, std::uint64_t ns) {
  timespec r = t;
  r.tv_sec += static_cast<time_t>(ns / 1'000'000'000u);
  r.tv_nsec += static_cast<long>(ns % 1'000'000'000u);
  if (r.tv_nsec >= 1'000'000'000L) {
    r.tv_nsec -= 1'000'000'000L;
    ++r.tv_sec;
  }
  return r;
}

// The live readers furthest behind: on a full `block` ring, the ones holding
// the producer back. "reader 0 'archiver' (pid 123) is 64 messages behind".
std::string readers_holding_back(const Producer& producer, const Trust& trust) {
  try {
    const Snapshot s = Inspector::open(producer.bus().name(), trust).snapshot();
    std::optional<std::uint64_t> lowest;
    for (const ReaderView& r : s.readers) {
      if (r.liveness != Liveness::alive) continue;
      if (!lowest || r.cursor < *lowest) lowest = r.cursor;
    }
    if (!lowest) return {};
    std::string who;
    std::size_t n = 0;
    for (const ReaderView& r : s.readers) {
      if (r.liveness != Liveness::alive || r.cursor != *lowest) continue;
      std::string name;
      for (char c : r.name) name.push_back(c >= 0x20 && c < 0x7f ? c : '?');
      who += fmt::format("{}reader {} '{}' (pid {})", n++ ? ", " : "", r.slot, name, r.pid);
    }
    const std::uint64_t behind = s.head > *lowest ? s.head - *lowest : 0;
    return fmt::format("{} {} {} behind and not reading", who, n == 1 ? "is" : "are",
                       plural(behind, "message"));
  } catch (const std::exception&) {
    return {};
  }
}

PublishFailure publish_failure(PublishStatus st, std::chrono::nanoseconds timeout,
                        const Producer& producer, const Options& o, const Totals& t) {
  switch (st) {
    case PublishStatus::timeout: {
      std::string who = readers_holding_back(producer, resolve_trust(o.trust));
      if (who.empty()) {
        std::uint32_t readers = 0;
        try {
          readers = producer.live_readers();
        } catch (...) {
        }
        who = fmt::format("{} not reading", plural(readers, "live consumer"));
      }
      return {fmt::format("the ring stayed full for {} (--wait-timeout): {}; gave up after {}",
                          format_duration(timeout), who, plural(t.messages, "message")),
              "timeout"};
    }
    case PublishStatus::too_large:
      return {fmt::format("message {} is longer than the record's max payload of {} bytes",
                          t.messages, producer.bus().info().max_payload),
              "too_large"};
    case PublishStatus::closed:
      return {"the producer role was closed", "closed"};
    case PublishStatus::invalid:  // skip_to only, which this program does not use
      return {"sequence already used", "invalid"};
    case PublishStatus::ok:
      break;
  }
  return {"publish failed"};
}

std::string too_long_message(const Options& o, const InputReader& reader, std::uint64_t length,
                             const BusInfo& info) {
  return fmt::format("{} {} of {} is {}{} bytes, longer than the record's max payload of {} bytes "
                     "(record size {}); nothing from it on was published (--oversize skip or "
                     "truncate goes on past such {}s)",
                     o.binary ? "frame" : "line", reader.index(), o.file.empty() ? "stdin" : o.file,
                     reader.length_known() ? "" : "at least ", length, info.max_payload,
                     info.record_size, o.binary ? "frame" : "line");
}

void publish_input(Producer& producer, const Options& o, int fd, std::chrono::nanoseconds timeout,
                   Totals& t) {
  const BusInfo& info = producer.bus().info();
  InputReader reader(fd, o.binary, info.max_payload, o.oversize);
  struct Count {  // skipped/truncated into the totals however we leave
    Totals& t;
    const InputReader& r;
    ~Count() {
      t.skipped = r.skipped();
      t.truncated = r.truncated();
    }
  } count{t, reader};
  std::span<const std::byte> msg;
  std::uint64_t length = 0;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const double interval_ns = o.rate > 0 ? 1e9 / o.rate : 0;
  for (;;) {
    const InputReader::Status s = reader.next(msg, length);
    switch (s) {
      case InputReader::Status::message:
        break;
      case InputReader::Status::end:
      case InputReader::Status::interrupted:
        return;
      case InputReader::Status::too_long:
        throw PublishFailure{too_long_message(o, reader, length, info), "too_large"};
      case InputReader::Status::truncated:
        throw PublishFailure{fmt::format("input ends inside frame {} (a u32 length, then the bytes)",
                                  t.messages + 1),
                      "truncated_input"};
      case InputReader::Status::io_error:
        throw PublishFailure{fmt::format("reading {}: {}", o.file.empty() ? "stdin" : o.file,
                                  std::strerror(reader.error())),
                      "io_error"};
    }
    if (interval_ns > 0) {
      // The same absolute schedule as synthetic messages: message i at start + i / rate.
      wait_until(add_ns(start, static_cast<std::uint64_t>(static_cast<double>(t.messages) * interval_ns)));
      if (stop_requested()) return;
    }
    const PublishResult r = producer.publish(msg, timeout);
    if (!r) throw publish_failure(r.status, timeout, producer, o, t);
    if (!t.first_seq) t.first_seq = r.seq;
    t.last_seq = r.seq;
    ++t.messages;
    t.bytes += msg.size();
    if (stop_requested()) return;
  }
}

void publish_synthetic(Producer& producer, const Options& o, std::chrono::nanoseconds timeout,
                       Totals& t) {
  const std::size_t size = o.size;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const double interval_ns = o.rate > 0 ? 1e9 / o.rate : 0;
  // A clock read per message would cost more than publishing it at full speed.
  const std::uint64_t stamp_every = o.stamp_every ? o.stamp_every : interval_ns > 0 ? 1 : 64;
  std::uint64_t until_stamp = 0;  // a countdown, not i % stamp_every: no division per message
  for (std::uint64_t i = 0; i < o.count; ++i) {
    if (interval_ns > 0) {
      // Absolute schedule: message i is due at start + i / rate, so a late
      // message does not push back the ones after it.
      const timespec due = add_ns(start, static_cast<std::uint64_t>(static_cast<double>(i) * interval_ns));
      wait_until(due);
    }
    if (stop_requested()) return;
    const Claim c = producer.claim(size, timeout);
    if (!c) throw publish_failure(c.status, timeout, producer, o, t);
    const std::span<std::byte> out = c.data.first(size);
    synthetic_fill(out, c.seq);
    const bool stamp = until_stamp == 0;
    until_stamp = stamp ? stamp_every - 1 : until_stamp - 1;
    synthetic_stamp(out, c.seq, stamp ? realtime_ns() : 0);
    producer.commit(size);
    if (!t.first_seq) t.first_seq = c.seq;
    t.last_seq = c.seq;
    ++t.messages;
    t.bytes += size;
  }
}

struct WaitCounters {
  std::uint64_t waits = 0;
  std::uint64_t wait_ns = 0;
  bool known = false;
};

WaitCounters read_wait_counters(const std::string& bus) {
  WaitCounters w;
  try {
    const Snapshot s = Inspector::open(bus).snapshot();
    w.waits = s.counters.producer_waits;
    w.wait_ns = s.counters.producer_wait_ns;
    w.known = true;
  } catch (const std::exception&) {
  }
  return w;
}

void warn_if_different(const Options& o, const BusInfo& info, const CLI::App& app) {
  std::string diffs;
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  if (given("--capacity") && info.capacity != o.capacity) {
    diffs += fmt::format(", capacity {} (asked {})", info.capacity, o.capacity);
  }
  if (given("--record-size") && info.record_size != o.record_size) {
    diffs += fmt::format(", record size {} (asked {})", info.record_size, o.record_size);
  }
  if (given("--policy") && o.policy != info.policy) {
    diffs += fmt::format(", policy {} (asked {})", to_string(info.policy), to_string(o.policy));
  }
  if (given("--max-readers") && info.max_readers != o.max_readers) {
    diffs += fmt::format(", max readers {} (asked {})", info.max_readers, o.max_readers);
  }
  if (!diffs.empty()) {
    print_error(kProgram, fmt::format("warning: bus '{}': exists already with{}; using it as it is",
                                      info.name, diffs.substr(1)));
  }
}

// The options of the bus --create makes. Synthetic messages without
// --record-size get records sized to --size, the fewest cache lines that
// fit (record_size_for), or max_record_size when none does (which
// synthetic_size_problem then refuses).
BusOptions create_options(const Options& o, const CLI::App& app) {
  BusOptions bo;
  bo.capacity = o.capacity;
  bo.record_size = o.record_size;
  if (o.synthetic && app.get_option("--record-size")->count() == 0) {
    const std::uint32_t fit = record_size_for(o.size);
    bo.record_size = fit != 0 ? fit : max_record_size;
  }
  bo.policy = o.policy;
  bo.max_readers = o.max_readers;
  bo.mode = static_cast<mode_t>(std::stoul(o.mode, nullptr, 8));
  bo.trust = resolve_trust(o.trust);
  return bo;
}

// The bus without --create.
Bus open_existing(const Options& o) {
  try {
    return Bus::open(o.bus, OpenOptions{.trust = resolve_trust(o.trust)});
  } catch (const Error& e) {
    if (e.errc() != Errc::not_found) throw;
    throw Failure(exit_code_for(e.errc()), std::string(e.what()) + " (use --create to create it)",
                  errc_name(e.errc()));
  }
}

int run(const Options& o, const CLI::App& app) {
  // Everything the command line decides by itself is checked before a bus
  // is created: a refused run leaves none behind.
  validate_name(o.bus);
  const std::chrono::nanoseconds timeout = parse_duration(o.wait_timeout);
  const std::optional<BusOptions> create =
      o.create ? std::optional(create_options(o, app)) : std::nullopt;
  if (o.synthetic) {
    const std::string problem =
        synthetic_size_problem(o.size, create ? create->record_size : max_record_size);
    if (!problem.empty()) throw bus_failure(o.bus, problem, "usage", exit_usage);
  }
  int fd = STDIN_FILENO;
  if (!o.synthetic && !o.file.empty()) {
    fd = ::open(o.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw bus_failure(o.bus, fmt::format("cannot open '{}': {}", o.file, std::strerror(errno)), "io_error");
    }
  }

  const OpenedBus opened =
      create ? open_or_create_bus(o.bus, *create) : OpenedBus{open_existing(o), false};
  if (create && !opened.created) warn_if_different(o, opened.bus.info(), app);
  // An error thrown from here while nothing is published and nobody is
  // attached (the Producer's --wait-for-readers timing out, say) removes a
  // bus this run created.
  const CreatedBusGuard created(opened, create ? create->trust : Trust{});
  const Bus& bus = opened.bus;
  const BusInfo& info = bus.info();

  // An existing bus keeps its own record size.
  if (o.synthetic && o.size > info.max_payload) {
    throw bus_failure(o.bus, synthetic_size_problem(o.size, info.record_size), "too_large");
  }

  ProducerOptions po;
  po.wait = wait_options(o.wait);
  po.timestamps = o.timestamps;
  po.wait_for_readers = o.wait_for_readers;
  po.wait_for_readers_timeout = timeout;
  Producer producer(bus, po);
  // Only now: SIGINT/SIGTERM while waiting for readers end the process at
  // once (nothing is published yet); from here they stop it cleanly.
  install_stop_handlers();

  const WaitCounters before = read_wait_counters(o.bus);
  const auto t0 = Clock::now();
  Totals totals;
  std::optional<PublishFailure> failure;
  try {
    if (o.synthetic) {
      publish_synthetic(producer, o, timeout, totals);
    } else {
      publish_input(producer, o, fd, timeout, totals);
    }
  } catch (const PublishFailure& f) {
    failure = f;
  }
  const auto t1 = Clock::now();
  if (fd != STDIN_FILENO) ::close(fd);
  // A failed run leaves the bus open: its consumers are not told the stream
  // ended, and a rerun (a new producer) continues the sequence.
  const bool mark_end = !o.keep_open && !failure;
  if (mark_end) {
    producer.close();
  } else {
    producer.detach();  // consumers keep waiting for the next producer
  }
  const WaitCounters after = read_wait_counters(o.bus);

  // With --json the summary below carries the error and its code.
  if (failure && !o.json) print_error(kProgram, fmt::format("bus '{}': {}", o.bus, failure->message));

  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  const double rate = seconds > 0 ? static_cast<double>(totals.messages) / seconds : 0;
  const double mbps = seconds > 0 ? static_cast<double>(totals.bytes) / seconds / 1e6 : 0;
  const std::uint64_t waits = after.waits - before.waits;
  const double wait_s = static_cast<double>(after.wait_ns - before.wait_ns) / 1e9;
  const char* stopped = failure ? "error" : stop_requested() ? "signal" : "input_end";
  if (o.json) {
    nlohmann::json j = {
        {"program", kProgram},
        {"bus", o.bus},
        {"messages", totals.messages},
        {"bytes", totals.bytes},
        {"seconds", seconds},
        {"msgs_per_sec", rate},
        {"mb_per_sec", mbps},
        {"first_seq", totals.first_seq ? nlohmann::json(*totals.first_seq) : nlohmann::json()},
        {"last_seq", totals.first_seq ? nlohmann::json(totals.last_seq) : nlohmann::json()},
        {"waits_for_space", after.known ? nlohmann::json(waits) : nlohmann::json()},
        {"wait_for_space_seconds", after.known ? nlohmann::json(wait_s) : nlohmann::json()},
        {"end_of_stream", mark_end},
        {"stopped_by", stopped},
        {"oversize_skipped", totals.skipped},
        {"oversize_truncated", totals.truncated},
    };
    if (failure) {
      j["error"] = fmt::format("bus '{}': {}", o.bus, failure->message);
      j["code"] = failure->code;
    }
    fmt::print(stderr, "{}\n", j.dump());
  } else {
    std::string waited = after.known ? fmt::format("waited for space {:.3f} s ({})", wait_s,
                                                   plural(waits, "time"))
                                     : std::string("wait time unknown");
    std::string oversized;
    const char* unit = o.binary ? "frame" : "line";
    if (totals.skipped > 0) oversized += fmt::format("; {} oversized {}{} skipped", totals.skipped, unit, totals.skipped == 1 ? "" : "s");
    if (totals.truncated > 0) oversized += fmt::format("; {} oversized {}{} truncated", totals.truncated, unit, totals.truncated == 1 ? "" : "s");
    fmt::print(stderr,
               "{}: bus '{}': {}, {} in {:.3f} s: {:.0f} msgs/s, {:.1f} MB/s; {}{}; {}\n",
               kProgram, o.bus, plural(totals.messages, "message"), plural(totals.bytes, "byte"),
               seconds, rate, mbps, waited, oversized,
               mark_end ? "end-of-stream marked"
               : failure ? "left open after the error (a new producer continues the bus)"
                         : "left open (--keep-open)");
  }
  return failure ? exit_failure : exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Publishes messages to a shmbus bus: lines from stdin (the default) or --file, "
      "length-prefixed frames (--binary), or synthetic messages (--count/--size/--rate) that "
      "shmbus-consumer --verify --stats can check. Marks end-of-stream when the input ends. "
      "The summary goes to stderr.",
      kProgram};
  Options o;
  app.add_option("bus", o.bus, "Bus name ([A-Za-z0-9._-], the segment is /dev/shm/shmbus.NAME)")
      ->required();
  auto* create = app.add_flag("--create", o.create,
                              "Create the bus if it does not exist (an existing bus is used as it "
                              "is, with a warning if its options differ from those given)");
  app.add_option("--capacity", o.capacity, "Records in the ring, a power of two (with --create)")
      ->needs(create)
      ->capture_default_str();
  app.add_option("--record-size", o.record_size,
                 "Bytes per record incl. its 24-byte header, a multiple of 8 (with --create; "
                 "with --count, the default is the fewest 64-byte lines that fit --size)")
      ->needs(create)
      ->capture_default_str();
  add_choice(app, "--policy", o.policy, policy_names, "When the ring is full: block or overwrite (with --create)")
      ->needs(create);
  app.add_option("--mode", o.mode, "Permission bits of the segment, octal (with --create)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos) {
              return "must be octal permission bits like 0600 or 660";
            }
            return {};
          },
          "OCTAL"))
      ->needs(create)
      ->capture_default_str();
  app.add_option("--max-readers", o.max_readers, "Reader slots (with --create)")
      ->needs(create)
      ->capture_default_str();
  auto* file = app.add_option("--file", o.file, "Read messages from this file instead of stdin");
  auto* binary = app.add_flag("--binary", o.binary,
                              "Input is frames of a u32 little-endian length and that many bytes, "
                              "not lines");
  auto* count = app.add_option("--count", o.count,
                               "Publish N synthetic messages (sequence, timestamp, checksum, "
                               "filler) instead of reading input");
  app.add_option("--size", o.size, "Bytes per synthetic message (>= 24)")
      ->needs(count)
      ->capture_default_str();
  app.add_option("--rate", o.rate,
                 "Messages per second, synthetic or from the input (replays a log at a fixed "
                 "rate; default: as fast as possible); at least 0.001, one message every 1000 s")
      ->check(message_rate());
  add_choice(app, "--oversize", o.oversize, oversize_names,
                 "An input line or frame longer than the record's payload: error (stop there, "
                 "exit 1, leave the bus open), skip it, or truncate it; counted in the summary");
  count->excludes(file)->excludes(binary);
  app.add_flag("--keep-open", o.keep_open,
               "Do not mark end-of-stream at the end (another producer may continue the bus)");
  app.add_option("--wait-timeout", o.wait_timeout,
                 "Give up with an error when the ring stays full this long, or when "
                 "--wait-for-readers are not attached in time: 250us, 500ms, 2s, 1.5m, 1h or forever "
                 "(a bare number is seconds)")
      ->check(duration_validator())
      ->capture_default_str();
  app.add_option("--wait-for-readers", o.wait_for_readers,
                 "Wait until N consumers are attached before the first message");
  add_choice(app, "--wait", o.wait, wait_strategies(), "How to wait for space: adaptive, spin-yield or busy-spin",
             wait_strategy_choice());
  app.add_option("--stamp-every", o.stamp_every,
                 "Synthetic messages: carry the send time (for shmbus-consumer --stats) in every "
                 "Nth message, 0 in the others. Default: every message with --rate, every 64th at "
                 "full speed, where a clock read per message would cost more than publishing it")
      ->check(positive_number());
  add_choice(app, "--timestamps", o.timestamps, timestamp_names,
                 "What each record's publish time holds: off (0), coarse (the kernel's last tick, "
                 "1-4 ms) or precise (ns; costs 10-60 ns per message depending on the CPU). "
                 "Synthetic messages carry their own send time either way");
  app.add_flag("--json", o.json, "Write the summary to stderr as one JSON object");
  add_trust_options(app, o.trust);
  add_version_flag(app, kProgram);
  refuse_negative_numbers(app);

  const ErrorSink sink{kProgram, wants_json(argc, argv)};
  return run_main(
      app, sink,
      [&] {
        app.parse(argc, argv);
        o.synthetic = count->count() > 0;
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // --rate pacing wakes within ~1 us of its target
        return run(o, app);
      },
      [&] { return fmt::format("bus '{}'", o.bus); });
}
