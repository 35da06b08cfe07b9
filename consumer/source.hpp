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
};

class BusSource final : public Source {
 public:
  explicit BusSource(Consumer c) : consumer_(std::move(c)) {}
  std::uint64_t cursor() const noexcept override { return consumer_.cursor(); }
  PollResult poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) override {
    return consumer_.poll(handler, max, timeout);
  }
  std::uint64_t lost() const noexcept override { return consumer_.lost(); }
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

// Reads a bridge's subscription. The server's end frame is a clean end of
// stream; any error (refused, dropped as slow, server gone) is a tools::Failure
// (exit 1) naming what went wrong.
class TcpSource final : public Source {
 public:
  // Connects and subscribes; throws tools::Failure.
  explicit TcpSource(const bridge::ClientOptions& options);
  std::uint64_t cursor() const noexcept override { return next_; }
  PollResult poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) override;
  std::uint64_t lost() const noexcept override { return lost_; }

 private:
  std::unique_ptr<bridge::Client> client_;
  bridge::BatchView batch_;  // the batch being delivered, from `it_` on
  bridge::BatchView::iterator it_{};
  std::uint32_t left_ = 0;   // messages of batch_ not yet delivered
  std::uint64_t next_ = 0;
  std::uint64_t lost_ = 0;
  bool ended_ = false;
};

}  // namespace shmbus::consumer
