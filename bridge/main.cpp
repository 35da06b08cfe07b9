// shmbus-bridge: forwards a local bus to TCP subscribers (serve). Wiring only:
// the server is server.cpp, the wire format protocol.cpp (docs/protocol.md).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <memory>
#include <cstdio>
#include <optional>
#include <string>

#include "bridge/client.hpp"
#include "tools/common/duration.hpp"
#include "bridge/log.hpp"
#include "bridge/metrics.hpp"
#include "bridge/mirror.hpp"
#include "tools/common/choice.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/metrics_server.hpp"
#include "tools/common/open_bus.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "bridge/protocol.hpp"
#include "bridge/server.hpp"
#include "tools/common/bus_dir.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::bridge;

constexpr const char* kProgram = "shmbus-bridge";

const Choices<SlowPolicy> slow_names = {
    {"disconnect", SlowPolicy::disconnect}, {"skip", SlowPolicy::skip}, {"block", SlowPolicy::block}};

// mirror --from: earliest, latest or a sequence number.
struct MirrorStart {
  StartKind kind = StartKind::earliest;
  std::uint64_t seq = 0;
};

std::optional<MirrorStart> parse_mirror_start(const std::string& s) {
  if (s == "earliest") return MirrorStart{StartKind::earliest};
  if (s == "latest") return MirrorStart{StartKind::latest};
  MirrorStart m{StartKind::sequence};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), m.seq);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return m;
}

Failure usage(const std::string& message) { return Failure(exit_usage, message, "usage"); }

struct ServeArgs {
  std::string bus;
  std::string listen = "127.0.0.1:7800";
  std::string token_file;
  SlowPolicy slow = SlowPolicy::disconnect;
  std::uint32_t max_subscribers = 64;
  std::uint32_t max_handshakes = 64;
  std::uint32_t max_handshakes_per_address = 8;
  std::uint32_t max_frame = 1u << 20;
  std::uint32_t max_handshake = kMaxHelloBody;
  std::string handshake_timeout = "5s";
  std::string idle_timeout = "15s";
  std::string heartbeat = "1s";
  std::size_t buffer = 4u << 20;
  std::string stats_interval = "10s";
  bool json = false;
  bool quiet = false;
  std::string tls_cert, tls_key;
  std::optional<std::string> wait_for_bus;
  std::string metrics_listen;
  TrustArgs trust;
};

// Throws std::invalid_argument unless `host` is a numeric IPv4 or IPv6 address.
bool is_loopback(const std::string& host) {
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  throw std::invalid_argument(fmt::format("--listen: '{}' is not an IP address", host));
}

std::string stats_text(const ServeStats& s) {
  return fmt::format(
      "stats: subscribers={} accepted={} messages={} bytes={} dropped={} closed: slow={} idle={} "
      "protocol={} handshake={} refused={} peer={} end={} tls={}",
      s.subscribers, s.accepted, s.messages, s.bytes, s.dropped, s.closed_slow, s.closed_idle,
      s.closed_protocol, s.closed_handshake, s.closed_refused, s.closed_peer, s.closed_end, s.closed_tls);
}

// `report`: "progress" for a periodic line, "summary" for the last one.
std::string stats_json(const ServeStats& s, const char* report) {
  nlohmann::json j{{"program", kProgram}, {"report", report}, {"subscribers", s.subscribers}, {"accepted", s.accepted}, {"messages", s.messages},
                   {"bytes", s.bytes}, {"dropped", s.dropped},
                   {"closed", {{"slow", s.closed_slow}, {"idle", s.closed_idle},
                               {"protocol", s.closed_protocol}, {"handshake", s.closed_handshake},
                               {"refused", s.closed_refused}, {"peer", s.closed_peer},
                               {"end", s.closed_end}, {"tls", s.closed_tls}}}};
  return j.dump();
}

struct MirrorArgs {
  std::string connect;
  std::string remote_bus;
  std::string bus;
  MirrorStart from;
  std::string token_file;
  std::string tls_ca;
  std::uint64_t capacity = 65536;
  std::uint32_t max_readers = 16;
  std::string backoff_max = "5s";
  std::string stats_interval = "10s";
  bool json = false;
  bool quiet = false;
  std::string metrics_listen;
  TrustArgs trust;
};

