#include "client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace shmbus::bridge {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Client::Client(const ClientOptions& o) : where_(fmt::format("{}:{}", o.host, o.port)) {
  asio::io_context io;
  tcp::socket sock(io);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(o.host, ec);
  if (ec) throw ClientError(fmt::format("'{}' is not an IP address", o.host));
  sock.connect(tcp::endpoint(addr, o.port), ec);
  if (ec) throw ClientError(fmt::format("cannot connect to {}: {}", where_, ec.message()));
  sock.set_option(tcp::no_delay(true));
  fd_ = sock.release();  // from here on plain poll()/recv(): reads with a deadline

  Hello h;
  h.bus = o.bus;
  h.start = o.start;
  h.start_seq = o.start_seq;
  h.token = o.token;
  append_hello(out_, h);
  send_all(out_.data(), out_.size());
  out_.clear();

  // The first frame is welcome or error; wait at most the connect timeout for it.
  std::array<std::byte, kFrameHeaderSize> hdr;
  read_exact(hdr.data(), hdr.size());
  FrameHeader fh;
  if (const DecodeStatus s = parse_header(hdr, kErrorFixed + kMaxErrorText, fh); s != DecodeStatus::ok) {
    throw ClientError(fmt::format("{}: bad handshake reply: {}", where_, to_string(s)));
  }
  body_.resize(fh.length);
  read_exact(body_.data(), body_.size());
  if (fh.type == FrameType::error) {
    ErrorFrame e;
    if (decode_error(body_, e) != DecodeStatus::ok) throw ClientError(where_ + ": malformed error frame");
    throw ClientError(fmt::format("{} refused: {}: {}", where_, to_string(e.code), e.text), e.code,
                      e.next_seq);
  }
  if (fh.type != FrameType::welcome) throw ClientError(where_ + ": handshake reply is not a welcome");
  if (const DecodeStatus s = decode_welcome(body_, welcome_); s != DecodeStatus::ok) {
    throw ClientError(fmt::format("{}: bad welcome: {}", where_, to_string(s)));
  }
  next_seq_ = welcome_.first_seq;
  last_sent_ = Clock::now();
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

void Client::send_all(const std::byte* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      throw ClientError(fmt::format("{}: send: {}", where_, std::strerror(errno)));
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

void Client::heartbeat_if_due() {
  const auto hb = std::chrono::milliseconds(welcome_.heartbeat_ms ? welcome_.heartbeat_ms : 1000);
  if (Clock::now() - last_sent_ < hb) return;
  std::vector<std::byte> f;
  append_seq_frame(f, FrameType::heartbeat, next_seq_);
  send_all(f.data(), f.size());
  last_sent_ = Clock::now();
}

void Client::read_exact(std::byte* p, std::size_t n) {
  // Silence for three heartbeats (or 5 s during the handshake) means a dead server.
  const auto silence = welcome_.heartbeat_ms ? std::chrono::milliseconds(3 * welcome_.heartbeat_ms)
                                             : std::chrono::milliseconds(5000);
  auto deadline = Clock::now() + silence;
  while (n > 0) {
    const ssize_t k = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      deadline = Clock::now() + silence;
      continue;
    }
    if (k == 0) throw ClientError(where_ + ": connection closed by the server");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      throw ClientError(fmt::format("{}: recv: {}", where_, std::strerror(errno)));
    }
    if (interrupt_ && interrupt_()) throw ClientError("interrupted");
    if (welcome_.heartbeat_ms) heartbeat_if_due();
    const auto now = Clock::now();
    if (now >= deadline) {
      throw ClientError(fmt::format("{}: nothing received for {} ms: server presumed dead", where_,
                                    silence.count()));
    }
    pollfd pfd{fd_, POLLIN, 0};
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1),
        std::chrono::milliseconds(100));
    ::poll(&pfd, 1, static_cast<int>(wait.count()));
  }
}

Event Client::next() {
  while (true) {
    heartbeat_if_due();
    std::array<std::byte, kFrameHeaderSize> hdr;
    read_exact(hdr.data(), hdr.size());
    FrameHeader fh;
    if (const DecodeStatus s = parse_header(hdr, welcome_.max_frame, fh); s != DecodeStatus::ok) {
      throw ClientError(fmt::format("{}: {}", where_, to_string(s)));
    }
    body_.resize(fh.length);
    read_exact(body_.data(), body_.size());
    Event ev;
    DecodeStatus s = DecodeStatus::ok;
    switch (fh.type) {
      case FrameType::batch:
        s = decode_batch(body_, welcome_.max_payload, ev.batch);
        if (s == DecodeStatus::ok && ev.batch.first_seq() != next_seq_) {
          throw ClientError(fmt::format("{}: batch starts at seq {}, expected {}", where_,
                                        ev.batch.first_seq(), next_seq_));
        }
        if (s == DecodeStatus::ok) {
          next_seq_ += ev.batch.count();
          ev.kind = Event::Kind::batch;
          return ev;
        }
        break;
      case FrameType::loss:
        s = decode_loss(body_, ev.loss);
        if (s == DecodeStatus::ok) {
          if (ev.loss.first != next_seq_) throw ClientError(where_ + ": loss frame out of order");
          next_seq_ += ev.loss.count;
          ev.kind = Event::Kind::loss;
          return ev;
        }
        break;
      case FrameType::end:
        s = decode_seq(body_, ev.seq);
        if (s == DecodeStatus::ok) {
          ev.kind = Event::Kind::end;
          return ev;
        }
        break;
      case FrameType::heartbeat: {
        std::uint64_t seq = 0;
        s = decode_seq(body_, seq);
        if (s == DecodeStatus::ok) continue;
        break;
      }
      case FrameType::error: {
        ErrorFrame e;
        s = decode_error(body_, e);
        if (s == DecodeStatus::ok) {
          throw ClientError(fmt::format("{}: {}: {}", where_, to_string(e.code), e.text), e.code,
                            e.next_seq);
        }
        break;
      }
      default:
        throw ClientError(fmt::format("{}: unexpected frame type {}", where_,
                                      static_cast<unsigned>(fh.type)));
    }
    throw ClientError(fmt::format("{}: {}", where_, to_string(s)));
  }
}


}  // namespace shmbus::bridge
