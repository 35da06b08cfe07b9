// shmbus-inspect metrics: Prometheus text exposition of the counters every
// bus keeps in its segment, read through shmbus::Inspector (read-only, no
// reader slot). With --listen, a small HTTP server (Boost.Beast, one
// thread, every connection asynchronous with its own deadlines) renders them
// afresh for every GET /metrics.
//
// Everything in a segment is untrusted: reader names are written by other
// processes, so label values are escaped and limited to printable ASCII.
#include "inspector/metrics.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>

#include "inspector/report.hpp"
#include "shmbus/inspect.hpp"
#include "tools/common/program.hpp"

namespace shmbus::inspect_tool {
namespace {

// A label value: printable ASCII, with \ " escaped; anything else becomes '?'.
std::string label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u > 0x7e) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

// One metric family: HELP and TYPE once, then its samples.
struct Family {
  const char* name;
  const char* type;  // "counter" or "gauge"
  const char* help;
  std::string samples;
};

class Writer {
 public:
  void sample(Family& f, const std::string& labels, double value) {
    const bool counter = std::string_view(f.type) == "counter";
    f.samples += fmt::format("{}{}{{{}}} {}\n", f.name, counter ? "_total" : "", labels, value);
  }
  static std::string render(const std::vector<Family*>& families) {
    std::string out;
    for (const Family* f : families) {
      if (f->samples.empty()) continue;
      const bool counter = std::string_view(f->type) == "counter";
      out += fmt::format("# HELP {}{} {}\n# TYPE {}{} {}\n", f->name, counter ? "_total" : "",
                         f->help, f->name, counter ? "_total" : "", f->type);
      out += f->samples;
    }
    return out;
  }
};

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

std::string render_metrics(const std::vector<std::string>& buses, const Trust& trust, MetricsMemory* memory) {
  Family up{"shmbus_bus_up", "gauge", "1 if the bus could be opened and validated, else 0", {}};
  Family capacity{"shmbus_bus_capacity_records", "gauge", "Records in the ring", {}};
  Family record_size{"shmbus_bus_record_size_bytes", "gauge", "Bytes per record, header included", {}};
  Family head{"shmbus_bus_head", "gauge", "Next sequence number the producer will publish", {}};
  Family oldest{"shmbus_bus_oldest", "gauge", "Oldest sequence number still retained", {}};
  Family published{"shmbus_messages_published", "counter", "Messages published", {}};
  Family waits{"shmbus_producer_waits", "counter", "Times the producer found the ring full", {}};
  Family wait_s{"shmbus_producer_wait_seconds", "counter",
                "Time the producer spent waiting for space, the wait in progress included", {}};
  Family waiting_s{"shmbus_producer_waiting_seconds", "gauge",
                   "How long the wait for space in progress has lasted, 0 if the producer is not waiting", {}};
  Family wakeups{"shmbus_wakeups", "counter", "Futex wake calls made (data and space)", {}};
  Family reclaimed{"shmbus_readers_reclaimed", "counter", "Dead reader slots reclaimed", {}};
  Family let_go{"shmbus_readers_let_go", "counter",
                "Readers the producer stopped waiting for after its hold limit", {}};
  Family max_hold{"shmbus_producer_max_hold_seconds", "gauge",
                  "The attached producer's hold limit, 0 if it has none", {}};
  Family last_pub{"shmbus_last_publish_timestamp_seconds", "gauge",
                  "CLOCK_REALTIME of the newest record, 0 if the producer does not stamp", {}};
  Family sleepers{"shmbus_data_sleepers", "gauge", "Consumers asleep waiting for data", {}};
  Family readers{"shmbus_readers", "gauge", "Reader slots in use", {}};
  Family prod_alive{"shmbus_producer_alive", "gauge",
                    "1 if a live process holds the producer role (stopped or not), else 0", {}};
  Family prod_state{"shmbus_producer_state", "gauge",
                    "1 for the producer role's state (alive, stopped, dead, unknown), 0 for the others", {}};
  Family prod_pid{"shmbus_producer_pid", "gauge",
                  "Pid of the producer role's holder, or of its last holder (in its own PID namespace)", {}};
  Family prod_waiting{"shmbus_producer_waiting_for_space", "gauge",
                      "1 if the producer is blocked on a full ring", {}};
  Family prod_closed{"shmbus_producer_closed", "gauge", "1 if end-of-stream was marked", {}};
  Family takeovers{"shmbus_producer_takeovers", "counter", "Producers that took the bus over", {}};
  Family r_cursor{"shmbus_reader_cursor", "gauge", "Next sequence number the reader will read", {}};
  Family r_lag{"shmbus_reader_lag_messages", "gauge", "Messages published but not yet read (head - cursor)", {}};
  Family r_delivered{"shmbus_reader_delivered", "counter", "Messages delivered to the reader", {}};
  Family r_lost{"shmbus_reader_lost", "counter", "Messages the reader lost (overwrite policy)", {}};
  Family r_alive{"shmbus_reader_alive", "gauge",
                 "1 if the reader's process is alive (holds its slot's lock; stopped or not); 0 if dead or "
                 "unknown", {}};
  Family r_state{"shmbus_reader_state", "gauge",
                 "1 for the reader's state (alive, stopped, dead, unknown), 0 for the others", {}};
  Family r_pid{"shmbus_reader_pid", "gauge", "Pid of the reader's process (in its own PID namespace)", {}};
  Family r_last{"shmbus_reader_last_active_timestamp_seconds", "gauge",
                "CLOCK_REALTIME of the reader's last batch or wait", {}};
  Family r_holds{"shmbus_reader_holds_producer", "gauge",
                 "1 if the reader holds a block bus's producer back, 0 if it does not (best-effort, let go, "
                 "or an overwrite bus)", {}};
  Family r_let_go{"shmbus_reader_let_go_timestamp_seconds", "gauge",
                  "CLOCK_REALTIME the producer let the reader go after its hold limit, 0 if never", {}};
  Family d_cursor{"shmbus_durable_cursor", "gauge", "Where the durable reader name resumes", {}};
  Family d_lag{"shmbus_durable_lag_messages", "gauge",
               "Messages published after the name's position (head - cursor)", {}};
  Family d_retained{"shmbus_durable_position_retained", "gauge",
                    "1 if the bus still holds the name's position, 0 if a resume would start with a loss", {}};
  Family d_gone{"shmbus_durable_gone_messages", "gauge",
                "Messages after the name's position the bus no longer holds (oldest - cursor), 0 if none", {}};
  Family d_held{"shmbus_durable_held", "gauge", "1 if a live reader holds the name now", {}};
  Family d_updated{"shmbus_durable_updated_timestamp_seconds", "gauge",
                   "CLOCK_REALTIME of the name holder's last attach or detach", {}};

  std::vector<std::pair<std::string, std::optional<Snapshot>>> found;
  if (buses.empty()) {
    for (ListEntry& e : list_buses(trust)) found.emplace_back(e.name, std::move(e.snapshot));
  } else {
    for (const std::string& name : buses) {
      std::optional<Snapshot> s;
      try {
        s = Inspector::open(name, trust).snapshot();
      } catch (const Error& e) {
        // Reported as down; the reason goes to stderr, the scrape goes on.
        tools::print_notice("shmbus-inspect", e.what());
      }
      found.emplace_back(name, std::move(s));
    }
  }

  const std::uint64_t now = tools::realtime_ns();
  MetricsMemory seen;
  Writer w;
  // One sample per state, 1 for the one that holds: the set of series stays
  // the same while the state changes.
  const auto states = [&](Family& f, const std::string& labels, std::string_view state) {
    for (const char* s : {"alive", "stopped", "dead", "unknown"}) {
      w.sample(f, fmt::format("{},state=\"{}\"", labels, s), state == s ? 1 : 0);
    }
  };
  for (const auto& [name, snap] : found) {
    const std::string bus = fmt::format("bus=\"{}\"", label(name));
    w.sample(up, bus, snap ? 1 : 0);
    if (!snap) continue;
    const Snapshot& s = *snap;
    // The same judgement as `show`: a live process in state T is stopped.
    const BusReport report = make_report(s, now);
    w.sample(capacity, bus, static_cast<double>(s.info.capacity));
    w.sample(record_size, bus, s.info.record_size);
    w.sample(head, bus, static_cast<double>(s.head));
    w.sample(oldest, bus, static_cast<double>(s.oldest));
    w.sample(published, bus, static_cast<double>(s.counters.published));
    w.sample(waits, bus, static_cast<double>(s.counters.producer_waits));
    // A wait in progress counts as it goes, so that rate() sees a live
    // stall. The library adds a wait to the counter when it ends; until
    // then it is now - the time it began (a live producer's only).
    const bool producer_alive = s.producer.attached && s.producer.liveness == Liveness::alive;
    const std::uint64_t ongoing_ns = producer_alive && s.producer.waiting_for_space &&
                                             s.producer.waiting_since_ns != 0 && now > s.producer.waiting_since_ns
                                         ? now - s.producer.waiting_since_ns
                                         : 0;
    double wait_total = seconds(s.counters.producer_wait_ns + ongoing_ns);
    // Never backwards between scrapes of one server (the ended wait is
    // measured on another clock than the one it began on), or a rate()
    // would read a counter reset.
    const std::string key = fmt::format("{}@{}", name, s.info.creation_time_ns);
    if (memory != nullptr) {
      if (const auto it = memory->wait_seconds.find(key); it != memory->wait_seconds.end()) {
        wait_total = std::max(wait_total, it->second);
      }
      seen.wait_seconds[key] = wait_total;
    }
    w.sample(wait_s, bus, wait_total);
    w.sample(waiting_s, bus, seconds(ongoing_ns));
    w.sample(wakeups, bus, static_cast<double>(s.counters.wakeups));
    w.sample(reclaimed, bus, static_cast<double>(s.counters.readers_reclaimed));
    w.sample(let_go, bus, static_cast<double>(s.counters.readers_let_go));
    w.sample(max_hold, bus, seconds(s.producer.max_hold_ns));
    w.sample(last_pub, bus, seconds(s.last_publish_ns));
    w.sample(sleepers, bus, s.counters.data_sleepers);
    w.sample(readers, bus, static_cast<double>(s.readers.size()));
    w.sample(prod_alive, bus, producer_alive ? 1 : 0);
    states(prod_state, bus, report.producer_stopped ? "stopped" : to_string(s.producer.liveness));
    w.sample(prod_pid, bus, s.producer.pid);
    w.sample(prod_waiting, bus, s.producer.waiting_for_space ? 1 : 0);
    w.sample(prod_closed, bus, s.producer.closed ? 1 : 0);
    w.sample(takeovers, bus, s.producer.takeovers);
    for (const ReaderReport& rr : report.readers) {
      const ReaderView& r = rr.view;
      // Slot and name only: a restarted reader continues its series.
      const std::string l = fmt::format("{},slot=\"{}\",name=\"{}\"", bus, r.slot, label(r.name));
      w.sample(r_cursor, l, static_cast<double>(r.cursor));
      w.sample(r_lag, l, static_cast<double>(rr.lag));
      w.sample(r_delivered, l, static_cast<double>(r.delivered));
      w.sample(r_lost, l, static_cast<double>(r.lost));
      w.sample(r_alive, l, rr.alive ? 1 : 0);
      states(r_state, l, rr.stopped ? "stopped" : to_string(r.liveness));
      w.sample(r_pid, l, r.pid);
      w.sample(r_last, l, seconds(r.last_active_ns));
      w.sample(r_holds, l, s.info.policy == Policy::block && !r.best_effort ? 1 : 0);
      w.sample(r_let_go, l, seconds(r.let_go_ns));
    }
    for (const BookmarkView& b : s.bookmarks) {
      const std::string l = fmt::format("{},name=\"{}\"", bus, label(b.name));
      const std::uint64_t cursor = std::min(b.cursor, s.head);  // untrusted: never past the head
      w.sample(d_cursor, l, static_cast<double>(b.cursor));
      w.sample(d_lag, l, static_cast<double>(s.head - cursor));
      w.sample(d_retained, l, cursor >= s.oldest ? 1 : 0);
      w.sample(d_gone, l, static_cast<double>(cursor < s.oldest ? s.oldest - cursor : 0));
      w.sample(d_held, l, b.held ? 1 : 0);
      w.sample(d_updated, l, seconds(b.updated_ns));
    }
  }
  if (memory != nullptr) *memory = std::move(seen);  // forgets buses that are gone
  return Writer::render({&up,        &capacity,   &record_size, &head,         &oldest,      &published,
                         &waits,     &wait_s,     &waiting_s,   &wakeups,      &reclaimed,   &let_go,
                         &max_hold,  &last_pub,   &sleepers,    &readers,      &prod_alive,  &prod_state,
                         &prod_pid,  &prod_waiting, &prod_closed, &takeovers,  &r_cursor,    &r_lag,
                         &r_delivered, &r_lost,   &r_alive,     &r_state,      &r_pid,       &r_last,
                         &r_holds,   &r_let_go,   &d_cursor,    &d_lag,        &d_retained,  &d_gone,
                         &d_held,    &d_updated});
}

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// "HOST:PORT" (HOST an IPv4 address, or [IPv6]).
tcp::endpoint parse_listen(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    throw std::invalid_argument("--listen wants HOST:PORT, e.g. 127.0.0.1:9464, not '" + s + "'");
  }
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1) throw std::invalid_argument("port");
  } catch (const std::exception&) {
    throw std::invalid_argument("--listen: not a port number in '" + s + "'");
  }
  if (port > 65535) throw std::invalid_argument("--listen: port out of range in '" + s + "'");
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  if (ec) throw std::invalid_argument("--listen: not an IP address: '" + host + "'");
  return {addr, static_cast<unsigned short>(port)};
}

