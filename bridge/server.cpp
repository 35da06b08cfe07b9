#include "bridge/server.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <fmt/format.h>
#include <shmbus/consumer.hpp>

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/sockios.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <list>
#include <unordered_map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bridge/local_peer.hpp"
#include "bridge/log.hpp"
#include "bridge/protocol.hpp"

namespace shmbus::bridge {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// Counters shared by the io thread and the reader threads; relaxed: they are
// only summed for reports and publish nothing else.
struct Counters {
  std::atomic<std::uint64_t> subscribers{0}, accepted{0}, messages{0}, bytes{0}, dropped{0},
      closed_slow{0}, closed_idle{0}, closed_protocol{0}, closed_handshake{0}, closed_refused{0},
      closed_peer{0}, closed_end{0}, closed_tls{0};
  // Bytes encoded for subscribers and not yet handed to their sockets: each
  // session adds the change of its own share (Session::count_pending,
  // count_sending), with wrap-around arithmetic.
  std::atomic<std::uint64_t> queued{0};
};

void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace

struct Session;

// Wrong tokens per address (io thread only): the back-off of
// ServeOptions::token_backoff_*. Bounded: the least recently failed address
// is forgotten first.
class TokenBackoff {
 public:
  explicit TokenBackoff(const ServeOptions& o) : opt_(o) {}

  // When `key`'s next handshake may be answered (a past time if now).
  Clock::time_point answer_after(const std::string& key, Clock::time_point now) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) return {};
    if (now - it->second.last >= opt_.token_backoff_forget) {
      order_.erase(it->second.where);
      entries_.erase(it);
      return {};
    }
    return it->second.until;
  }

  // A wrong token from `key` now; returns the delay its next handshake waits.
  std::chrono::milliseconds failed(const std::string& key, Clock::time_point now) {
    auto [it, fresh] = entries_.try_emplace(key);
    Entry& e = it->second;
    if (!fresh) {
      order_.erase(e.where);
      if (now - e.last >= opt_.token_backoff_forget) e.failures = 0;
    }
    order_.push_back(key);
    e.where = std::prev(order_.end());
    if (fresh && entries_.size() > std::max<std::uint32_t>(opt_.token_backoff_addresses, 1)) {
      entries_.erase(order_.front());
      order_.pop_front();
    }
    e.failures = std::min<std::uint32_t>(e.failures + 1, 32);
    e.last = now;
    auto delay = opt_.token_backoff_min;
    for (std::uint32_t i = 1; i < e.failures && delay < opt_.token_backoff_max; ++i) delay *= 2;
    delay = std::min(delay, opt_.token_backoff_max);
    e.until = now + delay;
    return delay;
  }

  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::uint32_t failures = 0;
    Clock::time_point last{}, until{};
    std::list<std::string>::iterator where;  // in order_
  };
  const ServeOptions& opt_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // least recently failed first
};

struct Server::Impl {
  ServeOptions opt;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::unique_ptr<asio::ssl::context> tls;  // set when serving TLS
  asio::steady_timer tick{io};
  std::list<std::shared_ptr<Session>> sessions;  // io thread only
  std::list<std::shared_ptr<Session>> zombies;   // closed, reader thread not yet joined
  std::function<bool()> should_stop;
  std::function<void(const ServeStats&)> stats_fn;
  std::chrono::milliseconds stats_interval{0};
  Clock::time_point next_stats{};
  Counters counters;
  bool stopping = false;
  // Connections that are not subscribers yet, oldest first, and how many
  // from each address (io thread only).
  std::list<Session*> handshaking;
  std::unordered_map<std::string, std::uint32_t> handshakes_from;
  TokenBackoff backoff{opt};
  // Connections closed for the handshake budget: logged at most once a second.
  Clock::time_point budget_logged{};
  std::uint64_t budget_unlogged = 0;

  void accept();
  void enforce_handshake_budget(const std::string& key);
  void on_tick();
  void shutdown();
  void remove(const std::shared_ptr<Session>& s);
  void reap(bool wait);
  ServeStats snapshot() const;
};

// The reader slot's name, "tcp:IP:PORT", within the reader table's 31 bytes:
// a long IPv6 address keeps its head and tail around a '~' and the port whole
// ("tcp:2001:db8:12~ae:7334:51234"), so the slot still says who it is.
std::string slot_name(const std::string& ip, std::uint16_t port) {
  constexpr std::size_t kMax = 31;
  const std::string tail = fmt::format(":{}", port);
  if (4 + ip.size() + tail.size() <= kMax) return "tcp:" + ip + tail;
  const std::size_t room = kMax - 4 - tail.size() - 1;  // for the address, beside the '~'
  const std::size_t head = room - room / 2;
  return "tcp:" + ip.substr(0, head) + "~" + ip.substr(ip.size() - room / 2) + tail;
}

namespace {

std::string peer_slot_name(tcp::socket& sock) {
  boost::system::error_code ec;
  const auto ep = sock.remote_endpoint(ec);
  return ec ? std::string("tcp:?") : shmbus::bridge::slot_name(ep.address().to_string(), ep.port());
}

// The address a peer is counted under for the handshake budget and the
// token back-off: an IPv4 address (v4-mapped ones too), or an IPv6 /64,
// the block one host is usually given.
std::string address_key(const asio::ip::address& a) {
  if (a.is_v4()) return a.to_string();
  const auto v6 = a.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string();
  auto bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

}  // namespace

// One TCP subscriber.
struct Session : std::enable_shared_from_this<Session> {
  enum class State { handshake, streaming, closing, closed };

