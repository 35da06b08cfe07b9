#include "bridge/client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace shmbus::bridge {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

void split_host_port(const std::string& s, const char* what, std::string& host, std::uint16_t& port) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    throw std::invalid_argument(fmt::format("{} '{}': expected HOST:PORT", what, s));
  }
  host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string p = s.substr(colon + 1);
  unsigned v = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (ec != std::errc{} || end != p.data() + p.size() || v > 65535) {
    throw std::invalid_argument(fmt::format("{} '{}': bad port '{}'", what, s, p));
  }
  port = static_cast<std::uint16_t>(v);
}

std::string read_token_file(const std::string& path) {
  std::ifstream f(path);
  std::string t;
  std::getline(f, t);
  if (!t.empty() && t.back() == '\r') t.pop_back();
  if (!f || t.empty() || t.size() > kMaxToken) {
    throw std::runtime_error(fmt::format("--token-file {}: cannot read a token of 1..{} bytes", path, kMaxToken));
  }
  return t;
}

namespace {

// The newest OpenSSL error as one line ("" if none), and clears the queue.
std::string ssl_error_text() {
  unsigned long e = ERR_get_error();
  unsigned long last = e;
  while (e != 0) {
    last = e;
    e = ERR_get_error();
  }
  if (last == 0) return {};
  char buf[256];
  ERR_error_string_n(last, buf, sizeof buf);
  // "error:0A000086:SSL routines::certificate verify failed" -> the reason.
  std::string s = buf;
  const auto at = s.rfind(':');
  return at == std::string::npos ? s : s.substr(at + 1);
}

Event none_event() {
  Event e;
  e.kind = Event::Kind::none;
  return e;
}

}  // namespace

struct Client::Tls {
  asio::ssl::context ctx{asio::ssl::context::tls_client};
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl) SSL_free(ssl);
  }
};

Client::Client(const ClientOptions& o) : where_(fmt::format("{}:{}", o.host, o.port)) {
  asio::io_context io;
  tcp::socket sock(io);
  boost::system::error_code ec;
  if (const auto addr = asio::ip::make_address(o.host, ec); !ec) {
    sock.connect(tcp::endpoint(addr, o.port), ec);
  } else {
    // A host name (localhost, a server's name): every address it resolves
    // to, in order, until one connects.
    tcp::resolver resolver(io);
    const auto found = resolver.resolve(o.host, std::to_string(o.port), ec);
    if (ec) throw ClientError(fmt::format("cannot resolve '{}': {}", o.host, ec.message()));
    asio::connect(sock, found, ec);
  }
  if (ec) throw ClientError(fmt::format("cannot connect to {}: {}", where_, ec.message()));
  sock.set_option(tcp::no_delay(true));
  fd_ = sock.release();  // from here on plain poll() and non-blocking I/O: reads with a deadline
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  last_received_ = Clock::now();
  if (!o.tls_ca.empty()) tls_handshake(o);

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
  try {
    read_exact(hdr.data(), hdr.size());
  } catch (const ClientError& e) {
    // A TLS server drops a plain hello without a word.
    if (!tls_ && std::string_view(e.what()).ends_with("connection closed by the server")) {
      throw ClientError(where_ + ": connection closed by the server during the handshake (does it "
                                 "use TLS? then pass --tls-ca)");
    }
    throw;
  }
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

void Client::tls_handshake(const ClientOptions& o) {
  tls_ = std::make_unique<Tls>();
  boost::system::error_code ec;
  tls_->ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                        asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                        asio::ssl::context::no_tlsv1_1);
  tls_->ctx.load_verify_file(o.tls_ca, ec);
  if (ec) throw ClientError(fmt::format("--tls-ca {}: cannot load a CA certificate: {}", o.tls_ca, ec.message()));
  tls_->ctx.set_verify_mode(asio::ssl::verify_peer);
  tls_->ssl = SSL_new(tls_->ctx.native_handle());
  if (!tls_->ssl) throw ClientError(fmt::format("{}: TLS: {}", where_, ssl_error_text()));
  // The certificate must name what was dialled: the IP address, or the
  // host name (a subjectAltName DNS entry).
  boost::system::error_code ip_ec;
  (void)asio::ip::make_address(o.host, ip_ec);
  if (!ip_ec)
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tls_->ssl), o.host.c_str());
  else
    X509_VERIFY_PARAM_set1_host(SSL_get0_param(tls_->ssl), o.host.c_str(), o.host.size());
  SSL_set_fd(tls_->ssl, fd_);
  SSL_set_connect_state(tls_->ssl);
  const auto deadline = Clock::now() + o.connect_timeout;
  while (true) {
    ERR_clear_error();
    const int r = SSL_do_handshake(tls_->ssl);
    if (r == 1) break;
    const int err = SSL_get_error(tls_->ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      const auto now = Clock::now();
      if (now >= deadline) throw ClientError(where_ + ": TLS handshake timed out");
      pollfd pfd{fd_, static_cast<short>(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT), 0};
      ::poll(&pfd, 1,
             static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
      continue;
    }
    const long verify = SSL_get_verify_result(tls_->ssl);
    std::string why = verify != X509_V_OK
                          ? fmt::format("server certificate not trusted: {} (--tls-ca {})",
                                        X509_verify_cert_error_string(verify), o.tls_ca)
                          : ssl_error_text();
    if (why.empty()) why = err == SSL_ERROR_SYSCALL ? "connection closed by the server" : "failed";
    if (why == "wrong version number" || why == "packet length too long") why += " (is the server using TLS?)";
    throw ClientError(fmt::format("{}: TLS handshake failed: {}", where_, why));
  }
}

