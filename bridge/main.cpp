// shmbus-bridge: forwards a local bus to TCP subscribers (serve). Wiring only:
// the server is server.cpp, the wire format protocol.cpp (PROTOCOL.md).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <string>

#include "bridge/client.hpp"
#include "tools/common/duration.hpp"
#include "bridge/log.hpp"
#include "bridge/mirror.hpp"
#include "tools/common/program.hpp"
#include "bridge/protocol.hpp"
#include "bridge/server.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::bridge;

constexpr const char* kProgram = "shmbus-bridge";

struct ServeArgs {
  std::string bus;
  std::string listen = "127.0.0.1:7800";
  std::string token_file;
  std::string slow = "disconnect";
  std::uint32_t max_subscribers = 64;
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

std::chrono::milliseconds ms(const std::string& d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(parse_duration(d));
}

std::string stats_text(const ServeStats& s) {
  return fmt::format(
      "stats: subscribers={} accepted={} messages={} bytes={} dropped={} closed: slow={} idle={} "
      "protocol={} handshake={} refused={} peer={} end={} tls={}",
      s.subscribers, s.accepted, s.messages, s.bytes, s.dropped, s.closed_slow, s.closed_idle,
      s.closed_protocol, s.closed_handshake, s.closed_refused, s.closed_peer, s.closed_end, s.closed_tls);
}

std::string stats_json(const ServeStats& s) {
  nlohmann::json j{{"subscribers", s.subscribers}, {"accepted", s.accepted}, {"messages", s.messages},
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
  std::string from = "earliest";
  std::string token_file;
  std::string tls_ca;
  std::uint64_t capacity = 65536;
  std::uint32_t max_readers = 16;
  std::string backoff_max = "5s";
  std::string stats_interval = "10s";
  bool json = false;
  bool quiet = false;
  TrustArgs trust;
};

std::string mirror_stats_text(const MirrorStats& s) {
  return fmt::format("stats: connected={} connects={} failures={} messages={} gaps={} lost={} next_seq={}",
                     s.connected ? 1 : 0, s.connects, s.failures, s.messages, s.gaps, s.lost, s.next_seq);
}

std::string mirror_stats_json(const MirrorStats& s) {
  nlohmann::json j{{"connected", s.connected}, {"connects", s.connects}, {"failures", s.failures},
                   {"messages", s.messages},   {"gaps", s.gaps},         {"lost", s.lost},
                   {"next_seq", s.next_seq}};
  return j.dump();
}

int mirror(const MirrorArgs& a) {
  MirrorOptions o;
  std::chrono::milliseconds interval{};
  try {
    validate_name(a.bus);
    validate_name(a.remote_bus);
    split_host_port(a.connect, "--connect", o.remote.host, o.remote.port);
    (void)is_loopback(o.remote.host);  // numeric address check
    o.remote.bus = a.remote_bus;
    o.remote.tls_ca = a.tls_ca;
    if (a.from == "earliest") {
      o.remote.start = StartKind::earliest;
    } else if (a.from == "latest") {
      o.remote.start = StartKind::latest;
    } else {
      o.remote.start = StartKind::sequence;
      auto [end, ec] = std::from_chars(a.from.data(), a.from.data() + a.from.size(), o.remote.start_seq);
      if (ec != std::errc{} || end != a.from.data() + a.from.size()) {
        throw std::invalid_argument(fmt::format("--from '{}': expected earliest, latest or a sequence", a.from));
      }
    }
    o.bus = a.bus;
    o.capacity = a.capacity;
    o.max_readers = a.max_readers;
    o.trust = resolve_trust(a.trust);
    o.backoff_max = std::max(ms(a.backoff_max), o.backoff_min);
    interval = ms(a.stats_interval);
  } catch (const std::exception& e) {
    print_error(kProgram, e.what());
    return exit_usage;
  }
  set_quiet(a.quiet);
  try {
    if (!a.token_file.empty()) o.remote.token = read_token_file(a.token_file);
    install_stop_handlers();
    const bool json = a.json;
    const MirrorEnd end = run_mirror(o, [] { return stop_requested(); }, interval,
                                     [json](const MirrorStats& s) {
                                       log_always(json ? mirror_stats_json(s) : mirror_stats_text(s));
                                     });
    (void)end;
  } catch (const std::exception& e) {
    print_error(kProgram, e.what());
    return exit_failure;
  }
  return exit_ok;
}

int serve(const ServeArgs& a) {
  ServeOptions o;
  o.bus = a.bus;
  try {
    validate_name(a.bus);
    split_host_port(a.listen, "--listen", o.host, o.port);
    o.handshake_timeout = ms(a.handshake_timeout);
    o.idle_timeout = ms(a.idle_timeout);
    o.heartbeat = ms(a.heartbeat);
    o.trust = resolve_trust(a.trust);
  } catch (const std::exception& e) {
    print_error(kProgram, e.what());
    return exit_usage;
  }
  if (o.heartbeat.count() <= 0 || o.heartbeat >= o.idle_timeout) {
    print_error(kProgram, "--heartbeat must be positive and shorter than --idle-timeout");
    return exit_usage;
  }
  bool loopback = false;
  try {
    loopback = is_loopback(o.host);
  } catch (const std::invalid_argument& e) {
    print_error(kProgram, e.what());
    return exit_usage;
  }
  if (!loopback && a.token_file.empty()) {
    print_error(kProgram, fmt::format("--listen {}: not a loopback address; --token-file is required", o.host));
    return exit_usage;
  }
  if (!a.token_file.empty()) {
    try {
      o.token = read_token_file(a.token_file);
    } catch (const std::exception& e) {
      print_error(kProgram, e.what());
      return exit_failure;
    }
  }
  o.slow = a.slow == "skip" ? SlowPolicy::skip : a.slow == "block" ? SlowPolicy::block : SlowPolicy::disconnect;
  o.max_subscribers = a.max_subscribers;
  o.max_frame = a.max_frame;
  o.max_handshake = a.max_handshake;
  o.buffer_bytes = a.buffer;
  o.tls_cert = a.tls_cert;
  o.tls_key = a.tls_key;
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    print_error(kProgram, "--tls-cert and --tls-key go together");
    return exit_usage;
  }
  set_quiet(a.quiet);
  try {
    Server server(o);
    log_line(fmt::format("serving bus '{}' on {}:{} (--slow {}{})", a.bus, o.host, server.port(), a.slow,
                         o.tls_cert.empty() ? "" : ", TLS"));
    const auto interval = ms(a.stats_interval);
    const bool json = a.json;
    if (interval.count() > 0) {
      server.on_stats(interval, [json](const ServeStats& s) { log_line(json ? stats_json(s) : stats_text(s)); });
    }
    install_stop_handlers();
    server.run([] { return stop_requested(); });
    const ServeStats s = server.stats();
    log_line(json ? stats_json(s) : stats_text(s));
  } catch (const std::exception& e) {
    print_error(kProgram, e.what());
    return exit_failure;
  }
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbus-bridge: a shmbus bus over TCP (see bridge/PROTOCOL.md)"};
  add_version_flag(app, kProgram);
  app.require_subcommand(1);
  ServeArgs sa;
  auto* s = app.add_subcommand("serve", "Serve a local bus to TCP subscribers");
  s->add_option("BUS", sa.bus, "Bus to serve")->required();
  s->add_option("--listen", sa.listen, "HOST:PORT to listen on (non-loopback needs --token-file)")
      ->capture_default_str();
  s->add_option("--token-file", sa.token_file, "File holding the token subscribers must present");
  s->add_option("--slow", sa.slow, "A subscriber whose buffer is full: disconnect|skip|block")
      ->check(CLI::IsMember({"disconnect", "skip", "block"}))
      ->capture_default_str();
  s->add_option("--max-subscribers", sa.max_subscribers, "Connections at once")
      ->check(CLI::Range(1u, 100000u))->capture_default_str();
  s->add_option("--max-frame", sa.max_frame, "Largest batch frame body sent, bytes")
      ->check(CLI::Range(4096u, 1u << 28))->capture_default_str();
  s->add_option("--max-handshake", sa.max_handshake, "Largest hello accepted, bytes")
      ->check(CLI::Range(kHelloFixed + 1, kMaxHelloBody))->capture_default_str();
  s->add_option("--handshake-timeout", sa.handshake_timeout, "Time allowed for the hello")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--idle-timeout", sa.idle_timeout, "Close a subscriber silent this long")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--heartbeat", sa.heartbeat, "Heartbeat interval when idle")
      ->check(duration_validator())->capture_default_str();
  s->add_option("--buffer", sa.buffer, "Per-subscriber buffer, bytes")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 32))->capture_default_str();
  s->add_option("--stats-interval", sa.stats_interval, "Stats line period on stderr (0: off)")
      ->check(duration_validator())->capture_default_str();
  s->add_flag("--json", sa.json, "Stats lines as JSON");
  s->add_flag("--quiet", sa.quiet, "No per-connection log lines");
  s->add_option("--tls-cert", sa.tls_cert, "Serve TLS with this PEM certificate chain (needs --tls-key)");
  s->add_option("--tls-key", sa.tls_key, "PEM private key of --tls-cert");
  add_trust_options(*s, sa.trust);

  MirrorArgs ma;
  auto* m = app.add_subcommand(
      "mirror",
      "Republish a remote bus (served by shmbus-bridge serve) into a local bus with the same sequence "
      "numbers; reconnects with exponential backoff and resumes at the local bus's next sequence");
  m->add_option("--connect", ma.connect, "HOST:PORT of the serving bridge (numeric address)")->required();
  m->add_option("--remote-bus", ma.remote_bus, "Bus name on the serving side")->required();
  m->add_option("--bus", ma.bus, "Local bus (created with the remote's record size and policy if missing)")
      ->required();
  m->add_option("--from", ma.from,
                "Where a local bus that never carried a message starts: earliest, latest or a sequence "
                "(an existing one always resumes at its next sequence)")
      ->capture_default_str();
  m->add_option("--capacity", ma.capacity, "Records in the local ring when it is created")->capture_default_str();
  m->add_option("--max-readers", ma.max_readers, "Reader slots of the local bus when it is created")
      ->capture_default_str();
  m->add_option("--token-file", ma.token_file, "File holding the token to present");
  m->add_option("--tls-ca", ma.tls_ca, "Speak TLS; trust only a server certificate from this PEM CA");
  m->add_option("--backoff-max", ma.backoff_max, "Longest wait between reconnection attempts (from 100ms, doubling)")
      ->check(duration_validator())->capture_default_str();
  m->add_option("--stats-interval", ma.stats_interval, "Stats line period on stderr (0: off)")
      ->check(duration_validator())->capture_default_str();
  m->add_flag("--json", ma.json, "Stats lines as JSON");
  m->add_flag("--quiet", ma.quiet, "No per-connection log lines (gaps, stats and errors are still printed)");
  add_trust_options(*m, ma.trust);
  refuse_negative_numbers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli_exit(app, e, kProgram);
  }
  if (s->parsed()) return serve(sa);
  if (m->parsed()) return mirror(ma);
  return exit_usage;
}
