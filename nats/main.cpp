// shmbus-nats: a bus into NATS JetStream (out) and a JetStream stream into a
// local bus (in). Wiring only: out.cpp, in.cpp, connection.cpp (docs/nats.md).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "nats/connection.hpp"
#include "tools/common/created_bus.hpp"
#include "tools/common/duration.hpp"
#include "nats/headers.hpp"
#include "nats/in.hpp"
#include "nats/metrics.hpp"
#include "nats/out.hpp"
#include "tools/common/metrics_server.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/bus_dir.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::nats;
using namespace std::chrono_literals;

constexpr const char* kProgram = "shmbus-nats";

struct Common {
  ConnectArgs connect;
  std::string stats_interval = "10s";
  std::string idle_timeout = "0";
  std::string metrics_listen;
  bool json = false;
};

void add_connect_options(CLI::App& s, Common& c) {
  s.add_option("--server", c.connect.server, "NATS server URL(s), comma-separated (nats://HOST:PORT, tls://...)")
      ->capture_default_str();
  s.add_option("--creds", c.connect.creds, "NATS credentials file (user JWT and nkey seed), as the NATS client takes it");
  s.add_option("--tls-ca", c.connect.tls_ca, "CA certificates (PEM) to verify the server with; turns TLS on");
  s.add_option("--tls-cert", c.connect.tls_cert, "Client certificate (PEM) for servers that verify clients")
      ->needs(s.add_option("--tls-key", c.connect.tls_key, "Its private key (PEM)"));
  add_milliseconds_option(s, "--connect-timeout", c.connect.connect_timeout_ms,
                          "Connect timeout: 500ms, 2s, 1m... (a bare number is milliseconds)", 1ms, 1ms, 24h);
  add_milliseconds_option(s, "--max-backoff", c.connect.max_backoff_ms,
                          "Longest wait between reconnect attempts: 500ms, 2s, 1m... (a bare number is "
                          "milliseconds)",
                          1ms, 0ms, 24h);
  s.add_option("--stats-interval", c.stats_interval,
               "Progress line period on stderr: 500ms, 10s, 1m... (a bare number is seconds; 0: off)")
      ->check(duration_validator())->capture_default_str();
  s.add_option("--idle-timeout", c.idle_timeout,
               "Stop after this long with nothing new: 500ms, 2s, 1h... (a bare number is seconds; 0 or "
               "forever: never)")
      ->check(duration_validator())->capture_default_str();
  s.add_option("--metrics-listen", c.metrics_listen,
               "HOST:PORT to serve Prometheus metrics on (GET /metrics; no authentication: keep it on loopback "
               "or a private interface)");
  s.add_flag("--json", c.json, "Progress and summary lines as JSON");
}

// `report`: "progress" for a periodic line, "summary" for the last one.
nlohmann::json out_json(const OutStats& s, const char* report) {
  return {{"program", kProgram}, {"report", report}, {"direction", "out"},      {"published", s.published}, {"acknowledged", s.acknowledged},
          {"in_flight", s.in_flight}, {"duplicates", s.duplicates}, {"failed", s.failed},
          {"resyncs", s.resyncs},    {"reconnects", s.reconnects}, {"lost", s.lost},
          {"first_seq", s.first_seq}, {"next_seq", s.next_seq},   {"seconds", s.seconds},
          {"msgs_per_s", s.seconds > 0 ? static_cast<double>(s.acknowledged) / s.seconds : 0.0}};
}

std::string out_text(const OutStats& s) {
  return fmt::format(
      "out: published={} acknowledged={} in_flight={} duplicates={} failed={} resyncs={} reconnects={} lost={} "
      "next_seq={} ({:.0f} msgs/s)",
      s.published, s.acknowledged, s.in_flight, s.duplicates, s.failed, s.resyncs, s.reconnects, s.lost, s.next_seq,
      s.seconds > 0 ? static_cast<double>(s.acknowledged) / s.seconds : 0.0);
}

