// shmbus-bridge — the server's private parts, shared by its files:
// server.cpp (accepting, the handshake budget, the ticks, stopping),
// session_handshake.cpp (a connection's way in: TLS, the frames the peer
// sends, hello, the token and who may read the bus), session_reader.cpp
// (the thread that reads the bus into frames) and session_writer.cpp
// (writing frames to the socket, and closing).
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <fmt/format.h>
#include <shmbus/consumer.hpp>

#include <array>
#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bridge/protocol.hpp"
#include "bridge/server.hpp"

namespace shmbus::bridge {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

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

inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept {
  c.fetch_add(n, std::memory_order_relaxed);
}

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

// The peer's reader slot name ("tcp:?" if the socket has no peer).
std::string peer_slot_name(tcp::socket& sock);
// The address a peer is counted under for the handshake budget and the
// token back-off (server.cpp).
std::string address_key(const asio::ip::address& a);

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

  void start();

  void channel_up() { read_header(); }

  // Over the handshake budget: closed at once, with a best-effort error
  // frame on a plain connection (one non-blocking send; never waited for).
  void evict(const std::string& reason);

  std::uint64_t resume_seq_unlocked() {
    std::lock_guard lk(m);
    return resume_seq;
  }

  // Nothing can be said to a peer whose TLS handshake failed: log and close.
  void tls_failed(boost::system::error_code ec);

  void arm_timer(std::chrono::milliseconds d, const char* reason, ErrorCode code,
                 std::atomic<std::uint64_t>* counter);

  void arm_idle();

  std::uint32_t max_in_body() const;

  void read_header();

  // While closing: whatever the peer still sends is read and dropped, so that
  // closing the socket does not reset the connection and discard the error
  // frame we queued for it.
  void drain();

  void on_header(boost::system::error_code ec);

  void on_body(boost::system::error_code ec);

  void answer_hello();

  // A held hello whose peer gives up (closes) is dropped unanswered: it
  // neither waits its turn nor counts as another wrong token.
  void watch_held_peer();

  // The local peer's user may read the bus's segment, or the peer is on
  // another host. Returns the refusal's text otherwise.
  std::optional<std::string> local_peer_refusal();

  void on_hello();

  // A loss frame for the subscriber, counted in `dropped`. Under `m`.
  void told_lost(const Loss& l);

  // Runs on the reader thread: bus -> pending frames.
  void reader(Consumer& c, const Welcome& w);

  // io thread: start writing `pending` if nothing is being written.
  void kick();

  // Writes `sending` piece by piece, so that the closing watch sees every
  // byte the peer takes, not only whole buffers.
  void write_some();

  void on_written(boost::system::error_code ec, std::size_t n);

  // io thread: the last frame (end, or an error) is in the socket.
  void all_queued_written();

  // Bytes written to the socket that the peer has not acknowledged yet.
  std::uint64_t unacked();

  // Bytes queued for the peer and not taken yet.
  std::uint64_t left_to_take();

  void close_if_taken();

  // While closing: a peer that takes at least closing_min_rate bytes a
  // second (or everything that was left) keeps its connection until the last
  // frame is through; one that takes less in a whole second is cut off.
  void watch_closing();

  void arm_watch();

  void on_watch();

  // io thread: the reader queued an ErrorCode::slow frame and stopped.
  void slow_close();

  // Sends an error frame (after what is queued) and closes; gives the peer a
  // bounded time to take it.
  void fail(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter);

  void begin_closing(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter,
                     bool queue_error);

  void peer_gone(boost::system::error_code ec);

  void close_now();
};

}  // namespace shmbus::bridge