  Server::Impl& srv;
  tcp::socket sock;  // plain TCP; moved into `tls` when serving TLS
  std::optional<asio::ssl::stream<tcp::socket>> tls;
  bool tls_ready = false;  // the TLS handshake finished: frames may be written
  std::string peer;  // "tcp:IP:PORT"
  std::string addr_key;  // address_key() of the peer
  // In srv.handshaking until it becomes a subscriber or is closed.
  bool in_handshake_budget = false;
  std::list<Session*>::iterator budget_at;
  // Handshake deadline, then idle deadline, then the closing watch.
  asio::steady_timer timer;
  asio::steady_timer hold;  // a complete hello waiting out its address's token back-off
  bool held = false;
  State state = State::handshake;
  std::array<std::byte, kFrameHeaderSize> in_header{};
  std::vector<std::byte> in_body;
  Clock::time_point last_received = Clock::now();

  // Shared with the reader thread under `m`.
  std::mutex m;
  std::condition_variable space;     // the io thread freed buffer space, or closed
  std::vector<std::byte> pending;    // frames waiting for the socket
  bool kick_posted = false;          // a write is (or will be) started for `pending`
  bool writing = false;
  bool stop_reader = false;
  bool finish_after_flush = false;   // close once everything pending is written
  enum class End { none, eos, slow } end_kind = End::none;  // why the reader stopped
  std::uint64_t end_seq = 0;         // with End::slow: where the subscriber resumes
  // The next_seq of an error frame: where the subscriber resumes. Before
  // welcome the hello's start_seq (the nearest retained sequence for
  // not-retained); then the first sequence not queued for it.
  std::uint64_t resume_seq = 0;
  std::atomic<bool> reader_done{false};
  std::thread reader_thread;         // joined by the server once reader_done

  // io thread only: the buffer being written and how much of it is.
  std::vector<std::byte> sending;
  std::size_t sending_off = 0;
  // This session's share of Counters::queued: `pending` (under `m`) and
  // what is left of `sending` (io thread).
  std::uint64_t counted_pending = 0;
  std::uint64_t counted_sending = 0;
  std::uint64_t written = 0;  // bytes handed to the socket so far
  // io thread only, while closing: everything queued is in the socket and a
  // FIN follows it; the current window of the progress watch (its start,
  // bytes the peer had taken, bytes left then).
  bool fin_sent = false;
  Clock::time_point window_start{};
  std::uint64_t window_taken = 0;
  std::uint64_t window_left = 0;

  Session(Server::Impl& s, tcp::socket socket)
      : srv(s), sock(std::move(socket)), timer(s.io), hold(s.io) {
    boost::system::error_code ec;
    const auto ep = sock.remote_endpoint(ec);
    peer = ec ? std::string("tcp:?") : fmt::format("tcp:{}:{}", ep.address().to_string(), ep.port());
    addr_key = ec ? std::string("?") : address_key(ep.address());
    if (srv.tls) tls.emplace(std::move(sock), *srv.tls);
  }

  ~Session() { srv.counters.queued.fetch_sub(counted_pending + counted_sending, std::memory_order_relaxed); }

  // Under `m`: Counters::queued follows pending's size.
  void count_pending() noexcept {
    srv.counters.queued.fetch_add(pending.size() - counted_pending, std::memory_order_relaxed);
    counted_pending = pending.size();
  }

  // io thread: Counters::queued follows what is left of `sending`.
  void count_sending() noexcept {
    const std::uint64_t left = sending.size() - sending_off;
    srv.counters.queued.fetch_add(left - counted_sending, std::memory_order_relaxed);
    counted_sending = left;
  }

  // Counts against the handshake budget from now on.
  void enter_handshake_budget() {
    srv.handshaking.push_back(this);
    budget_at = std::prev(srv.handshaking.end());
    in_handshake_budget = true;
    ++srv.handshakes_from[addr_key];
  }

  // A subscriber now, or closed: no longer in the handshake budget.
  void leave_handshake_budget() {
    if (!in_handshake_budget) return;
    in_handshake_budget = false;
    srv.handshaking.erase(budget_at);
    const auto it = srv.handshakes_from.find(addr_key);
    if (it != srv.handshakes_from.end() && --it->second == 0) srv.handshakes_from.erase(it);
  }

  tcp::socket& socket() { return tls ? tls->next_layer() : sock; }

  // Runs f(stream) on the TLS stream or the plain socket.
  template <class F>
  void with_stream(F&& f) {
    if (tls) {
      f(*tls);
    } else {
      f(sock);
    }
  }

  void start() {
    boost::system::error_code ignored;
    socket().set_option(tcp::no_delay(true), ignored);
    arm_timer(srv.opt.handshake_timeout, "handshake not finished in time", ErrorCode::timeout,
              &srv.counters.closed_handshake);
    if (!tls) return channel_up();
    tls->async_handshake(asio::ssl::stream_base::server,
                         [self = shared_from_this()](boost::system::error_code ec) {
                           if (self->state == State::closed) return;
                           if (ec) return self->tls_failed(ec);
                           self->tls_ready = true;
                           self->channel_up();
                         });
  }