// Deadlines of one connection: the whole request, however slowly it comes
// (a client that dribbles a header byte every few seconds is dropped at
// it), and the whole response.
constexpr std::chrono::seconds kRequestDeadline{5};
constexpr std::chrono::seconds kResponseDeadline{10};
// Connections at once; one more is closed at once (a flood of idle
// connections costs at most this many sockets and buffers).
constexpr std::size_t kMaxConnections = 64;

struct Server {
  std::vector<std::string> buses;
  Trust trust;
  MetricsMemory memory;
  std::size_t connections = 0;
  std::uint64_t served = 0;
};

// One connection: read a request, answer it, close. Every step is
// asynchronous on the server's one thread, so a slow client waits alone.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server& server) : stream_(std::move(socket)), server_(server) {
    ++server_.connections;
  }
  ~Session() { --server_.connections; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    parser_.header_limit(8192);
    parser_.body_limit(0);
    stream_.expires_after(kRequestDeadline);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec) return close();  // timed out, malformed, too large, or gone
    const auto& req = parser_.get();
    res_.version(req.version());
    res_.keep_alive(false);
    res_.set(http::field::server, "shmbus-inspect");
    const auto target = req.target();
    const bool known = target == "/metrics" || target == "/";
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res_.result(http::status::method_not_allowed);
      res_.set(http::field::allow, "GET, HEAD");
      res_.body() = "only GET\n";
    } else if (!known) {
      res_.result(http::status::not_found);
      res_.body() = "shmbus-inspect serves /metrics\n";
    } else {
      res_.result(http::status::ok);
      res_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      try {
        res_.body() = render_metrics(server_.buses, server_.trust, &server_.memory);
      } catch (const std::exception& e) {
        res_.result(http::status::internal_server_error);
        res_.body() = std::string(e.what()) + "\n";
      }
    }
    res_.prepare_payload();
    serializer_.emplace(res_);
    stream_.expires_after(kResponseDeadline);
    const auto done = [self = shared_from_this()](beast::error_code wec, std::size_t) {
      if (!wec) ++self->server_.served;
      self->close();
    };
    if (req.method() == http::verb::head) {
      http::async_write_header(stream_, *serializer_, done);
    } else {
      http::async_write(stream_, *serializer_, done);
    }
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  Server& server_;
  beast::flat_buffer buffer_{16384};
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> res_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
};