// --metrics-listen: a Prometheus exporter on a thread of its own, or none.
std::unique_ptr<MetricsServer> start_metrics(const std::string& listen, MetricsServer::Render render) {
  if (listen.empty()) return nullptr;
  auto server = std::make_unique<MetricsServer>(listen, "--metrics-listen", kProgram, std::move(render));
  server->start();
  log_always(fmt::format("serving metrics on {}", server->url()));
  return server;
}

std::string mirror_stats_text(const MirrorStats& s) {
  return fmt::format("stats: connected={} connects={} failures={} messages={} gaps={} lost={} next_seq={}",
                     s.connected ? 1 : 0, s.connects, s.failures, s.messages, s.gaps, s.lost, s.next_seq);
}

std::string mirror_stats_json(const MirrorStats& s) {
  nlohmann::json j{{"program", kProgram}, {"report", s.ended ? "summary" : "progress"}, {"connected", s.connected}, {"connects", s.connects}, {"failures", s.failures},
                   {"messages", s.messages},   {"gaps", s.gaps},         {"lost", s.lost},
                   {"next_seq", s.next_seq}};
  return j.dump();
}

// Errors before anything runs (bad names, addresses, durations) exit 2;
// run_main() reports them all.
int mirror(const MirrorArgs& a) {
  MirrorOptions o;
  validate_name(a.bus);
  validate_name(a.remote_bus);
  split_host_port(a.connect, "--connect", o.remote.host, o.remote.port);
  (void)is_loopback(o.remote.host);  // numeric address check
  o.remote.bus = a.remote_bus;
  o.remote.tls_ca = a.tls_ca;
  o.remote.start = a.from.kind;
  o.remote.start_seq = a.from.seq;
  o.bus = a.bus;
  o.capacity = a.capacity;
  o.max_readers = a.max_readers;
  o.trust = resolve_trust(a.trust);
  o.backoff_max = std::max(parse_duration_ms(a.backoff_max), o.backoff_min);
  const std::chrono::milliseconds interval = parse_duration_ms(a.stats_interval);
  set_quiet(a.quiet);
  if (!a.token_file.empty()) o.remote.token = read_token_file(a.token_file);
  install_stop_handlers();
  Latest<MirrorStats> latest;
  o.sample = [&latest](const MirrorStats& s) { latest.set(s); };
  const auto metrics = start_metrics(a.metrics_listen, [&] { return mirror_metrics(latest.get(), o); });
  const bool json = a.json;
  // A line only when something changed since the last one (or since the
  // start): an idle mirror stays quiet.
  auto on_stats = [json, last = MirrorStats{}](const MirrorStats& s) mutable {
    if (s == last) return;
    last = s;
    if (json) {
      log_json(mirror_stats_json(s));
    } else {
      log_always(mirror_stats_text(s));
    }
  };
  (void)run_mirror(o, [] { return stop_requested(); }, interval, on_stats);
  return exit_ok;
}

