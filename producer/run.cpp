#include "producer/run.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "producer/publish.hpp"
#include "tools/common/created_bus.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/program.hpp"
#include "tools/common/sizing.hpp"
#include "tools/common/synthetic.hpp"

namespace shmbus::producer {

using namespace shmbus::tools;
using Clock = std::chrono::steady_clock;

namespace {

// "bus 'NAME': what", exit 1 (or `exit_code`).
Failure bus_failure(const std::string& bus, const std::string& what, std::string code,
                    int exit_code = exit_failure) {
  return Failure(exit_code, fmt::format("bus '{}': {}", bus, what), std::move(code));
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

// --create on a bus that exists: the library's rule for open_or_create
// (refused with other options, unless taken as it is: --as-is), asked only
// of the options given on the command line.
void refuse_if_different(const Options& o, const BusInfo& info, const CLI::App& app) {
  std::string diffs;
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  const std::uint64_t asked = o.capacity != 0 ? o.capacity : default_capacity_for(o.record_size);
  if (given("--capacity") && info.capacity != asked) {
    diffs += fmt::format(", capacity {} (asked {})", info.capacity, asked);
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
  if (!diffs.empty() && !o.as_is) {
    throw Failure(exit_failure,
                  fmt::format("bus '{}': exists with{}; --as-is uses it as it is (or remove it first)", info.name,
                              diffs.substr(1)),
                  "options_differ");
  }
}

// The options of the bus --create makes. Synthetic messages without
// --record-size get records sized to --size (to MIN of a mix), the fewest
// cache lines that fit (record_size_for); longer messages span records. A
// size no record holds gets the default record size, and spans.
BusOptions create_options(const Options& o, const SizeRange& sizes, std::uint64_t max_message,
                          const CLI::App& app) {
  BusOptions bo;
  bo.capacity = o.capacity;
  bo.record_size = o.record_size;
  if (o.synthetic && app.get_option("--record-size")->count() == 0) {
    const std::uint32_t fit = sizes.min <= max_record_size ? record_size_for(static_cast<std::uint32_t>(sizes.min)) : 0;
    bo.record_size = fit != 0 ? fit : BusOptions{}.record_size;
  }
  // The default ring, sized in bytes, for the record size chosen above.
  if (bo.capacity == 0) {
    bo.capacity = default_capacity_for(bo.record_size);
    // --max-message: the smallest ring, at or above the default, that takes it.
    if (max_message != 0) {
      const std::uint64_t c = capacity_for(max_message, bo.record_size, bo.capacity);
      if (c == 0) {
        throw bus_failure(o.bus, fmt::format("no ring of {}-byte records takes --max-message {} (the limit is 1 GiB)",
                                             bo.record_size, max_message),
                          "usage", exit_usage);
      }
      bo.capacity = c;
    }
  } else if (max_message > max_message_for(bo.capacity, bo.record_size)) {
    const std::uint64_t c = capacity_for(max_message, bo.record_size);
    throw bus_failure(o.bus,
                      fmt::format("--capacity {} with --record-size {} takes messages of at most {} bytes, not "
                                  "--max-message {}{}",
                                  bo.capacity, bo.record_size, max_message_for(bo.capacity, bo.record_size),
                                  max_message, c != 0 ? fmt::format(": use --capacity {} (or leave it out)", c) : ""),
                      "usage", exit_usage);
  }
  bo.policy = o.policy;
  bo.max_readers = o.max_readers;
  bo.mode = static_cast<mode_t>(std::stoul(o.mode, nullptr, 8));
  bo.trust = resolve_trust(o.trust);
  bo.existing = Existing::as_is;  // the options given are compared by refuse_if_different()
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

// What the command line decides by itself: checked before a bus is created,
// so that a refused run leaves none behind.
struct Plan {
  std::chrono::nanoseconds timeout{};  // --wait-timeout
  SizeRange sizes;                     // --size, with --count
  std::uint64_t max_message = 0;       // --max-message; 0: not asked
  std::optional<BusOptions> create;    // the bus --create makes
};

Plan plan_run(const Options& o, const CLI::App& app) {
  validate_name(o.bus);
  Plan p;
  p.timeout = parse_duration(o.wait_timeout);
  if (o.synthetic) {
    try {
      p.sizes = parse_size_range(o.size);
    } catch (const std::invalid_argument& e) {
      throw bus_failure(o.bus, e.what(), "usage", exit_usage);
    }
  }
  if (!o.max_message.empty()) {
    try {
      p.max_message = parse_bytes(o.max_message, "--max-message");
    } catch (const std::invalid_argument& e) {
      throw bus_failure(o.bus, e.what(), "usage", exit_usage);
    }
  }
  if (o.create) p.create = create_options(o, p.sizes, p.max_message, app);
  if (o.synthetic) {
    // Against the bus --create makes, or else the largest any bus can have.
    const std::string problem = p.create ? synthetic_size_problem(p.sizes, p.create->capacity, p.create->record_size)
                                         : synthetic_size_problem(p.sizes, max_capacity, max_record_size);
    if (!problem.empty()) throw bus_failure(o.bus, problem, "usage", exit_usage);
  }
  return p;
}

// The input: --file, or stdin (also for synthetic messages, which read none).
int open_input(const Options& o) {
  int fd = STDIN_FILENO;
  if (!o.synthetic && !o.file.empty()) {
    fd = ::open(o.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw bus_failure(o.bus, fmt::format("cannot open '{}': {}", o.file, std::strerror(errno)), "io_error");
    }
  }
  return fd;
}

// The bus takes --max-message and the largest synthetic message: an
// existing bus keeps its own capacity and record size.
void check_bus_takes(const Options& o, const BusInfo& info, const Plan& p) {
  if (p.max_message > info.max_message) {
    const std::uint64_t c = capacity_for(p.max_message, info.record_size);
    throw bus_failure(o.bus,
                      fmt::format("takes messages of at most {} bytes (capacity {}, record size {}), not --max-message "
                                  "{}{}",
                                  info.max_message, info.capacity, info.record_size, p.max_message,
                                  c != 0 ? fmt::format("; a bus that does needs --capacity {} with --record-size {}", c,
                                                       info.record_size)
                                         : ""),
                      "too_large");
  }
  if (o.synthetic && p.sizes.max > info.max_message) {
    throw bus_failure(o.bus, synthetic_size_problem(p.sizes, info.capacity, info.record_size), "too_large");
  }
}

// The producer of `bus`, once --wait-for-readers are attached.
Producer attach(const Bus& bus, const Options& o, std::chrono::nanoseconds timeout) {
  ProducerOptions po;
  po.wait = wait_options(o.wait);
  po.timestamps = o.timestamps;
  po.wait_for_readers = o.wait_for_readers;
  po.wait_for_readers_timeout = timeout;
  po.max_hold = parse_duration(o.max_hold);
  // SIGINT/SIGTERM end every wait (for readers, for space) within
  // milliseconds: one while waiting for readers is an error (nothing was
  // published, and a bus this run created is removed); after that the
  // message in hand is the last, and the summary follows.
  po.wait.interrupt = &stop_interrupt();
  install_stop_handlers();
  try {
    return Producer(bus, po);
  } catch (const Error& e) {
    if (e.errc() != Errc::timeout || !stop_requested()) throw;
    throw Failure(exit_failure, e.what(), "interrupted");
  }
}

// What publishing did, for the summary.
struct Outcome {
  Totals totals;
  std::optional<PublishFailure> failure;
  double seconds = 0;
  bool mark_end = false;  // end-of-stream was marked
  WaitCounters before;    // the bus's counters of waits for space, around the run
  WaitCounters after;

  double msgs_per_sec() const { return seconds > 0 ? static_cast<double>(totals.messages) / seconds : 0; }
  double mb_per_sec() const { return seconds > 0 ? static_cast<double>(totals.bytes) / seconds / 1e6 : 0; }
  std::uint64_t waits() const { return after.waits - before.waits; }
  double wait_seconds() const { return static_cast<double>(after.wait_ns - before.wait_ns) / 1e9; }
};

// Publishes the input (closed at the end) or the synthetic messages, then
// marks end-of-stream or leaves the bus open.
Outcome publish(Producer& producer, const Options& o, int fd, std::chrono::nanoseconds timeout) {
  Outcome r;
  r.before = read_wait_counters(o.bus);
  const auto t0 = Clock::now();
  try {
    if (o.synthetic) {
      publish_synthetic(producer, o, timeout, r.totals);
    } else {
      publish_input(producer, o, fd, timeout, r.totals);
    }
  } catch (const PublishFailure& f) {
    r.failure = f;
  }
  const auto t1 = Clock::now();
  if (fd != STDIN_FILENO) ::close(fd);
  // A failed run leaves the bus open: its consumers are not told the stream
  // ended, and a rerun (a new producer) continues the sequence.
  r.mark_end = !o.keep_open && !r.failure;
  if (r.mark_end) {
    producer.close();
  } else {
    producer.detach();  // consumers keep waiting for the next producer
  }
  r.after = read_wait_counters(o.bus);
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  return r;
}

// The summary as one JSON object, with the error and its code.
void print_json_summary(const Options& o, const Outcome& r) {
  const Totals& totals = r.totals;
  const char* stopped = r.failure ? "error" : stop_requested() ? "signal" : "input_end";
  nlohmann::json j = {
      {"program", kProgram},
      {"report", "summary"},
      {"bus", o.bus},
      {"messages", totals.messages},
      {"bytes", totals.bytes},
      {"seconds", r.seconds},
      {"msgs_per_sec", r.msgs_per_sec()},
      {"mb_per_sec", r.mb_per_sec()},
      {"first_seq", totals.first_seq ? nlohmann::json(*totals.first_seq) : nlohmann::json()},
      {"last_seq", totals.first_seq ? nlohmann::json(totals.last_seq) : nlohmann::json()},
      {"waits_for_space", r.after.known ? nlohmann::json(r.waits()) : nlohmann::json()},
      {"wait_for_space_seconds", r.after.known ? nlohmann::json(r.wait_seconds()) : nlohmann::json()},
      {"end_of_stream", r.mark_end},
      {"stopped_by", stopped},
      {"oversize_skipped", totals.skipped},
      {"oversize_truncated", totals.truncated},
  };
  if (r.failure) {
    j["error"] = fmt::format("bus '{}': {}", o.bus, r.failure->message);
    j["code"] = r.failure->code;
  }
  fmt::print(stderr, "{}\n", j.dump());
}

// The summary as one line (the error, if any, is the line before).
void print_text_summary(const Options& o, const Outcome& r) {
  const Totals& totals = r.totals;
  std::string waited = r.after.known ? fmt::format("waited for space {:.3f} s ({})", r.wait_seconds(),
                                                   plural(r.waits(), "time"))
                                     : std::string("wait time unknown");
  std::string oversized;
  const char* unit = o.binary ? "frame" : "line";
  if (totals.skipped > 0) {
    oversized += fmt::format("; {} oversized {}{} skipped", totals.skipped, unit, totals.skipped == 1 ? "" : "s");
  }
  if (totals.truncated > 0) {
    oversized +=
        fmt::format("; {} oversized {}{} truncated", totals.truncated, unit, totals.truncated == 1 ? "" : "s");
  }
  fmt::print(stderr,
             "{}: bus '{}': {}, {} in {:.3f} s: {:.0f} msgs/s, {:.1f} MB/s; {}{}; {}\n",
             kProgram, o.bus, plural(totals.messages, "message"), plural(totals.bytes, "byte"),
             r.seconds, r.msgs_per_sec(), r.mb_per_sec(), waited, oversized,
             r.mark_end ? "end-of-stream marked"
             : r.failure ? "left open after the error (a new producer continues the bus)"
                         : "left open (--keep-open)");
}

}  // namespace

int run(const Options& o, const CLI::App& app) {
  set_json_lines(o.json);
  const Plan plan = plan_run(o, app);
  const int fd = open_input(o);

  const OpenedBus opened =
      plan.create ? open_or_create_bus(o.bus, *plan.create) : OpenedBus{open_existing(o), false};
  if (plan.create && !opened.created) refuse_if_different(o, opened.bus.info(), app);
  // An error thrown from here while nothing is published and nobody is
  // attached (the Producer's --wait-for-readers timing out, say) removes a
  // bus this run created.
  const CreatedBusGuard created(opened, plan.create ? plan.create->trust : Trust{});
  check_bus_takes(o, opened.bus.info(), plan);
  Producer producer = attach(opened.bus, o, plan.timeout);

  const Outcome outcome = publish(producer, o, fd, plan.timeout);
  // With --json the summary carries the error and its code.
  if (outcome.failure && !o.json) {
    print_error(kProgram, fmt::format("bus '{}': {}", o.bus, outcome.failure->message));
  }
  if (o.json) {
    print_json_summary(o, outcome);
  } else {
    print_text_summary(o, outcome);
  }
  return outcome.failure ? exit_failure : exit_ok;
}

}  // namespace shmbus::producer