  void channel_up() { read_header(); }

  // Over the handshake budget: closed at once, with a best-effort error
  // frame on a plain connection (one non-blocking send; never waited for).
  void evict(const std::string& reason) {
    if (state == State::closed) return;
    if (!tls && state == State::handshake) {
      std::vector<std::byte> f;
      append_error(f, ErrorCode::too_many, resume_seq_unlocked(), reason);
      (void)::send(sock.native_handle(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    bump(srv.counters.closed_refused);
    close_now();
  }

  std::uint64_t resume_seq_unlocked() {
    std::lock_guard lk(m);
    return resume_seq;
  }

  // Nothing can be said to a peer whose TLS handshake failed: log and close.
  void tls_failed(boost::system::error_code ec) {
    std::string why = ec.message();
    if (ec.category() == asio::error::get_ssl_category()) {
      const char* r = ERR_reason_error_string(ec.value());
      if (r) why = r;
    }
    log_line(fmt::format("{}: closed: tls: TLS handshake failed: {}", peer, why));
    bump(srv.counters.closed_tls);
    close_now();
  }

  void arm_timer(std::chrono::milliseconds d, const char* reason, ErrorCode code,
                 std::atomic<std::uint64_t>* counter) {
    timer.expires_after(d);
    timer.async_wait([self = shared_from_this(), reason, code, counter](boost::system::error_code ec) {
      if (ec || self->state == State::closed) return;
      if (code == ErrorCode::idle && Clock::now() - self->last_received < self->srv.opt.idle_timeout) {
        self->arm_idle();
        return;
      }
      self->fail(code, reason, counter);
    });
  }

  void arm_idle() {
    const auto left = srv.opt.idle_timeout -
                      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_received);
    arm_timer(std::max(left, std::chrono::milliseconds(1)), "nothing received within the idle timeout",
              ErrorCode::idle, &srv.counters.closed_idle);
  }

  std::uint32_t max_in_body() const {
    return state == State::handshake ? srv.opt.max_handshake : kSeqSize;
  }

  void read_header() {
    with_stream([&](auto& st) {
      asio::async_read(st, asio::buffer(in_header),
                       [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                         self->on_header(ec);
                       });
    });
  }

  // While closing: whatever the peer still sends is read and dropped, so that
  // closing the socket does not reset the connection and discard the error
  // frame we queued for it.
  void drain() {
    with_stream([&](auto& st) {
      st.async_read_some(asio::buffer(in_header),
                         [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                           if (self->state == State::closed) return;
                           if (ec == asio::error::eof) {
                             // The peer closed its side. It may still be reading:
                             // the closing watch says when it has everything.
                             return self->close_if_taken();
                           }
                           if (ec) return self->close_now();
                           self->drain();
                         });
    });
  }

  void on_header(boost::system::error_code ec) {
    if (state == State::closed) return;
    if (ec) return peer_gone(ec);
    if (state == State::closing) return drain();
    last_received = Clock::now();
    // The type first: a known frame a client may not send now is named as
    // such, not as "too long" for the body its state allows.
    const FrameType want = state == State::handshake ? FrameType::hello : FrameType::heartbeat;
    if (const auto type = static_cast<unsigned>(in_header[4]);
        type >= static_cast<unsigned>(FrameType::hello) && type <= static_cast<unsigned>(FrameType::heartbeat) &&
        type != static_cast<unsigned>(want)) {
      static constexpr const char* kNames[] = {"",         "a hello", "a welcome", "an error",
                                               "a batch",  "a loss",  "an end",    "a heartbeat"};
      return fail(ErrorCode::bad_request,
                  state == State::handshake
                      ? fmt::format("{} frame before hello: a client sends hello first", kNames[type])
                      : fmt::format("{} frame after welcome: a client may send only heartbeat", kNames[type]),
                  &srv.counters.closed_protocol);
    }
    FrameHeader h;
    const DecodeStatus s = parse_header(in_header, max_in_body(), h);
    if (s != DecodeStatus::ok) {
      return fail(ErrorCode::bad_request, fmt::format("{} (length {} type {})", to_string(s),
                                                      static_cast<std::uint32_t>(in_header[0]) |
                                                          static_cast<std::uint32_t>(in_header[1]) << 8 |
                                                          static_cast<std::uint32_t>(in_header[2]) << 16 |
                                                          static_cast<std::uint32_t>(in_header[3]) << 24,
                                                      static_cast<unsigned>(in_header[4])),
                  &srv.counters.closed_protocol);
    }
    if (h.type != want) {
      return fail(ErrorCode::bad_request,
                  fmt::format("unexpected frame type {}", static_cast<unsigned>(h.type)),
                  &srv.counters.closed_protocol);
    }
    in_body.resize(h.length);
    with_stream([&](auto& st) {
      asio::async_read(st, asio::buffer(in_body),
                       [self = shared_from_this()](boost::system::error_code e, std::size_t) {
                         self->on_body(e);
                       });
    });
  }

  void on_body(boost::system::error_code ec) {
    if (state == State::closed) return;
    if (ec) return peer_gone(ec);
    if (state == State::closing) return drain();
    last_received = Clock::now();
    if (state == State::handshake) {
      // The hello is whole: the handshake deadline has done its job. An
      // address that sent a wrong token recently waits out its back-off
      // before anything is answered (a right token too: an answer that came
      // sooner would tell which guess was right).
      timer.cancel();
      return answer_hello();
    }
    std::uint64_t seq = 0;
    if (const DecodeStatus s = decode_seq(in_body, seq); s != DecodeStatus::ok) {
      return fail(ErrorCode::bad_request, fmt::format("heartbeat: {}", to_string(s)),
                  &srv.counters.closed_protocol);
    }
    read_header();
  }

  void answer_hello() {
    if (state != State::handshake) return;
    const auto now = Clock::now();
    const auto after = srv.backoff.answer_after(addr_key, now);
    if (after <= now) return on_hello();
    if (!held) {
      held = true;
      watch_held_peer();
    }
    hold.expires_at(after);
    hold.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->answer_hello();  // looks again: another wrong token may have moved it
    });
  }