int serve(const ServeArgs& a) {
  ServeOptions o;
  o.bus = a.bus;
  validate_name(a.bus);
  split_host_port(a.listen, "--listen", o.host, o.port);
  o.handshake_timeout = parse_duration_ms(a.handshake_timeout);
  o.idle_timeout = parse_duration_ms(a.idle_timeout);
  o.heartbeat = parse_duration_ms(a.heartbeat);
  o.trust = resolve_trust(a.trust);
  if (o.heartbeat.count() <= 0 || o.heartbeat >= o.idle_timeout) {
    throw usage("--heartbeat must be at least 1ms (it is counted in whole milliseconds) and shorter than --idle-timeout");
  }
  if (!is_loopback(o.host) && a.token_file.empty()) {
    throw usage(fmt::format("--listen {}: not a loopback address; --token-file is required", o.host));
  }
  if (!a.token_file.empty()) o.token = read_token_file(a.token_file);  // exit 1 if unreadable
  o.slow = a.slow;
  o.max_subscribers = a.max_subscribers;
  o.max_handshakes = a.max_handshakes;
  o.max_handshakes_per_address = a.max_handshakes_per_address;
  o.max_frame = a.max_frame;
  o.max_handshake = a.max_handshake;
  o.buffer_bytes = a.buffer;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  if (o.tls_cert.empty() != o.tls_key.empty()) throw usage("--tls-cert and --tls-key go together");
  set_quiet(a.quiet);
  Server server(o);
  // The bus is checked now, so that a unit serving a bus that is missing
  // (or refused) fails at start with one line, not once per subscriber.
  install_stop_handlers();
  (void)open_bus_waiting(a.bus, OpenOptions{.trust = o.trust},
                         a.wait_for_bus ? std::optional(parse_duration(*a.wait_for_bus)) : std::nullopt);
  log_line(fmt::format("serving bus '{}' on {}:{} (--slow {}{})", a.bus, o.host, server.port(),
                       choice_name(slow_names, a.slow), o.tls_cert.empty() ? "" : ", TLS"));
  // Counters only (atomics): read from the exporter's own thread.
  const auto metrics = start_metrics(a.metrics_listen, [&] { return serve_metrics(server.stats(), o); });
  const auto interval = parse_duration_ms(a.stats_interval);
  const bool json = a.json;
  if (interval.count() > 0) {
    // A line only when something changed since the last one (or since the
    // start): an idle bridge stays quiet; the summary at the end always comes.
    server.on_stats(interval, [json, last = ServeStats{}](const ServeStats& s) mutable {
      if (s == last) return;
      last = s;
      if (json) {
        log_json(stats_json(s, "progress"));
      } else {
        log_line(stats_text(s));
      }
    });
  }
  server.run([] { return stop_requested(); });
  const ServeStats s = server.stats();
  if (json) {
    log_json(stats_json(s, "summary"));
  } else {
    log_line(stats_text(s));
  }
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbus-bridge: a shmbus bus over TCP (see docs/protocol.md)"};
  add_version_flag(app, kProgram);
  app.footer(exit_status_help({
      {"0", "serve or mirror stopped by SIGINT/SIGTERM"},
      {"1", "an error: a bus that cannot be opened or created, a --listen address that cannot be bound, "
            "an unreadable --token-file or TLS file"},
      {"2", "a bad command line (unknown option or subcommand, bad address or duration)"},
      exit_status_second_signal,
  }));
  app.require_subcommand(1);
  ServeArgs sa;
  auto* s = app.add_subcommand("serve", "Serve a local bus to TCP subscribers");
  s->add_option("BUS", sa.bus, "Bus to serve")->required();
  s->add_option("--listen", sa.listen,
                "HOST:PORT to listen on (non-loopback needs --token-file). A subscriber on this host "
                "(loopback or a local address) is served only if its user may read the bus's segment")
      ->capture_default_str();
  s->add_option("--token-file", sa.token_file,
                "File whose first line (without its line end) is the token subscribers must present; "
                "after a wrong one, that address's handshakes wait 100ms, doubling to 5s");
  add_choice(*s, "--slow", sa.slow, slow_names, "A subscriber whose buffer is full: disconnect|skip|block");
  s->add_option("--max-subscribers", sa.max_subscribers,
                "Subscribers at once (checked when a hello is accepted; handshakes do not count)")
      ->check(CLI::Range(1u, 100000u))->capture_default_str();
  s->add_option("--max-handshakes", sa.max_handshakes,
                "Connections not yet subscribed, in all; over it the oldest is closed")
      ->check(CLI::Range(1u, 100000u))->capture_default_str();
  s->add_option("--max-handshakes-per-address", sa.max_handshakes_per_address,
                "Connections not yet subscribed from one address (an IPv6 /64); over it that address's "
                "oldest is closed")
      ->check(CLI::Range(1u, 100000u))->capture_default_str();
  s->add_option("--max-frame", sa.max_frame,
                "Largest batch frame body sent, bytes (raised to fit one message of the bus's largest payload)")
      ->check(CLI::Range(4096u, 1u << 28))->capture_default_str();
  s->add_option("--max-handshake", sa.max_handshake, "Largest hello accepted, bytes")
      ->check(CLI::Range(kHelloFixed + 1, kMaxHelloBody))->capture_default_str();
  s->add_option("--handshake-timeout", sa.handshake_timeout,
                "Deadline for the whole hello (and TLS handshake) from the connect")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--idle-timeout", sa.idle_timeout,
                "Close a subscriber silent this long (its heartbeats keep it open)")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--heartbeat", sa.heartbeat, "Heartbeat interval when idle")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--buffer", sa.buffer,
                "Per-subscriber buffer of encoded frames, bytes; a closing connection stays while its peer takes "
                "at least 64 KiB/s of what is left")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 32))->capture_default_str();
  s->add_option("--stats-interval", sa.stats_interval,
                "Stats line period on stderr, when something changed (0: off)")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--wait-for-bus", sa.wait_for_bus,
                 "Wait up to DURATION (or forever) for the bus to exist before serving; without it a "
                 "bus that does not exist (or is refused) fails at start")
      ->check(duration_validator());
  s->add_option("--metrics-listen", sa.metrics_listen,
                "HOST:PORT to serve Prometheus metrics on (GET /metrics; no authentication: keep it on "
                "loopback or a private interface)");
  s->add_flag("--json", sa.json, "Stats lines as JSON");
  s->add_flag("--quiet", sa.quiet, "No per-connection log lines");
  s->add_option("--tls-cert", sa.tls_cert, "Serve TLS with this PEM certificate chain (needs --tls-key)");
  s->add_option("--tls-key", sa.tls_key, "PEM private key of --tls-cert");
  add_trust_options(*s, sa.trust);
  std::string dir;
  add_dir_option(*s, dir);

  MirrorArgs ma;
  auto* m = app.add_subcommand(
      "mirror",
      "Republish a remote bus (served by shmbus-bridge serve) into a local bus with the same sequence "
      "numbers; reconnects with exponential backoff and resumes at the local bus's next sequence");
  m->add_option("--connect", ma.connect, "HOST:PORT of the serving bridge (numeric address)")->required();
  m->add_option("--remote-bus", ma.remote_bus, "Bus name on the serving side")->required();
  m->add_option("--bus", ma.bus, "Local bus (created with the remote's record size and policy if missing)")
      ->required();
  m->add_option_function<std::string>(
       "--from", [&ma](const std::string& text) { ma.from = *parse_mirror_start(text); },
       "Where a local bus that never carried a message starts: earliest, latest or a sequence "
       "(an existing one always resumes at its next sequence)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return parse_mirror_start(text) ? std::string()
                                            : "'" + text + "': expected earliest, latest or a sequence";
          },
          "earliest|latest|SEQ"))
      ->default_str("earliest");
  m->add_option("--capacity", ma.capacity, "Records in the local ring when it is created")->capture_default_str();
  m->add_option("--max-readers", ma.max_readers, "Reader slots of the local bus when it is created")
      ->capture_default_str();
  m->add_option("--token-file", ma.token_file, "File holding the token to present");
  m->add_option("--tls-ca", ma.tls_ca, "Speak TLS; trust only a server certificate from this PEM CA");
  m->add_option("--backoff-max", ma.backoff_max, "Longest wait between reconnection attempts (from 100ms, doubling)")
      ->check(duration_validator())->capture_default_str();
  m->add_option("--stats-interval", ma.stats_interval,
                "Stats line period on stderr, when something changed (0: off)")
      ->check(duration_validator())->capture_default_str();
  m->add_option("--metrics-listen", ma.metrics_listen,
                "HOST:PORT to serve Prometheus metrics on (GET /metrics; no authentication: keep it on "
                "loopback or a private interface)");
  m->add_flag("--json", ma.json, "Stats lines as JSON");
  m->add_flag("--quiet", ma.quiet, "No per-connection log lines (gaps, stats and errors are still printed)");
  add_trust_options(*m, ma.trust);
  add_dir_option(*m, dir);
  refuse_negative_numbers(app);
  return run_main(app, ErrorSink{kProgram, wants_json(argc, argv), stderr}, [&] {
    app.parse(argc, argv);
    set_json_lines((s->parsed() && sa.json) || (m->parsed() && ma.json));
    apply_dir(dir);
    if (s->parsed()) return serve(sa);
    if (m->parsed()) return mirror(ma);
    return exit_usage;
  });
}