nlohmann::json in_json(const InStats& s, const char* report) {
  return {{"program", kProgram}, {"report", report}, {"direction", "in"},          {"received", s.received},
          {"published", s.published},   {"acknowledged", s.acknowledged},
          {"redelivered", s.redelivered}, {"skipped_duplicates", s.skipped_duplicates},
          {"gap", s.gap},               {"invalid", s.invalid},
          {"rewinds", s.rewinds},       {"reconnects", s.reconnects},
          {"next_seq", s.next_seq},     {"seconds", s.seconds}};
}

std::string in_text(const InStats& s) {
  return fmt::format(
      "in: received={} published={} acknowledged={} redelivered={} skipped_duplicates={} gap={} invalid={} "
      "rewinds={} reconnects={} next_seq={}",
      s.received, s.published, s.acknowledged, s.redelivered, s.skipped_duplicates, s.gap, s.invalid, s.rewinds,
      s.reconnects, s.next_seq);
}

// A progress or summary line on stderr: text after "shmbus-nats: ", or with
// --json the JSON object alone.
void line(const std::string& text, bool json) {
  std::fflush(stdout);
  if (json) {
    std::fprintf(stderr, "%s\n", text.c_str());
  } else {
    std::fprintf(stderr, "%s: %s\n", kProgram, text.c_str());
  }
  std::fflush(stderr);
}

// --metrics-listen: a Prometheus exporter on a thread of its own, or none.
std::unique_ptr<MetricsServer> start_metrics(const Common& c, MetricsServer::Render render) {
  if (c.metrics_listen.empty()) return nullptr;
  auto server = std::make_unique<MetricsServer>(c.metrics_listen, "--metrics-listen", kProgram, std::move(render));
  server->start();
  const std::string notice = "serving metrics on " + server->url();
  line(c.json ? nlohmann::json{{"program", kProgram}, {"notice", notice}}.dump() : notice, c.json);
  return server;
}