  // A held hello whose peer gives up (closes) is dropped unanswered: it
  // neither waits its turn nor counts as another wrong token.
  void watch_held_peer() {
    socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->state != State::handshake) return;
      char c;
      const ssize_t n = ::recv(self->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0) return self->peer_gone(asio::error::eof);
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return self->peer_gone(asio::error::connection_reset);
      // Bytes after the hello: the peer is there; they are read after welcome.
    });
  }

  // The local peer's user may read the bus's segment, or the peer is on
  // another host. Returns the refusal's text otherwise.
  std::optional<std::string> local_peer_refusal() {
    const PeerOwner who = peer_owner(socket().native_handle());
    if (who.where == PeerOwner::Where::remote) return std::nullopt;
    if (who.where == PeerOwner::Where::refused) return fmt::format("local peer refused: {}", who.why);
    const std::string path = segment_path(srv.opt.bus);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return std::nullopt;  // no bus: opening it says so
    if (may_read(who.uid, st)) return std::nullopt;
    return fmt::format("local peer {} may not read bus '{}' (owner {}, mode {:04o})", describe_uid(who.uid),
                       srv.opt.bus, describe_uid(st.st_uid), st.st_mode & 07777);
  }

  void on_hello() {
    Hello h;
    const DecodeStatus s = decode_hello(in_body, h);
    if (s == DecodeStatus::bad_version) {
      return fail(ErrorCode::bad_version,
                  fmt::format("protocol version {} not supported (this server speaks {})", h.version,
                              kProtocolVersion),
                  &srv.counters.closed_handshake);
    }
    if (s != DecodeStatus::ok) {
      return fail(ErrorCode::bad_request, fmt::format("hello: {}", to_string(s)),
                  &srv.counters.closed_protocol);
    }
    {
      std::lock_guard lk(m);
      resume_seq = h.start_seq;  // every refusal of a decoded hello says where it asked to start
    }
    if (srv.opt.token && !constant_time_equal(h.token, *srv.opt.token)) {
      const auto delay = srv.backoff.failed(addr_key, Clock::now());
      return fail(ErrorCode::bad_token,
                  fmt::format("{}; the next handshake from {} is answered after {} ms",
                              h.token.empty() ? "a token is required" : "wrong token", addr_key, delay.count()),
                  &srv.counters.closed_handshake);
    }
    if (h.bus != srv.opt.bus) {
      return fail(ErrorCode::unknown_bus, fmt::format("bus '{}' is not served here", h.bus),
                  &srv.counters.closed_handshake);
    }
    if (auto refusal = local_peer_refusal()) {
      return fail(ErrorCode::forbidden, *refusal, &srv.counters.closed_handshake);
    }
    // Relaxed: only the io thread (this one) changes the gauge, so the load is exact.
    if (srv.counters.subscribers.load(std::memory_order_relaxed) >= srv.opt.max_subscribers) {
      return fail(ErrorCode::too_many, fmt::format("subscriber limit {} reached", srv.opt.max_subscribers),
                  &srv.counters.closed_refused);
    }
    ConsumerOptions co;
    co.name = peer_slot_name(socket());
    co.start = h.start == StartKind::earliest ? Start::earliest
               : h.start == StartKind::latest ? Start::latest
                                              : Start::sequence;
    co.start_seq = h.start_seq;
    // The ring is the subscriber's buffer: only under --slow block may a
    // subscriber hold the bus's producer back.
    co.hold_producer = srv.opt.slow == SlowPolicy::block;
    std::unique_ptr<Consumer> consumer;
    Welcome w;
    try {
      OpenOptions oo;
      oo.trust = srv.opt.trust;
      Bus bus = Bus::open(srv.opt.bus, oo);
      try {
        consumer = std::make_unique<Consumer>(bus, co);
      } catch (const Error& e) {
        // Where the stream can go on: the oldest retained sequence for a
        // start that is gone, the newest for one that is not there yet.
        if (e.errc() == Errc::not_retained) {
          std::lock_guard lk(m);
          resume_seq = co.start_seq < bus.oldest() ? bus.oldest() : bus.head();
        }
        throw;
      }
      w.policy = static_cast<std::uint32_t>(bus.info().policy);
      w.record_size = bus.info().record_size;
      w.max_message = bus.info().max_message;
    } catch (const Error& e) {
      const ErrorCode code = e.errc() == Errc::not_found      ? ErrorCode::unknown_bus
                             : e.errc() == Errc::not_retained ? ErrorCode::not_retained
                                                              : ErrorCode::internal;
      return fail(code, e.what(), &srv.counters.closed_handshake);
    }
    w.heartbeat_ms = static_cast<std::uint32_t>(srv.opt.heartbeat.count());
    // One message of the bus's longest always fits in a batch (max_message
    // is at most 1 GiB: the sum fits a u32).
    w.max_frame = std::max<std::uint32_t>(srv.opt.max_frame, kBatchFixed + kMessageHeader + w.max_message);
    w.first_seq = consumer->cursor();
    {
      std::lock_guard lk(m);
      append_welcome(pending, w);
      count_pending();
      resume_seq = w.first_seq;
    }
    state = State::streaming;
    leave_handshake_budget();
    bump(srv.counters.subscribers);
    log_line(fmt::format("{}: subscribed to '{}' from seq {}", peer, srv.opt.bus, w.first_seq));
    kick();
    arm_idle();
    read_header();
    reader_thread = std::thread([self = shared_from_this(), c = std::move(consumer), w]() mutable {
      self->reader(*c, w);
      c.reset();  // releases the reader slot before the thread says it is done
      self->reader_done.store(true, std::memory_order_release);  // pairs with the acquire in reap()
    });
  }

  // A loss frame for the subscriber, counted in `dropped`. Under `m`.
  void told_lost(const Loss& l) {
    append_loss(pending, l);
    bump(srv.counters.dropped, l.count);
  }

  // Runs on the reader thread: bus -> pending frames.
  void reader(Consumer& c, const Welcome& w) {
    std::vector<Message> batch(srv.opt.batch_messages);
    std::uint64_t next = w.first_seq;  // next sequence the subscriber should get
    std::uint64_t owed = 0;            // lost by the reads, not yet in a loss frame
    Clock::time_point last_sent = Clock::now();
    BatchBuilder builder;
    const std::size_t limit = srv.opt.buffer_bytes;
    const std::uint32_t max_body = w.max_frame;
    while (true) {
      PollResult r;
      // Wakes for the heartbeat when it is due (and at least every 100 ms,
      // to see stop_reader), so the period is the one welcome announced.
      const auto since = Clock::now() - last_sent;
      const std::chrono::nanoseconds until_beat =
          since >= srv.opt.heartbeat ? std::chrono::nanoseconds::zero()
                                     : std::chrono::duration_cast<std::chrono::nanoseconds>(srv.opt.heartbeat - since);
      const auto got = c.read_batch(batch, r, std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(100), until_beat));
      std::unique_lock lk(m);
      if (stop_reader) return;
      const std::size_t need = got.size() * kMessageHeader + [&] {
        std::size_t n = 0;
        for (const Message& msg : got) n += msg.payload.size();
        return n;
      }();
      if (!got.empty() && !pending.empty() && pending.size() + need > limit) {
        if (srv.opt.slow == SlowPolicy::block) {
          // Not consuming: the views stay valid and the bus's producer waits for this slot.
          space.wait(lk, [&] { return stop_reader || pending.size() + need <= limit || pending.empty(); });
          if (stop_reader) return;
        } else {
          // The socket is full: stop reading the bus for this subscriber
          // (its reader does not hold the producer) until there is room, or
          // until the producer laps it and it has really lost messages.
          const Bus& bus = c.bus();
          const std::uint64_t cap = bus.info().capacity;
          bool lapped = false;
          while (!stop_reader && pending.size() + need > limit && !pending.empty()) {
            space.wait_for(lk, std::chrono::milliseconds(50));
            // The batch in hand is a copy (a best-effort reader's own
            // buffer); what follows it is gone once head is a ring past it.
            if (bus.head() >= c.cursor() + cap) {
              lapped = true;
              break;
            }
          }
          if (stop_reader) return;
          if (lapped && srv.opt.slow == SlowPolicy::disconnect) {
            // Everything queued is sent first, then the error: the
            // subscriber resumes at `next` with nothing missing in between.
            append_error(pending, ErrorCode::slow, next,
                         fmt::format("subscriber too slow: the bus went a whole ring ({} messages) past it; "
                                     "resume at seq {}",
                                     cap, next));
            finish_after_flush = true;
            stop_reader = true;
            end_kind = End::slow;
            end_seq = next;
            count_pending();
            lk.unlock();
            // A stalled peer never takes the error frame: begin_closing bounds the wait.
            asio::post(srv.io, [self = shared_from_this()] { self->slow_close(); });
            return;
          }
          if (lapped) {
            // --slow skip: the batch in hand goes too; the reads that
            // follow report what the producer overwrote, and the loss
            // frame (counted in `dropped`) goes out with the next batch, or
            // at once if none comes.
            owed += c.cursor() - next;  // the batch dropped: lost to the subscriber
            continue;  // `next` stays: the next frame queued starts with a loss frame
          }
        }
      }
      owed += r.lost;
      if (!got.empty()) {
        // Sequences count records: a message takes msg.records of them. The
        // consumer tells a loss before the first message after it, and it
        // covers everything from the message before (shmbus/placement.hpp):
        // a jump before the first message after a loss is that loss (a loss
        // frame), any other jump is the padding a bus puts before a message
        // that spans records, and goes by silently.
        builder.begin(pending);
        for (const Message& msg : got) {
          if (msg.seq > next && owed > 0) {
            builder.finish(pending);
            told_lost(Loss{next, msg.seq - next});
            owed = 0;
            builder.begin(pending);
          }
          if (builder.body_size(pending) + kMessageHeader + msg.payload.size() > max_body) {
            builder.finish(pending);
            builder.begin(pending);
          }
          builder.add(pending, msg.seq, msg.timestamp_ns, msg.payload, msg.records);
          next = msg.seq + msg.records;
        }
        builder.finish(pending);
        resume_seq = next;
        bump(srv.counters.messages, got.size());
        last_sent = Clock::now();
      } else if (owed > 0 && c.cursor() > next) {
        told_lost(Loss{next, c.cursor() - next});
        owed = 0;
        next = c.cursor();
        resume_seq = next;
      }
      if (r.end_of_stream) {
        // Padding crossed at the end (its message never came) lost nothing.
        if (c.cursor() > next && owed > 0) told_lost(Loss{next, c.cursor() - next});
        append_seq_frame(pending, FrameType::end, c.cursor());
        finish_after_flush = true;
        stop_reader = true;
        end_kind = End::eos;
      } else if (got.empty() && Clock::now() - last_sent >= srv.opt.heartbeat) {
        append_seq_frame(pending, FrameType::heartbeat, next);
        last_sent = Clock::now();
      }
      count_pending();
      if (!pending.empty() && !writing && !kick_posted) {
        kick_posted = true;
        lk.unlock();
        asio::post(srv.io, [self = shared_from_this()] { self->kick(); });
      }
      if (stop_reader) return;
    }
  }

  // io thread: start writing `pending` if nothing is being written.
  void kick() {
    if (state == State::closed) return;
    bool flushed = false;
    {
      std::lock_guard lk(m);
      kick_posted = false;
      if (writing) return;
      if (pending.empty()) {
        flushed = finish_after_flush;
        finish_after_flush = false;
      }
    }
    if (flushed) return all_queued_written();  // everything up to the final frame
    {
      std::lock_guard lk(m);
      if (writing || pending.empty()) return;
      sending.swap(pending);
      pending.clear();
      count_pending();
      writing = true;
    }
    sending_off = 0;
    count_sending();
    space.notify_all();
    write_some();
  }

  // Writes `sending` piece by piece, so that the closing watch sees every
  // byte the peer takes, not only whole buffers.
  void write_some() {
    with_stream([&](auto& st) {
      st.async_write_some(asio::buffer(sending.data() + sending_off, sending.size() - sending_off),
                          [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                            self->on_written(ec, n);
                          });
    });
  }

  void on_written(boost::system::error_code ec, std::size_t n) {
    bump(srv.counters.bytes, n);
    written += n;
    sending_off += n;
    count_sending();
    if (!ec && state != State::closed && sending_off < sending.size()) return write_some();
    sending.clear();
    sending_off = 0;
    count_sending();
    {
      std::lock_guard lk(m);
      writing = false;
    }
    space.notify_all();
    if (state == State::closed) return;
    if (ec) return peer_gone(ec);
    kick();
  }

  // io thread: the last frame (end, or an error) is in the socket.
  void all_queued_written() {
    if (state == State::streaming) {
      End why;
      {
        std::lock_guard lk(m);
        why = end_kind;
      }
      if (why == End::slow) {
        slow_close();  // the reader's slow error went out before slow_close() ran
      } else {
        bump(srv.counters.closed_end);
        srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
        log_line(fmt::format("{}: closed: end of stream forwarded", peer));
        state = State::closing;  // the read in flight drains from now on
        watch_closing();
      }
    }
    if (state != State::closing) return;
    // A FIN follows the data; the socket is closed once the peer has taken
    // (acknowledged) everything, or closes itself, or stops making progress.
    boost::system::error_code ignored;
    socket().shutdown(tcp::socket::shutdown_send, ignored);
    fin_sent = true;
    close_if_taken();
    if (state == State::closing) arm_watch();  // looks again soon, not only at the window's end
  }

  // Bytes written to the socket that the peer has not acknowledged yet.
  std::uint64_t unacked() {
    int n = 0;
    if (::ioctl(socket().native_handle(), SIOCOUTQ, &n) != 0 || n < 0) return 0;
    return static_cast<std::uint64_t>(n);
  }

  // Bytes queued for the peer and not taken yet.
  std::uint64_t left_to_take() {
    std::size_t queued;
    {
      std::lock_guard lk(m);
      queued = pending.size();
    }
    return queued + (sending.size() - sending_off) + unacked();
  }

  void close_if_taken() {
    if (state == State::closing && fin_sent && unacked() == 0) close_now();
  }

  // While closing: a peer that takes at least closing_min_rate bytes a
  // second (or everything that was left) keeps its connection until the last
  // frame is through; one that takes less in a whole second is cut off.
  void watch_closing() {
    window_start = Clock::now();
    window_left = left_to_take();
    window_taken = written - std::min<std::uint64_t>(written, unacked());
    arm_watch();
  }

  void arm_watch() {
    // Once the FIN is queued, look often: the socket closes as soon as the
    // peer has everything. Before that, once per window.
    const auto window_end = window_start + std::chrono::seconds(1);
    const auto now = Clock::now();
    auto next = window_end;
    if (fin_sent) next = std::min(window_end, now + std::chrono::milliseconds(20));
    timer.expires_at(std::max(next, now));
    timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec || self->state != State::closing) return;
      self->on_watch();
    });
  }

  void on_watch() {
    close_if_taken();
    if (state == State::closed) return;
    const auto now = Clock::now();
    if (now - window_start < std::chrono::seconds(1)) return arm_watch();
    const std::uint64_t out = unacked();
    const std::uint64_t taken = written - std::min<std::uint64_t>(written, out);
    const std::uint64_t progress = taken - std::min(taken, window_taken);
    const std::uint64_t need = std::min<std::uint64_t>(srv.opt.closing_min_rate, window_left);
    if (need == 0) return close_now();  // nothing was left a second ago: nothing to wait for
    if (progress < need) {
      log_line(fmt::format("{}: cut off: took {} bytes in the last second while closing ({} left; at least {} "
                           "a second are needed)",
                           peer, progress, window_left - std::min(window_left, progress), need));
      return close_now();
    }
    window_start = now;
    window_taken = taken;
    window_left = left_to_take();
    arm_watch();
  }

  // io thread: the reader queued an ErrorCode::slow frame and stopped.
  void slow_close() {
    if (state != State::streaming) return;
    begin_closing(ErrorCode::slow, fmt::format("too slow, buffer full; resume at seq {}", end_seq),
                  &srv.counters.closed_slow, /*queue_error=*/false);
  }

  // Sends an error frame (after what is queued) and closes; gives the peer a
  // bounded time to take it.
  void fail(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter) {
    if (state == State::closed || state == State::closing) return;
    if (tls && !tls_ready) {  // no channel to send the error on yet
      log_line(fmt::format("{}: closed: {}: {}", peer, to_string(code), reason));
      if (counter) bump(*counter);
      return close_now();
    }
    begin_closing(code, reason, counter, /*queue_error=*/true);
  }

  void begin_closing(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter,
                     bool queue_error) {
    log_line(fmt::format("{}: closed: {}: {}", peer, to_string(code), reason));
    if (counter) bump(*counter);
    if (state == State::streaming) srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
    state = State::closing;
    {
      std::lock_guard lk(m);
      // `end` already queued is the stream's last frame: nothing follows it.
      if (queue_error && end_kind != End::eos) {
        append_error(pending, code, resume_seq, reason);
        count_pending();
        finish_after_flush = true;
      }
      stop_reader = true;
    }
    space.notify_all();
    watch_closing();
    kick();
  }

  void peer_gone(boost::system::error_code ec) {
    if (state == State::closed) return;
    if (state != State::closing) {
      const bool eof = ec == asio::error::eof || ec == asio::error::connection_reset;
      log_line(fmt::format("{}: closed: {}", peer, eof ? "peer disconnected" : ec.message()));
      bump(srv.counters.closed_peer);
      if (state == State::streaming) srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
      // Counted and logged here: close_now() must not count the same
      // subscriber again as an end of stream.
      state = State::closing;
    }
    close_now();
  }

  void close_now() {
    if (state == State::closed) return;
    if (state == State::streaming) {
      End why;
      {
        std::lock_guard lk(m);
        why = end_kind;
      }
      if (why == End::slow) {
        // Flushed the slow error before slow_close() ran.
        slow_close();
      } else {
        bump(srv.counters.closed_end);
        srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
        log_line(fmt::format("{}: closed: end of stream forwarded", peer));
      }
    }
    state = State::closed;
    leave_handshake_budget();
    {
      std::lock_guard lk(m);
      stop_reader = true;
    }
    space.notify_all();
    boost::system::error_code ignored;
    timer.cancel();
    hold.cancel();
    socket().close(ignored);
    srv.remove(shared_from_this());
  }
};

