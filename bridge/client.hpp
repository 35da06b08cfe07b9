// shmbus-bridge — a blocking subscriber: connects to `shmbus-bridge serve`,
// does the handshake and hands back frames one at a time (PROTOCOL.md). Used
// by `mirror` and by shmbus-consumer's tcp:// source. Sends a heartbeat
// whenever one is due, and declares the server dead when nothing at all
// arrives for three of its heartbeat intervals.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace shmbus::bridge {

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string bus;
  StartKind start = StartKind::earliest;
  std::uint64_t start_seq = 0;
  std::string token;
  std::chrono::milliseconds connect_timeout{5000};
};

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
  enum class Kind { batch, loss, end } kind = Kind::batch;
  BatchView batch;      // valid until the next call to next()
  Loss loss;
  std::uint64_t seq = 0;  // Kind::end: the sequence after the last message
};

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
  Event next();

  // Gives up waiting: next() throws ClientError("interrupted") once `f` says so
  // (checked at least every 100 ms).
  void set_interrupt(bool (*f)()) noexcept { interrupt_ = f; }

 private:
  void read_exact(std::byte* p, std::size_t n);
  void send_all(const std::byte* p, std::size_t n);
  void heartbeat_if_due();
  int fd_ = -1;
  std::string where_;
  Welcome welcome_;
  std::vector<std::byte> body_;
  std::vector<std::byte> out_;
  std::uint64_t next_seq_ = 0;
  std::chrono::steady_clock::time_point last_sent_;
  bool (*interrupt_)() = nullptr;
};

}  // namespace shmbus::bridge