// Runs one direction: the metrics exporter on its latest stats, a progress
// line every --stats-interval and the summary at the end. Returns the last stats.
template <class Stats, class Options>
Stats run_direction(const Common& c, Options& o,
                    Stats (*run)(const Options&, const std::function<bool()>&,
                                 const std::function<void(const Stats&)>&),
                    std::string (*metrics)(const Stats&, const Options&),
                    nlohmann::json (*to_json)(const Stats&, const char*), std::string (*to_text)(const Stats&)) {
  Latest<Stats> latest;
  o.sample = [&latest](const Stats& p) { latest.set(p); };
  const auto server = start_metrics(c, [&] { return metrics(latest.get(), o); });
  const bool json = c.json;
  const Stats s = run(o, [] { return stop_requested(); }, [json, to_json, to_text](const Stats& p) {
    line(json ? to_json(p, "progress").dump() : to_text(p), json);
  });
  line(json ? to_json(s, "summary").dump() : to_text(s), json);
  nats_Close();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shmbus-nats: a shmbus bus into NATS JetStream and back (docs/nats.md). `out` publishes a bus's messages to "
      "a stream, resuming after the last one the stream holds; `in` republishes a stream into a local bus under "
      "the source bus's sequence numbers, acknowledging only what is committed. Errors are one line on stderr "
      "(exit 1; 2 for a bad command line); progress and a final summary go to stderr."};
  add_version_flag(app, kProgram);
  app.footer(exit_status_help({
      {"0", "success: --count, --idle-timeout, the bus closed (out), or stopped by SIGINT/SIGTERM"},
      {"1", "a bus or NATS error (no server, no stream), or out's stream ended without a close "
            "(producer died, bus removed)"},
      {"2", "a bad command line (unknown option or subcommand, bad duration, invalid bus name)"},
      exit_status_second_signal,
  }));
  app.require_subcommand(1);

  Common oc;
  OutOptions oo;
  TrustArgs otrust;
  std::string out_subject;
  auto* out = app.add_subcommand("out", "Publish a bus's messages to a JetStream stream");
  out->add_option("BUS", oo.bus, "Bus to read")->required();
  out->add_option("--stream", oo.stream, "JetStream stream to publish to (must exist, or --create-stream)")
      ->required();
  out->add_option("--subject", out_subject, "Subject to publish on (default: shmbus.BUS); one bus per subject");
  out->add_option("--max-in-flight", oo.max_in_flight, "Publishes awaiting the server's ack at most")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))->capture_default_str();
  add_milliseconds_option(*out, "--ack-timeout", oo.ack_timeout_ms,
                          "A publish unanswered this long is retried after a resync: 100ms to 10m (a bare "
                          "number is milliseconds)",
                          1ms, 100ms, 10min);
  out->add_flag("--follow", oo.follow, "Keep going across producer close, crash and takeover");
  out->add_flag("--create-stream", oo.create_stream, "Create the stream (file storage, the subject) if missing");
  out->add_option("--count", oo.count, "Stop after N messages");
  add_connect_options(*out, oc);
  add_trust_options(*out, otrust);
  std::string dir;
  add_dir_option(*out, dir);

  Common ic;
  InOptions io;
  std::uint64_t capacity = BusOptions{}.capacity;
  std::uint32_t record_size = BusOptions{}.record_size;
  auto* in = app.add_subcommand("in", "Republish a JetStream stream into a local bus");
  in->add_option("BUS", io.bus, "Local bus to publish to (created if missing)")->required();
  in->add_option("--stream", io.stream, "JetStream stream to read")->required();
  in->add_option("--durable", io.durable, "Durable pull consumer name (created or taken over)")->required();
  in->add_option("--subject", io.subject, "Only messages on this subject (default: the whole stream)");
  in->add_option("--batch", io.batch, "Messages per fetch")->check(CLI::Range(1, 100000))->capture_default_str();
  add_milliseconds_option(*in, "--ack-wait", io.ack_wait_ms,
                          "The server redelivers what stays unacknowledged this long: 1s to 1h (a bare number "
                          "is milliseconds)",
                          1ms, 1s, 1h);
  in->add_option("--capacity", capacity, "Records in the ring, when the bus is created")->capture_default_str();
  in->add_option("--record-size", record_size, "Bytes per record, when the bus is created")->capture_default_str();
  in->add_option("--count", io.count, "Stop after N messages published");
  add_connect_options(*in, ic);
  add_dir_option(*in, dir);
  refuse_negative_numbers(app);

  return run_main(app, ErrorSink{kProgram, wants_json(argc, argv), stderr}, [&] {
    app.parse(argc, argv);
    set_json_lines((out->parsed() && oc.json) || (in->parsed() && ic.json));
    if (out->parsed() || in->parsed()) apply_dir(dir);
    install_stop_handlers();
    if (out->parsed()) {
      validate_name(oo.bus);
      oo.subject = out_subject;
      oo.connect = oc.connect;
      oo.trust = resolve_trust(otrust);
      oo.stats_interval = parse_duration_ms(oc.stats_interval);
      oo.idle_timeout = parse_duration(oc.idle_timeout);
      const OutStats s = run_direction(oc, oo, &run_out, &out_metrics, &out_json, &out_text);
      return s.end == "producer_died" || s.end == "removed" ? exit_failure : exit_ok;
    }
    if (in->parsed()) {
      validate_name(io.bus);
      io.connect = ic.connect;
      io.stats_interval = parse_duration_ms(ic.stats_interval);
      io.idle_timeout = parse_duration(ic.idle_timeout);
      io.create.capacity = capacity;
      io.create.record_size = record_size;
      io.create.existing = Existing::as_is;  // an existing bus keeps its own options (docs/nats.md)
      // Created here rather than by run_in (which joins it), so that a
      // failure before anything is published (no server, no stream)
      // removes the bus again.
      const OpenedBus opened = open_or_create_bus(io.bus, io.create);
      const CreatedBusGuard created(opened, io.create.trust);
      run_direction(ic, io, &run_in, &in_metrics, &in_json, &in_text);
      return exit_ok;
    }
    return exit_usage;
  });
}