void Server::Impl::remove(const std::shared_ptr<Session>& s) {
  sessions.remove(s);
  if (s->reader_thread.joinable()) zombies.push_back(s);
}

void Server::Impl::reap(bool wait) {
  for (auto it = zombies.begin(); it != zombies.end();) {
    Session& s = **it;
    if (wait || s.reader_done.load(std::memory_order_acquire)) {  // pairs with the reader's release
      s.reader_thread.join();
      it = zombies.erase(it);
    } else {
      ++it;
    }
  }
}

ServeStats Server::Impl::snapshot() const {
  const Counters& c = counters;
  ServeStats s;
  s.subscribers = c.subscribers.load(std::memory_order_relaxed);
  s.accepted = c.accepted.load(std::memory_order_relaxed);
  s.messages = c.messages.load(std::memory_order_relaxed);
  s.bytes = c.bytes.load(std::memory_order_relaxed);
  s.dropped = c.dropped.load(std::memory_order_relaxed);
  s.closed_slow = c.closed_slow.load(std::memory_order_relaxed);
  s.closed_idle = c.closed_idle.load(std::memory_order_relaxed);
  s.closed_protocol = c.closed_protocol.load(std::memory_order_relaxed);
  s.closed_handshake = c.closed_handshake.load(std::memory_order_relaxed);
  s.closed_refused = c.closed_refused.load(std::memory_order_relaxed);
  s.closed_peer = c.closed_peer.load(std::memory_order_relaxed);
  s.closed_end = c.closed_end.load(std::memory_order_relaxed);
  s.closed_tls = c.closed_tls.load(std::memory_order_relaxed);
  s.queued_bytes = c.queued.load(std::memory_order_relaxed);
  return s;
}