void accept_next(tcp::acceptor& acceptor, Server& server) {
  acceptor.async_accept([&acceptor, &server](beast::error_code ec, tcp::socket socket) {
    if (ec == boost::asio::error::operation_aborted) return;  // stopping
    if (!ec) {
      if (server.connections >= kMaxConnections) {
        socket.close(ec);
      } else {
        std::make_shared<Session>(std::move(socket), server)->start();
      }
    }
    // A failed accept (out of descriptors, a connection reset before it was
    // taken) drops that one connection; the server goes on.
    accept_next(acceptor, server);
  });
}

}  // namespace

int run_metrics(const MetricsArgs& args, const Trust& trust) {
  if (args.listen.empty()) {
    const std::string text = render_metrics(args.buses, trust);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  const tcp::endpoint ep = parse_listen(args.listen);
  Server server{args.buses, trust, {}, 0, 0};  // outlives the sessions io still owns when it stops
  boost::asio::io_context io;
  // Before the address is printed: a script that reads it and sends
  // SIGTERM at once still gets a clean stop.
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  tcp::acceptor acceptor(io);
  boost::system::error_code ec;
  // Every step names the address: a port in use fails at bind, or at
  // listen when another socket took it in between.
  const auto check = [&](const char* step) {
    if (!ec) return;
    throw std::runtime_error(fmt::format("--listen {}: cannot {}: {}{}", args.listen, step, ec.message(),
                                         ec == boost::asio::error::address_in_use
                                             ? " (another program listens there; choose another port)"
                                             : ""));
  };
  acceptor.open(ep.protocol(), ec);
  check("open a socket");
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  check("set SO_REUSEADDR");
  acceptor.bind(ep, ec);
  check("bind");
  acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  check("listen");
  const tcp::endpoint bound = acceptor.local_endpoint();
  // The real port (useful with port 0), so a script can find the server.
  std::fprintf(stderr, "shmbus-inspect: serving metrics on http://%s/metrics\n",
               (bound.address().is_v6() ? "[" + bound.address().to_string() + "]"
                                        : bound.address().to_string())
                   .append(":" + std::to_string(bound.port()))
                   .c_str());
  std::fflush(stderr);

  signals.async_wait([&](beast::error_code, int) {
    acceptor.close();
    io.stop();
  });
  accept_next(acceptor, server);
  io.run();
  std::fprintf(stderr, "shmbus-inspect: metrics server stopped after %llu requests\n",
               static_cast<unsigned long long>(server.served));
  return 0;
}

}  // namespace shmbus::inspect_tool
