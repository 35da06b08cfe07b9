// shmbus-bridge serve: forwards one local bus to TCP subscribers (docs/protocol.md).
//
// Threads: one io_context thread owns every socket, timer and session state
// machine; each subscriber that finished its handshake gets one reader thread
// that owns its shmbus::Consumer (its own reader slot, named tcp:IP:PORT),
// sleeps in read_batch() on the bus's futex, encodes batches into the
// subscriber's bounded buffer and hands it to the io thread. The two meet
// under a per-subscriber mutex once per batch, never per message.
#pragma once

#include <shmbus/bus.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace shmbus::bridge {

// What happens to a subscriber that does not keep up. Whatever the policy,
// the bridge stops reading the bus for a subscriber whose buffer is full,
// so the ring itself is its buffer; the policy says what happens when the
// bus's producer goes a whole ring past it.
enum class SlowPolicy : std::uint8_t {
  disconnect,  // its reader does not hold the producer; lapped, it is closed with
               // ErrorCode::slow and the first sequence it did not get
  skip,        // its reader does not hold the producer; lapped, it gets a loss frame
               // with the exact count (at once) and goes on
  block,       // its reader holds a `block` bus's producer, like a slow local consumer
};

struct ServeOptions {
  std::string bus;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port (see Server::port())
  std::optional<std::string> token;  // required from clients when set
  SlowPolicy slow = SlowPolicy::disconnect;
  // Subscribers at once: checked when a hello is accepted (a refusal is an
  // error frame after the hello); connections still in their handshake
  // never count here.
  std::uint32_t max_subscribers = 64;
  // Connections that have not become subscribers yet (handshake, TLS
  // handshake, or closing before welcome): at most this many in all and from
  // one address (an IPv6 /64 counts as one). Over either, the oldest such
  // connection (from that address, or in all) is closed at once.
  std::uint32_t max_handshakes = 64;
  std::uint32_t max_handshakes_per_address = 8;
  // After a wrong token, that address's handshakes are answered no sooner
  // than token_backoff_min after it, doubling per wrong token up to
  // token_backoff_max; an address without a wrong token for
  // token_backoff_forget is forgotten, and at most token_backoff_addresses
  // are remembered (the one with the oldest wrong token goes first).
  std::chrono::milliseconds token_backoff_min{100};
  std::chrono::milliseconds token_backoff_max{5000};
  std::chrono::milliseconds token_backoff_forget{30000};
  std::uint32_t token_backoff_addresses = 4096;
  std::uint32_t max_frame = 1u << 20;       // largest batch body sent
  std::uint32_t max_handshake = 16 + 200 + 1024;  // largest hello body accepted
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds idle_timeout{15000};  // nothing received from a subscriber
  std::chrono::milliseconds heartbeat{1000};      // sent when nothing else was
  std::size_t buffer_bytes = 4u << 20;            // per subscriber, encoded frames waiting
  // A connection being closed behind queued frames (an error frame, end)
  // stays while its peer takes at least this many bytes per second (or all
  // that is left), so that a slow reader still gets the last frame.
  std::size_t closing_min_rate = 64u << 10;
  std::uint32_t batch_messages = 256;             // messages read from the bus at once
  Trust trust{};
  // TLS: PEM certificate chain and private key; both empty for plain TCP.
  std::string tls_cert, tls_key;
};

struct ServeStats {
  std::uint64_t subscribers = 0;  // now
  std::uint64_t accepted = 0;     // connections so far
  std::uint64_t messages = 0;     // messages queued to subscribers
  std::uint64_t bytes = 0;        // bytes written to sockets
  std::uint64_t dropped = 0;      // messages subscribers were told they lost (loss frames)
  // Connections closed, by reason.
  std::uint64_t closed_slow = 0, closed_idle = 0, closed_protocol = 0, closed_handshake = 0,
                closed_refused = 0, closed_peer = 0, closed_end = 0;
  std::uint64_t closed_tls = 0;  // TLS handshake failed (wrong CA, plain client...)
  std::uint64_t queued_bytes = 0;  // now: encoded for subscribers, not yet written to their sockets
  bool operator==(const ServeStats&) const = default;
};

// The reader slot name of a subscriber at ip:port: "tcp:IP:PORT" in at most
// 31 bytes (a long IPv6 address is shortened in the middle with '~').
std::string slot_name(const std::string& ip, std::uint16_t port);

class Server {
 public:
  // Binds the listening socket (throws std::runtime_error with one line).
  explicit Server(ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const noexcept;
  // Serves until stop() (from any thread) or `should_stop` returns true
  // (polled every 100 ms). Tells every subscriber, releases every reader slot.
  void run(const std::function<bool()>& should_stop = {});
  void stop();
  ServeStats stats() const;
  // Called every `interval` from the io thread with the current stats.
  void on_stats(std::chrono::milliseconds interval, std::function<void(const ServeStats&)> f);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmbus::bridge