void Server::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
    if (stopping) return;
    if (ec) {
      // Out of descriptors or similar: say so once per failure and retry shortly, without spinning.
      log_line(fmt::format("accept failed: {}", ec.message()));
      auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
      t->async_wait([this, t](boost::system::error_code) {
        if (!stopping) accept();
      });
      return;
    }
    bump(counters.accepted);
    auto s = std::make_shared<Session>(*this, std::move(sock));
    enforce_handshake_budget(s->addr_key);
    sessions.push_back(s);
    s->enter_handshake_budget();
    s->start();
    accept();
  });
}

// Makes room for one more connection from `key` in the handshake budget:
// the oldest connection in handshake from that address goes, or, when the
// total is reached, the oldest of all. The oldest rather than the newest:
// a client that means to subscribe sends its hello at once, so the
// connection that has waited longest is the likeliest to be one that never
// will (a dribbler), and a client behind the same address still gets in by
// connecting; refusing the newest would let a few held-open connections
// keep everyone out for good.
void Server::Impl::enforce_handshake_budget(const std::string& key) {
  Session* victim = nullptr;
  std::string why;
  if (const auto it = handshakes_from.find(key);
      it != handshakes_from.end() && it->second >= std::max<std::uint32_t>(opt.max_handshakes_per_address, 1)) {
    for (Session* h : handshaking) {
      if (h->addr_key == key) {
        victim = h;
        break;
      }
    }
    why = fmt::format("{} connections from {} in handshake (--max-handshakes-per-address): the oldest is closed",
                      it->second, key);
  } else if (!handshaking.empty() && handshaking.size() >= std::max<std::uint32_t>(opt.max_handshakes, 1)) {
    victim = handshaking.front();
    why = fmt::format("{} connections in handshake (--max-handshakes): the oldest is closed", handshaking.size());
  }
  if (!victim) return;
  const auto now = Clock::now();
  if (now - budget_logged >= std::chrono::seconds(1)) {
    log_line(fmt::format("{}: closed: too-many-subscribers: {}{}", victim->peer, why,
                         budget_unlogged ? fmt::format(" ({} more closed so in the last second)", budget_unlogged)
                                         : std::string()));
    budget_logged = now;
    budget_unlogged = 0;
  } else {
    ++budget_unlogged;
  }
  const auto keep = victim->shared_from_this();  // close_now() removes it from `sessions`
  victim->evict(why);
}