Client::~Client() {
  tls_.reset();
  if (fd_ >= 0) ::close(fd_);
}

bool Client::buffered() const noexcept { return tls_ && SSL_pending(tls_->ssl) > 0; }

long Client::recv_some(std::byte* p, std::size_t n, short& want) {
  if (!tls_) {
    const ssize_t k = ::recv(fd_, p, n, 0);
    if (k >= 0) return k;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      want = POLLIN;
      return -1;
    }
    throw ClientError(fmt::format("{}: recv: {}", where_, std::strerror(errno)));
  }
  ERR_clear_error();
  std::size_t got = 0;
  const int r = SSL_read_ex(tls_->ssl, p, n, &got);
  if (r == 1) return static_cast<long>(got);
  switch (SSL_get_error(tls_->ssl, r)) {
    case SSL_ERROR_WANT_READ: want = POLLIN; return -1;
    case SSL_ERROR_WANT_WRITE: want = POLLOUT; return -1;
    case SSL_ERROR_ZERO_RETURN: return 0;
    case SSL_ERROR_SYSCALL:
      if (errno == 0 || errno == ECONNRESET) return 0;  // closed without a TLS close_notify
      throw ClientError(fmt::format("{}: recv: {}", where_, std::strerror(errno)));
    default: {
      const std::string why = ssl_error_text();
      if (why == "unexpected eof while reading") return 0;
      throw ClientError(fmt::format("{}: TLS: {}", where_, why));
    }
  }
}

long Client::send_some(const std::byte* p, std::size_t n, short& want) {
  if (!tls_) {
    const ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k >= 0) return k;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      want = POLLOUT;
      return -1;
    }
    throw ClientError(fmt::format("{}: send: {}", where_, std::strerror(errno)));
  }
  ERR_clear_error();
  std::size_t put = 0;
  const int r = SSL_write_ex(tls_->ssl, p, n, &put);
  if (r == 1) return static_cast<long>(put);
  switch (SSL_get_error(tls_->ssl, r)) {
    case SSL_ERROR_WANT_READ: want = POLLIN; return -1;
    case SSL_ERROR_WANT_WRITE: want = POLLOUT; return -1;
    case SSL_ERROR_SYSCALL: throw ClientError(fmt::format("{}: send: {}", where_, std::strerror(errno)));
    default: throw ClientError(fmt::format("{}: TLS: {}", where_, ssl_error_text()));
  }
}

std::chrono::milliseconds Client::silence() const noexcept {
  // Silence for three heartbeats (or 5 s during the handshake) means a dead server.
  return welcome_.heartbeat_ms ? std::chrono::milliseconds(3 * welcome_.heartbeat_ms)
                               : std::chrono::milliseconds(5000);
}

void Client::send_all(const std::byte* p, std::size_t n) {
  const auto deadline = Clock::now() + silence();
  while (n > 0) {
    short want = 0;
    const long k = send_some(p, n, want);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k == 0) throw ClientError(where_ + ": connection closed by the server");
    const auto now = Clock::now();
    if (now >= deadline) throw ClientError(where_ + ": the server takes nothing: presumed dead");
    pollfd pfd{fd_, want, 0};
    ::poll(&pfd, 1, 100);
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
  while (n > 0) {
    short want = POLLIN;
    const long k = recv_some(p, n, want);
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      last_received_ = Clock::now();
      continue;
    }
    if (k == 0) throw ClientError(where_ + ": connection closed by the server");
    if (welcome_.heartbeat_ms) heartbeat_if_due();
    const auto now = Clock::now();
    const auto deadline = last_received_ + silence();
    if (now >= deadline) {
      throw ClientError(fmt::format("{}: nothing received for {} ms: server presumed dead", where_,
                                    silence().count()));
    }
    pollfd pfd{fd_, want, 0};
    const auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1),
        std::chrono::milliseconds(100));
    ::poll(&pfd, 1, static_cast<int>(wait.count()));
  }
}

Event Client::next(std::chrono::milliseconds wait) {
  const bool bounded = wait != std::chrono::milliseconds::max();
  const auto give_up = bounded ? Clock::now() + wait : Clock::time_point::max();
  while (true) {
    heartbeat_if_due();
    if (bounded && !buffered()) {
      // Wait for the first byte of a frame, at most until `give_up`.
      while (true) {
        pollfd pfd{fd_, POLLIN, 0};
        const auto now = Clock::now();
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - now);
        const int ms = static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 100));
        if (::poll(&pfd, 1, ms) > 0) break;
        heartbeat_if_due();
        if (Clock::now() - last_received_ >= silence()) {
          throw ClientError(fmt::format("{}: nothing received for {} ms: server presumed dead", where_,
                                        silence().count()));
        }
        if (Clock::now() >= give_up) return none_event();
      }
    }
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
        s = decode_batch(body_, BatchLimits{welcome_.max_message, welcome_.record_size}, ev.batch);
        // A batch starts where the stream is, or after sequences that hold
        // no message (the padding a bus puts before a message that spans
        // records, when the rest of its lap is too short); never before.
        if (s == DecodeStatus::ok && ev.batch.first_seq() < next_seq_) {
          throw ClientError(fmt::format("{}: batch starts at seq {}, before the expected {}", where_,
                                        ev.batch.first_seq(), next_seq_));
        }
        if (s == DecodeStatus::ok) {
          next_seq_ = ev.batch.end_seq();
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
        if (s == DecodeStatus::ok) {
          if (bounded && Clock::now() >= give_up) return none_event();
          continue;
        }
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
