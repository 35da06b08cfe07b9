#include "consumer/run.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "consumer/loss_log.hpp"
#include "consumer/output.hpp"
#include "consumer/source.hpp"
#include "consumer/verifier.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/latency_histogram.hpp"
#include "tools/common/open_bus.hpp"
#include "tools/common/program.hpp"
#include "tools/common/synthetic.hpp"

namespace shmbus::consumer {
namespace {

using namespace shmbus::tools;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kStopCheck{100};  // longest wait before noticing a signal

Failure usage(const std::string& message) { return Failure(exit_usage, message, "usage"); }

Bus open_bus(const Options& o) {
  return open_bus_waiting(o.bus, OpenOptions{.trust = resolve_trust(o.trust)},
                          o.wait_for_bus ? std::optional(parse_duration(*o.wait_for_bus)) : std::nullopt);
}

// The library's Consumer on the local bus, as the options ask.
ConsumerOptions consumer_options(const Options& o) {
  ConsumerOptions co;
  co.name = o.name;
  co.durable = o.named;
  co.hold_producer = !o.best_effort;
  co.wait = wait_options(o.wait);
  co.wait.interrupt = &stop_interrupt();  // SIGINT/SIGTERM end a wait for messages at once
  switch (o.from.kind) {
    case From::Kind::unset:
      co.start = o.named ? Start::resume : Start::earliest;
      break;
    case From::Kind::earliest:
      co.start = Start::earliest;
      break;
    case From::Kind::latest:
      co.start = Start::latest;
      break;
    case From::Kind::resume:
      if (!o.named) throw usage(fmt::format("bus '{}': --from resume needs --name (the reader to resume)", o.bus));
      co.start = Start::resume;
      break;
    case From::Kind::sequence:
      co.start = Start::sequence;
      co.start_seq = o.from.seq;
      break;
  }
  return co;
}

std::unique_ptr<BusSource> open_local(const Options& o, const ConsumerOptions& co) {
  try {
    Bus bus = open_bus(o);
    try {
      return std::make_unique<BusSource>(Consumer(bus, co));
    } catch (const Error& e) {
      // The library says "not retained" either way; a start past the head
      // has not been published yet.
      const std::uint64_t head = bus.head();
      if (e.errc() != Errc::not_retained || co.start != Start::sequence || co.start_seq <= head) throw;
      const std::string now = head == 0 ? std::string("nothing is published yet")
                                        : fmt::format("the newest message is seq {}", head - 1);
      throw Failure(exit_failure,
                    fmt::format("bus '{}': --from {} is in the future: {} (the next one published will be seq {})",
                                o.bus, co.start_seq, now, head),
                    "not_retained");
    }
  } catch (const Error& e) {
    if (e.errc() != Errc::permission_denied) throw;
    throw Failure(exit_code_for(e.errc()),
                  std::string(e.what()) +
                      " (a consumer needs read and write access: it takes a reader slot and moves its "
                      "cursor in the segment; shmbus-inspect needs only read access)",
                  errc_name(e.errc()));
  }
}

// tcp://HOST:PORT/BUS: a bridge subscription with the same start choices as a bus.
std::unique_ptr<Source> open_tcp(const Options& o) {
  const auto bad = [&](const char* flag) {
    return usage(fmt::format("{}: {} applies to a local bus only, not to tcp://", o.bus, flag));
  };
  if (o.named) throw bad("--name");
  if (o.best_effort) throw bad("--best-effort");
  if (o.wait_for_bus) throw bad("--wait-for-bus");
  if (!o.trust.owners.empty() || !o.trust.groups.empty()) throw bad("--trust-owner/--trust-group");
  if (o.from.kind == From::Kind::resume) throw bad("--from resume");
  TcpAddress a;
  try {
    a = parse_tcp_url(o.bus);
  } catch (const std::exception& e) {
    throw usage(e.what());
  }
  bridge::ClientOptions co;
  co.host = a.host;
  co.port = a.port;
  co.bus = a.bus;
  co.tls_ca = o.tls_ca;
  if (!o.token_file.empty()) co.token = bridge::read_token_file(o.token_file);
  co.start = o.from.kind == From::Kind::latest     ? bridge::StartKind::latest
             : o.from.kind == From::Kind::sequence ? bridge::StartKind::sequence
                                                   : bridge::StartKind::earliest;
  co.start_seq = o.from.seq;
  TcpFollow follow;
  follow.enabled = o.follow;
  // Each poll waits at most kStopCheck, so signals are noticed without an interrupt hook.
  return std::make_unique<TcpSource>(co, follow);
}

// What --stats could not time: messages that are not synthetic (or whose
// fixed part fails its checksum, so their send time means nothing), and
// synthetic ones the producer did not stamp (--stamp-every).
struct Untimed {
  std::uint64_t not_synthetic = 0;
  std::uint64_t unstamped = 0;
};

std::string untimed_text(const Untimed& u, std::uint64_t messages) {
  std::string out;
  if (u.not_synthetic > 0) {
    out += fmt::format("{} of {} {} not synthetic (--stats times the messages of shmbus-producer --count)",
                       u.not_synthetic, plural(messages, "message"), u.not_synthetic == 1 ? "is" : "are");
  }
  if (u.unstamped > 0) {
    out += fmt::format("{}{} carr{} no send time (the producer stamps one in --stamp-every)",
                       out.empty() ? "" : "; ", plural(u.unstamped, "synthetic message"),
                       u.unstamped == 1 ? "ies" : "y");
  }
  return out;
}

std::string latency_text(const LatencyHistogram& h, const Untimed& u, std::uint64_t messages) {
  if (h.count() == 0) {
    const std::string why = untimed_text(u, messages);
    return fmt::format("latency: no samples: {}", why.empty() ? std::string("no messages") : why);
  }
  auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e3; };
  std::string out =
      fmt::format("latency us: p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  p99.9 {:.2f}  max {:.2f} ({} samples)",
                  us(h.percentile(0.50)), us(h.percentile(0.90)), us(h.percentile(0.99)),
                  us(h.percentile(0.999)), us(h.max()), h.count());
  if (u.not_synthetic > 0) out += "; " + untimed_text(Untimed{u.not_synthetic, 0}, messages) + ", not timed";
  return out;
}

// Whether a stream ended the way a script can take as success: not by the
// producer's death nor by the bus being removed under it, nor by losing the
// reader slot.
bool ended_cleanly(std::string_view stopped_by) {
  return stopped_by != to_string(EndReason::producer_died) && stopped_by != to_string(EndReason::removed) &&
         stopped_by != "evicted";
}

// The reading itself: what was read, and how it ended.
class Reading {
 public:
  Reading(const Options& o, Source& source, BusSource* local, Start start)
      : o_(o), source_(source), local_(local), start_(start), out_(o.format), verify_(o.bus), losses_(o.bus, o.json) {
    // A resumed reader whose bookmark is no longer retained starts with a loss.
    lost_ = resume_gap();
    if (o.verify) {
      verify_.start(source.cursor(), resume_gap(), source.capacity());
    }
    start_seq_ = source.cursor();
  }