void Server::Impl::on_tick() {
  reap(false);  // reader threads that have ended are joined here, off the hot path
  if (should_stop && should_stop()) shutdown();
  if (stopping) return;
  if (stats_fn && stats_interval.count() > 0 && Clock::now() >= next_stats) {
    next_stats = Clock::now() + stats_interval;
    stats_fn(snapshot());
  }
  tick.expires_after(std::chrono::milliseconds(100));
  tick.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_tick();
  });
}

void Server::Impl::shutdown() {
  if (stopping) return;
  stopping = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  tick.cancel();
  auto all = sessions;
  for (auto& s : all) s->fail(ErrorCode::shutdown, "server stopping", nullptr);
}

Server::Server(ServeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(impl_->opt.host, ec);
  if (ec) throw std::runtime_error(fmt::format("--listen: '{}' is not an IP address", impl_->opt.host));
  const tcp::endpoint ep(addr, impl_->opt.port);
  if (!impl_->opt.tls_cert.empty() || !impl_->opt.tls_key.empty()) {
    if (impl_->opt.tls_cert.empty() || impl_->opt.tls_key.empty()) {
      throw std::runtime_error("TLS needs both --tls-cert and --tls-key");
    }
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    ctx->use_certificate_chain_file(impl_->opt.tls_cert, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("--tls-cert {}: cannot load a PEM certificate chain: {}",
                                           impl_->opt.tls_cert, ec.message()));
    }
    ctx->use_private_key_file(impl_->opt.tls_key, asio::ssl::context::pem, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("--tls-key {}: cannot load a PEM private key matching the "
                                           "certificate: {}", impl_->opt.tls_key, ec.message()));
    }
    impl_->tls = std::move(ctx);
  }
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("cannot listen on {}:{}: {}", impl_->opt.host, impl_->opt.port, ec.message()));
  }
}

Server::~Server() = default;

std::uint16_t Server::port() const noexcept {
  boost::system::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void Server::run(const std::function<bool()>& should_stop) {
  impl_->should_stop = should_stop;
  impl_->next_stats = Clock::now() + impl_->stats_interval;
  impl_->accept();
  impl_->on_tick();
  impl_->io.run();
  // Every session is closed; its reader thread ends within one read timeout.
  for (auto& s : impl_->sessions) {
    {
      std::lock_guard lk(s->m);
      s->stop_reader = true;
    }
    s->space.notify_all();
    if (s->reader_thread.joinable()) impl_->zombies.push_back(s);
  }
  impl_->sessions.clear();
  impl_->reap(true);
}

void Server::stop() {
  asio::post(impl_->io, [this] { impl_->shutdown(); });
}

ServeStats Server::stats() const { return impl_->snapshot(); }

void Server::on_stats(std::chrono::milliseconds interval, std::function<void(const ServeStats&)> f) {
  impl_->stats_interval = interval;
  impl_->stats_fn = std::move(f);
}

}  // namespace shmbus::bridge
