// shmbus-consumer — where messages come from: a local bus (BusSource, the
// library's Consumer) or a shmbus-bridge over TCP (TcpSource, tcp://HOST:PORT/BUS,
// bridge/client.hpp). run.cpp drives either through the same loop, so every
// flag (--verify, --stats, --format, --count...) means the same for both.
#pragma once

#include <shmbus/shmbus.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bridge/client.hpp"
#include "tools/common/failure.hpp"

namespace shmbus::consumer {

using MessageHandler = std::function<void(const Message&)>;

class Source {
 public:
  virtual ~Source() = default;
  // The next sequence this source will deliver (or report lost).
  virtual std::uint64_t cursor() const noexcept = 0;
  // Hands up to `max` messages to `handler`, waiting up to `timeout` for the
  // first; counts losses and end-of-stream like Consumer::poll. Throws tools::Failure.
  virtual PollResult poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) = 0;
  // Messages reported lost so far.
  virtual std::uint64_t lost() const noexcept = 0;
  // Connections lost and made again (tcp:// with --follow).
  virtual std::uint64_t reconnects() const noexcept { return 0; }
  // The ring's records (where padding goes: shmbus/placement.hpp); 0 if unknown.
  virtual std::uint64_t capacity() const noexcept = 0;
};

class BusSource final : public Source {
 public:
  explicit BusSource(Consumer c) : consumer_(std::move(c)) {}
  std::uint64_t cursor() const noexcept override { return consumer_.cursor(); }
  PollResult poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) override {
    return consumer_.poll(handler, max, timeout);
  }
  std::uint64_t lost() const noexcept override { return consumer_.lost(); }
  std::uint64_t capacity() const noexcept override { return consumer_.bus().info().capacity; }
  Consumer& consumer() noexcept { return consumer_; }

 private:
  Consumer consumer_;
};

// tcp://HOST:PORT/BUS, IPv6 as tcp://[::1]:PORT/BUS. Throws std::invalid_argument.
struct TcpAddress {
  std::string host;
  std::uint16_t port = 0;
  std::string bus;
};
bool is_tcp_url(const std::string& s) noexcept;
TcpAddress parse_tcp_url(const std::string& s);

// --follow over tcp://: how a TcpSource gets its subscription back.
struct TcpFollow {
  bool enabled = false;
  std::chrono::milliseconds backoff_min{100};  // first wait before reconnecting, doubled per failure
  std::chrono::milliseconds backoff_max{5000};
  // After the server's end frame: the longest wait before asking again for
  // what a later producer publishes.
  std::chrono::milliseconds end_poll_max{1000};
  std::chrono::seconds notice_every{5};  // while reconnecting: a progress line this often
};

// Whether a failure of a tcp:// subscription is worth a reconnect under
// --follow: a server error that says the request itself is wrong (bad token,
// bad version, bad request, unknown bus) or a TLS certificate the CA does not
// trust is not; a dropped or silent connection, or any other server error
// (slow, shutdown, idle, not-retained, too-many-subscribers,
// handshake-timeout, internal), is.
bool retryable(const bridge::ClientError& e) noexcept;

// Reads a bridge's subscription. The server's end frame is a clean end of
// stream; any error (refused, dropped as slow, server gone) is a tools::Failure
// (exit 1) naming what went wrong.
//
// With --follow (TcpFollow::enabled) a subscription that fails after it was
// made is made again, with exponential backoff, at the first sequence not
// yet delivered: nothing is delivered twice, and when the server no longer
// retains that sequence (or starts further on) the sequences in between are
// reported as lost, exactly, like a loss frame. The server's end frame is
// passed on as an end of stream and the source then subscribes again at the
// same sequence, for what a producer taking the bus over publishes. The
// first connection, and the errors retryable() refuses, still fail at once.
class TcpSource final : public Source {
 public:
  // Connects and subscribes; throws tools::Failure.
  TcpSource(const bridge::ClientOptions& options, const TcpFollow& follow = {});
  std::uint64_t cursor() const noexcept override { return next_; }
  PollResult poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) override;
  std::uint64_t lost() const noexcept override { return lost_; }
  std::uint64_t reconnects() const noexcept override { return reconnects_; }
  std::uint64_t capacity() const noexcept override;

 private:
  using Clock = std::chrono::steady_clock;
  std::string where() const;
  tools::Failure failure(const bridge::ClientError& e) const;
  // The connection failed with `e` (or, with `e` null, ended with the end frame).
  void lost_connection(const bridge::ClientError* e);
  // Waits for the next attempt until `deadline` at most, then subscribes
  // again at next_; false when not subscribed (yet). Counts a gap in `r`.
  bool reconnect(Clock::time_point deadline, PollResult& r);
  void schedule_retry();

  bridge::ClientOptions options_;
  TcpFollow follow_;
  std::unique_ptr<bridge::Client> client_;  // null while disconnected
  bridge::BatchView batch_;  // the batch being delivered, from `it_` on
  bridge::BatchView::iterator it_{};
  std::uint32_t left_ = 0;   // messages of batch_ not yet delivered
  std::uint64_t next_ = 0;
  std::uint64_t lost_ = 0;
  std::uint64_t pending_lost_ = 0;  // a loss frame after messages this poll: told by the next
  bool ended_ = false;       // the server sent end (without --follow: the stream is over)
  // --follow: the state of reconnecting.
  std::uint64_t reconnects_ = 0;
  std::uint64_t attempts_ = 0;               // since the connection was lost
  std::uint64_t resume_at_ = 0;              // > next_: where the server said the stream goes on
  int chases_ = 0;                           // immediate retries after not-retained
  bool from_earliest_ = false;               // the next attempt asks for the server's oldest (what we wanted is gone)
  std::chrono::milliseconds backoff_{0};
  Clock::time_point retry_at_{};
  Clock::time_point down_since_{};
  Clock::time_point next_notice_{};
  Clock::time_point connected_at_{};
  std::string last_error_;
  bool waiting_for_producer_ = false;         // lost after an end frame: quiet re-subscribing
  bool told_not_there_ = false;               // "not on the server's bus yet" said once
};

}  // namespace shmbus::consumer
