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

}  // namespace

int run(const Options& o, const CLI::App& app) {
  set_json_lines(o.json);
  // Everything the command line decides by itself is checked before a bus
  // is created: a refused run leaves none behind.
  validate_name(o.bus);
  const std::chrono::nanoseconds timeout = parse_duration(o.wait_timeout);
  SizeRange sizes;
  if (o.synthetic) {
    try {
      sizes = parse_size_range(o.size);
    } catch (const std::invalid_argument& e) {
      throw bus_failure(o.bus, e.what(), "usage", exit_usage);
    }
  }
  std::uint64_t max_message = 0;
  if (!o.max_message.empty()) {
    try {
      max_message = parse_bytes(o.max_message, "--max-message");
    } catch (const std::invalid_argument& e) {
      throw bus_failure(o.bus, e.what(), "usage", exit_usage);
    }
  }
  const std::optional<BusOptions> create =
      o.create ? std::optional(create_options(o, sizes, max_message, app)) : std::nullopt;
  if (o.synthetic) {
    // Against the bus --create makes, or else the largest any bus can have.
    const std::string problem = create ? synthetic_size_problem(sizes, create->capacity, create->record_size)
                                       : synthetic_size_problem(sizes, max_capacity, max_record_size);
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
  if (create && !opened.created) refuse_if_different(o, opened.bus.info(), app);
  // An error thrown from here while nothing is published and nobody is
  // attached (the Producer's --wait-for-readers timing out, say) removes a
  // bus this run created.
  const CreatedBusGuard created(opened, create ? create->trust : Trust{});
  const Bus& bus = opened.bus;
  const BusInfo& info = bus.info();

  // An existing bus keeps its own capacity and record size.
  if (max_message > info.max_message) {
    const std::uint64_t c = capacity_for(max_message, info.record_size);
    throw bus_failure(o.bus,
                      fmt::format("takes messages of at most {} bytes (capacity {}, record size {}), not --max-message "
                                  "{}{}",
                                  info.max_message, info.capacity, info.record_size, max_message,
                                  c != 0 ? fmt::format("; a bus that does needs --capacity {} with --record-size {}", c,
                                                       info.record_size)
                                         : ""),
                      "too_large");
  }
  if (o.synthetic && sizes.max > info.max_message) {
    throw bus_failure(o.bus, synthetic_size_problem(sizes, info.capacity, info.record_size), "too_large");
  }

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
  Producer producer = [&] {
    try {
      return Producer(bus, po);
    } catch (const Error& e) {
      if (e.errc() != Errc::timeout || !stop_requested()) throw;
      throw Failure(exit_failure, e.what(), "interrupted");
    }
  }();

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
        {"report", "summary"},
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

}  // namespace shmbus::producer
