// shmbus-bridge — a blocking subscriber: connects to `shmbus-bridge serve`,
// does the handshake and hands back frames one at a time (docs/protocol.md). Used
// by `mirror` and by shmbus-consumer's tcp:// source. Sends a heartbeat
// whenever one is due, and declares the server dead when nothing at all
// arrives for three of its heartbeat intervals. With `tls_ca` it speaks TLS
// (OpenSSL, set up through Boost.Asio's ssl::context) and accepts only a
// server certificate that chains to that CA and names the address connected to.
#pragma once

#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bridge/protocol.hpp"

namespace shmbus::bridge {

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string bus;
  StartKind start = StartKind::earliest;
  std::uint64_t start_seq = 0;
  std::string token;
  std::chrono::milliseconds connect_timeout{5000};
  std::string tls_ca;  // PEM file of the CA(s) to trust; empty: plain TCP
};

// "HOST:PORT" (IPv6 as "[::1]:PORT"), numeric addresses only. Throws
// std::invalid_argument naming `what` (e.g. "--listen") and the problem.
void split_host_port(const std::string& s, const char* what, std::string& host, std::uint16_t& port);

// Connection, handshake or protocol failure; `code` when the server said why.
class ClientError : public std::runtime_error {
 public:
  explicit ClientError(const std::string& what, std::optional<ErrorCode> server_code = std::nullopt,
                       std::uint64_t resume_seq = 0)
      : std::runtime_error(what), code(server_code), next_seq(resume_seq) {}
  std::optional<ErrorCode> code;
  std::uint64_t next_seq;  // with a server error: where to resume
};

struct Event {
  enum class Kind { batch, loss, end, none } kind = Kind::batch;  // none: next(wait) timed out
  BatchView batch;      // valid until the next call to next()
  Loss loss;
  std::uint64_t seq = 0;  // Kind::end: the sequence after the last message
};

// The token in the first line of `path` (1..kMaxToken bytes; a trailing CR is
// dropped). Throws std::runtime_error naming the file.
std::string read_token_file(const std::string& path);

class Client {
 public:
  // Connects and does the handshake. Throws ClientError (with the server's
  // code and line when it refused).
  explicit Client(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Welcome& welcome() const noexcept { return welcome_; }

  // The next batch, loss or end. Heartbeats are absorbed. Throws ClientError
  // when the server sends an error, the connection breaks or goes silent, or
  // a frame is malformed.
  Event next() { return next(std::chrono::milliseconds::max()); }
  // Like next(), but returns Kind::none when no frame has begun to arrive
  // within `wait` (a frame that has begun is read to its end).
  Event next(std::chrono::milliseconds wait);

  // Sends a heartbeat if one is due. For a caller busy elsewhere between
  // calls to next() (a mirror waiting for room on its local bus): the server
  // closes a subscriber it hears nothing from for its --idle-timeout, however
  // much it still has to send it. Throws ClientError like next().
  void keep_alive() { heartbeat_if_due(); }

 private:
  struct Tls;
  void tls_handshake(const ClientOptions& o);
  // >0 bytes moved, 0 the peer closed, -1 would block (`want` says on what).
  long recv_some(std::byte* p, std::size_t n, short& want);
  long send_some(const std::byte* p, std::size_t n, short& want);
  bool buffered() const noexcept;  // decrypted bytes waiting (TLS)
  void read_exact(std::byte* p, std::size_t n);
  void send_all(const std::byte* p, std::size_t n);
  void heartbeat_if_due();
  std::chrono::milliseconds silence() const noexcept;
  int fd_ = -1;
  std::unique_ptr<Tls> tls_;
  std::string where_;
  Welcome welcome_;
  std::vector<std::byte> body_;
  std::vector<std::byte> out_;
  std::uint64_t next_seq_ = 0;
  std::chrono::steady_clock::time_point last_sent_;
  std::chrono::steady_clock::time_point last_received_;
};

}  // namespace shmbus::bridge
