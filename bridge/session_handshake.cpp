// shmbus-bridge — a connection's way in (session.hpp): the TLS handshake,
// the frames the peer sends (hello, acknowledgements), the token and its
// back-off, who may read the bus, and the welcome that starts the reader.
#include "bridge/session.hpp"

#include <fmt/format.h>
#include <openssl/err.h>

#include <sys/socket.h>

#include "bridge/local_peer.hpp"
#include "bridge/log.hpp"

namespace shmbus::bridge {

void Session::tls_failed(boost::system::error_code ec) {
  std::string why = ec.message();
  if (ec.category() == asio::error::get_ssl_category()) {
    const char* r = ERR_reason_error_string(ec.value());
    if (r) why = r;
  }
  log_line(fmt::format("{}: closed: tls: TLS handshake failed: {}", peer, why));
  bump(srv.counters.closed_tls);
  close_now();
}

void Session::arm_timer(std::chrono::milliseconds d, const char* reason, ErrorCode code,
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

void Session::arm_idle() {
  const auto left = srv.opt.idle_timeout -
                    std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_received);
  arm_timer(std::max(left, std::chrono::milliseconds(1)), "nothing received within the idle timeout",
            ErrorCode::idle, &srv.counters.closed_idle);
}

std::uint32_t Session::max_in_body() const {
  return state == State::handshake ? srv.opt.max_handshake : kSeqSize;
}

void Session::read_header() {
  with_stream([&](auto& st) {
    asio::async_read(st, asio::buffer(in_header),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       self->on_header(ec);
                     });
  });
}

void Session::drain() {
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

void Session::on_header(boost::system::error_code ec) {
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

void Session::on_body(boost::system::error_code ec) {
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

void Session::answer_hello() {
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

void Session::watch_held_peer() {
  socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->state != State::handshake) return;
    char c;
    const ssize_t n = ::recv(self->socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return self->peer_gone(asio::error::eof);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return self->peer_gone(asio::error::connection_reset);
    // Bytes after the hello: the peer is there; they are read after welcome.
  });
}

std::optional<std::string> Session::local_peer_refusal() {
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

void Session::on_hello() {
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

void Session::start() {
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

void Session::evict(const std::string& reason) {
  if (state == State::closed) return;
  if (!tls && state == State::handshake) {
    std::vector<std::byte> f;
    append_error(f, ErrorCode::too_many, resume_seq_unlocked(), reason);
    (void)::send(sock.native_handle(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  bump(srv.counters.closed_refused);
  close_now();
}

}  // namespace shmbus::bridge