  // Reads until the stream ends (with --follow: until a limit is reached),
  // or nothing new comes for `idle`.
  void read(std::chrono::nanoseconds idle);
  // The summary on stderr; returns the exit status.
  int finish();

 private:
  std::uint64_t resume_gap() const { return local_ ? local_->consumer().resume_gap() : 0; }
  void on_message(const Message& m);
  void after_poll(const PollResult& r);
  // False when the reading stops here.
  bool on_eviction(const PollResult& r);
  void on_let_go(const PollResult& r);
  bool on_end(const PollResult& r);
  void print_json(bool verify_ok, double seconds) const;
  void print_text(bool verify_ok, double seconds) const;

  const Options& o_;
  Source& source_;
  BusSource* local_;  // the local bus's source, when reading one
  Start start_;
  Output out_;
  Verifier verify_;
  LossLog losses_;
  std::optional<std::uint64_t> poll_first_;  // the first message of the current poll
  LatencyHistogram latency_;
  Untimed untimed_;
  std::uint64_t negative_latency_ = 0;
  std::uint64_t messages_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t lost_ = 0;
  std::uint64_t corrupt_ = 0;
  std::uint64_t library_lost_ = 0;
  std::optional<std::uint64_t> first_seq_;
  std::uint64_t last_seq_ = 0;
  std::uint64_t start_seq_ = 0;
  Clock::time_point first_time_{};
  Clock::time_point last_time_{};
  Clock::time_point last_activity_{};
  const char* stopped_by_ = "closed";
  std::uint64_t streams_ended_ = 0;  // --follow: ends seen and followed past
  bool announced_ = false;           // --follow: this end was reported
  std::uint64_t evictions_ = 0;      // times the reader slot was taken from us
  bool let_go_ = false;              // the producer's hold limit let this reader go
};

void Reading::on_message(const Message& m) {
  if (!poll_first_) poll_first_ = m.seq;
  if (!first_seq_) {
    first_seq_ = m.seq;
    first_time_ = Clock::now();
  }
  last_seq_ = m.seq;
  ++messages_;
  bytes_ += m.payload.size();
  out_.write(m);

  if (!o_.verify && !o_.stats) return;
  SyntheticFields f;
  const SyntheticCheck check = synthetic_check(m.payload, f);
  // The checksum covers the send time: a message that fails it is not timed.
  if (!o_.stats) {
  } else if (check == SyntheticCheck::too_short || check == SyntheticCheck::bad_checksum) {
    ++untimed_.not_synthetic;
  } else if (f.send_ns == 0) {  // not stamped
    ++untimed_.unstamped;
  } else {
    const std::uint64_t now = realtime_ns();
    if (now >= f.send_ns) {
      latency_.record(now - f.send_ns);
    } else {
      latency_.record(0);
      ++negative_latency_;
    }
  }
  if (o_.verify) verify_.on_message(m, check, f);
}

void Reading::after_poll(const PollResult& r) {
  lost_ += r.lost;
  // A loss is told before the first message after it: it ends where that
  // message starts, or at the cursor when none followed yet.
  if (r.lost > 0) losses_.lost(poll_first_ ? *poll_first_ : source_.cursor(), r.lost, lost_);
  losses_.tick();
  corrupt_ += r.corrupt;
  if (o_.verify) verify_.after_poll(r);
}

bool Reading::on_eviction(const PollResult& r) {
  // Our reader slot was taken from us: what the producer overwrote
  // meanwhile is gone, and may have been what we were reading.
  ++evictions_;
  print_notice(program_name,
               fmt::format("bus '{}': this reader's slot was taken from it (a stray write into the segment, or "
                           "freed by force): {} lost{}; {}",
                           o_.bus, r.lost,
                           r.stale_view ? ", and a message already handed out was overwritten while read" : "",
                           o_.follow ? fmt::format("reading on at seq {}", source_.cursor()) : "stopping"));
  if (r.stale_view && o_.verify) verify_.problem("a message was overwritten while it was read");
  if (o_.follow) return true;
  stopped_by_ = "evicted";
  return false;
}

void Reading::on_let_go(const PollResult& r) {
  // The producer waited its hold limit for us, or an administrator let us
  // go: from here we are lapped, and told exactly what we lose, if we fall
  // behind.
  let_go_ = true;
  print_notice(program_name,
               fmt::format("bus '{}': this reader was let go (the producer's hold limit ran out while it waited for "
                           "it, or shmbus-inspect let-go); reading on at seq {} without holding the producer (a lap "
                           "is reported as lost){}",
                           o_.bus, source_.cursor(),
                           r.stale_view ? "; a message already handed out was overwritten while read" : ""));
  if (r.stale_view && o_.verify) verify_.problem("a message was overwritten while it was read");
}

bool Reading::on_end(const PollResult& r) {
  stopped_by_ = to_string(r.end_reason);
  if (!o_.follow || r.end_reason == EndReason::removed) return false;
  if (announced_) return true;  // still waiting for the next producer
  // Like tail -F: say so once per end, then wait for the next producer.
  announced_ = true;
  ++streams_ended_;
  print_notice(program_name,
               fmt::format("bus '{}': {} after seq {}; following (waiting for a new producer)", o_.bus,
                           r.end_reason == EndReason::closed ? "producer closed the bus" : "producer died",
                           source_.cursor() == 0 ? std::string("(none)") : std::to_string(source_.cursor() - 1)));
  last_activity_ = Clock::now();  // --idle-timeout counts from here
  return true;
}

void Reading::read(std::chrono::nanoseconds idle) {
  last_activity_ = Clock::now();
  for (;;) {
    if (stop_requested()) {
      stopped_by_ = "signal";
      break;
    }
    if (o_.count > 0 && messages_ >= o_.count) {
      stopped_by_ = "count";
      break;
    }
    auto timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(kStopCheck);
    if (idle != std::chrono::nanoseconds::max()) {
      const auto left = idle - (Clock::now() - last_activity_);
      if (left <= std::chrono::nanoseconds::zero()) {
        stopped_by_ = "idle_timeout";
        break;
      }
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
    const std::size_t max =
        o_.count > 0 ? static_cast<std::size_t>(std::min<std::uint64_t>(256, o_.count - messages_)) : 256;
    poll_first_.reset();
    const PollResult r = source_.poll([&](const Message& m) { on_message(m); }, max, timeout);
    after_poll(r);
    if (r.count > 0 || r.lost > 0) {
      last_activity_ = Clock::now();
      last_time_ = last_activity_;
    }
    if (out_.pending()) out_.flush();
    if (out_.closed()) {
      stopped_by_ = "output_closed";
      break;
    }
    if (r.evicted && !on_eviction(r)) break;
    if (r.let_go) on_let_go(r);
    if (r.count > 0) announced_ = false;
    if (r.end_of_stream && !on_end(r)) break;
  }
  out_.flush();
  losses_.flush();
  library_lost_ = source_.lost();
}

int Reading::finish() {
  if (o_.verify) verify_.finish(lost_, messages_, o_.count, stopped_by_);
  const bool verify_ok = !o_.verify || verify_.ok();
  const double seconds = first_seq_ ? std::chrono::duration<double>(last_time_ - first_time_).count() : 0;
  if (o_.json) {
    print_json(verify_ok, seconds);
  } else {
    print_text(verify_ok, seconds);
  }
  // A stream that ended without a close (the producer died, the bus was
  // removed) is a failure for scripts, like a pipeline whose writer crashed;
  // so is a skipped corrupt record, even without --verify.
  return verify_ok && ended_cleanly(stopped_by_) && corrupt_ == 0 ? exit_ok : exit_failure;
}

void Reading::print_json(bool verify_ok, double seconds) const {
  const double rate = seconds > 0 ? static_cast<double>(messages_) / seconds : 0;
  const double mbps = seconds > 0 ? static_cast<double>(bytes_) / seconds / 1e6 : 0;
  nlohmann::json j = {
      {"program", program_name},
      {"report", "summary"},
      {"bus", o_.bus},
      {"messages", messages_},
      {"bytes", bytes_},
      {"lost", lost_},
      {"corrupt", corrupt_},
      {"seconds", seconds},
      {"msgs_per_sec", rate},
      {"mb_per_sec", mbps},
      {"first_seq", first_seq_ ? nlohmann::json(*first_seq_) : nlohmann::json()},
      {"last_seq", first_seq_ ? nlohmann::json(last_seq_) : nlohmann::json()},
      {"stopped_by", stopped_by_},
      {"library_lost", library_lost_},
      {"start_seq", start_seq_},
  };
  if (o_.named && local_) {
    j["reader"] = {{"name", o_.name}, {"resumed", local_->consumer().resumed()}, {"resume_gap", resume_gap()}};
  }
  if (o_.follow) j["streams_followed"] = streams_ended_;
  if (o_.follow && !local_) j["reconnects"] = source_.reconnects();
  if (evictions_ > 0) j["evictions"] = evictions_;
  if (let_go_) j["let_go"] = true;
  if (!verify_ok) {
    j["error"] = fmt::format("bus '{}': verify failed", o_.bus);
    j["code"] = "verify_failed";
  } else if (!ended_cleanly(stopped_by_)) {
    j["error"] = fmt::format("bus '{}': the stream ended without a close ({})", o_.bus, stopped_by_);
    j["code"] = stopped_by_;
  } else if (corrupt_ > 0) {
    j["error"] = fmt::format("bus '{}': {} skipped", o_.bus, plural(corrupt_, "corrupt record"));
    j["code"] = "corrupt";
  }
  if (o_.verify) {
    j["verify"] = {{"ok", verify_ok},
                   {"problems", verify_.problems()},
                   {"gaps_reported_lost", std::min(verify_.gaps(), verify_.reported_lost())}};
  }
  if (o_.stats) {
    const LatencyHistogram& h = latency_;
    j["latency_ns"] = {{"samples", h.count()},      {"min", h.min()},
                       {"p50", h.percentile(0.50)}, {"p90", h.percentile(0.90)},
                       {"p99", h.percentile(0.99)}, {"p99_9", h.percentile(0.999)},
                       {"max", h.max()},            {"negative", negative_latency_},
                       {"not_synthetic", untimed_.not_synthetic}, {"unstamped", untimed_.unstamped}};
  }
  fmt::print(stderr, "{}\n", j.dump());
}

void Reading::print_text(bool verify_ok, double seconds) const {
  const double rate = seconds > 0 ? static_cast<double>(messages_) / seconds : 0;
  const double mbps = seconds > 0 ? static_cast<double>(bytes_) / seconds / 1e6 : 0;
  std::string line = fmt::format("{}: bus '{}': {}, {} lost in {:.3f} s: {:.0f} msgs/s, {:.1f} MB/s; stopped by {}",
                                 program_name, o_.bus, plural(messages_, "message"), lost_, seconds, rate, mbps,
                                 stopped_by_);
  if (first_seq_) line += fmt::format("; seq {}..{}", *first_seq_, last_seq_);
  if (o_.named && local_ && start_ == Start::resume) {
    line += local_->consumer().resumed() ? fmt::format("; reader '{}' resumed at seq {}", o_.name, start_seq_)
                                         : fmt::format("; reader '{}' is new, started at seq {}", o_.name, start_seq_);
  }
  if (o_.follow && streams_ended_ > 0) {
    line += fmt::format("; followed across {} end{} of stream", streams_ended_, streams_ended_ == 1 ? "" : "s");
  }
  if (const std::uint64_t n = source_.reconnects(); n > 0) {
    line += fmt::format("; reconnected {} time{}", n, n == 1 ? "" : "s");
  }
  if (corrupt_ > 0) line += fmt::format("; {} skipped", plural(corrupt_, "corrupt record"));
  if (o_.verify) {
    // A reader that started late verified only from there on: a local
    // reader from where it attached (what it lost before its first message
    // is among the gaps), a remote one from its first message.
    const std::uint64_t began = local_ ? start_seq_ : first_seq_.value_or(0);
    const std::string from = began > 0 ? fmt::format(" from seq {}, where this reader started", began) : "";
    if (!verify_ok) {
      line += fmt::format("; verify FAILED ({})", plural(verify_.problems(), "problem"));
    } else if (verify_.gaps() == 0) {
      line += fmt::format("; verified OK{} (no gaps, no duplicates, checksums match)", from);
    } else {
      line += fmt::format("; verified OK{} (the {} missing were all reported lost)", from, verify_.gaps());
    }
  }
  fmt::print(stderr, "{}\n", line);
  if (o_.stats) {
    fmt::print(stderr, "{}: bus '{}': {}{}\n", program_name, o_.bus, latency_text(latency_, untimed_, messages_),
               negative_latency_ ? fmt::format("; {} negative (clock stepped?) counted as 0", negative_latency_)
                                 : std::string());
  }
}

}  // namespace

int run(const Options& o) {
  set_json_lines(o.json);
  const bool tcp = is_tcp_url(o.bus);
  if (!tcp) validate_name(o.bus);
  if (!tcp && (!o.tls_ca.empty() || !o.token_file.empty())) {
    throw usage(fmt::format("bus '{}': --tls-ca and --token-file apply to tcp://HOST:PORT/BUS only", o.bus));
  }
  const std::chrono::nanoseconds idle = parse_duration(o.idle_timeout);
  const ConsumerOptions co = consumer_options(o);

  std::unique_ptr<Source> source;
  BusSource* local = nullptr;  // the local bus's source, when reading one
  if (tcp) {
    source = open_tcp(o);
  } else {
    std::unique_ptr<BusSource> bs = open_local(o, co);
    local = bs.get();
    source = std::move(bs);
  }
  if (local && co.start == Start::resume && local->consumer().resume_gap() > 0) {
    const Consumer& c = local->consumer();
    print_notice(program_name, fmt::format("bus '{}': reader '{}': {} after where it stopped {} no "
                                           "longer retained; resuming at seq {} (counted as lost)",
                                           o.bus, o.name, plural(c.resume_gap(), "message"),
                                           c.resume_gap() == 1 ? "is" : "are", c.cursor()));
  }

  Reading reading(o, *source, local, co.start);
  reading.read(idle);
  return reading.finish();
}

}  // namespace shmbus::consumer
