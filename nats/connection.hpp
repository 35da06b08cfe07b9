// shmbus-nats — a connection to a NATS server with JetStream, set up the way
// both directions need it: the client's own credentials (--creds) and TLS
// (--tls-ca) options, unlimited reconnects with exponential backoff, and
// one-line errors for what goes wrong.
#pragma once

#include <nats/nats.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "tools/common/failure.hpp"

namespace shmbus::nats {

// A setup or fatal error: what() is one line for the user; the program exits
// 1 with it (JSON code "nats").
class GatewayError : public tools::Failure {
 public:
  explicit GatewayError(const std::string& message) : tools::Failure(tools::exit_failure, message, "nats") {}
};

struct ConnectArgs {
  std::string server = "nats://127.0.0.1:4222";  // one URL or several, comma-separated
  std::string creds;      // NATS credentials file (JWT + nkey seed), or empty
  std::string tls_ca;     // CA certificates (PEM) to verify the server with; enables TLS
  std::string tls_cert;   // client certificate (PEM), with tls_key
  std::string tls_key;
  std::int64_t connect_timeout_ms = 2000;
  std::int64_t max_backoff_ms = 2000;     // reconnect backoff grows from 50 ms up to this
  std::int64_t api_timeout_ms = 5000;     // JetStream API requests
};

// "what: text of the status (the client's detail)", for messages.
std::string status_text(natsStatus s);

class Connection {
 public:
  // Connects (one attempt per URL; an unreachable server is a GatewayError,
  // not a retry loop) and opens the JetStream context.
  explicit Connection(const ConnectArgs& args, std::int64_t max_pending_publishes = 0,
                      jsPubAckHandler ack_handler = nullptr, void* ack_closure = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  natsConnection* nc() const noexcept { return nc_; }
  jsCtx* js() const noexcept { return js_; }
  // After a successful js_PublishMsgAsync: the context then holds a list of
  // publishes in flight, which the destructor takes back and frees (the
  // client keeps no such list before the first one).
  void published_async() noexcept { published_async_ = true; }

  // Bumped each time the client has reconnected (the client's thread writes,
  // the gateway's loop reads: relaxed, a counter).
  std::uint64_t reconnects() const noexcept { return reconnects_.load(std::memory_order_relaxed); }
  bool connected() const noexcept;
  // The last asynchronous error the server sent (e.g. a permissions
  // violation), or empty.
  std::string last_async_error() const;

  // Throws GatewayError naming the stream if it does not exist or JetStream
  // cannot be asked (disabled, no permission). `if_missing` is added to the
  // message when the stream does not exist (how to create it).
  void check_stream(const std::string& stream, std::string_view if_missing = {}) const;

 private:
  static void on_disconnected(natsConnection* nc, void* self);
  static void on_reconnected(natsConnection* nc, void* self);
  static void on_async_error(natsConnection* nc, natsSubscription* sub, natsStatus err, void* self);
  static int64_t reconnect_delay(natsConnection* nc, int attempts, void* self);

  natsOptions* opts_ = nullptr;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
  bool published_async_ = false;
  std::int64_t max_backoff_ms_;
  std::atomic<std::uint64_t> reconnects_{0};
  mutable std::mutex error_mutex_;  // the client's threads report errors
  std::string async_error_;
};

// True for an error no retry can cure: a stream or consumer that does not
// exist, a permission the server refuses, JetStream disabled.
bool is_fatal(const GatewayError& e);

// Sleeps `d`, or less once `stop()` says so: a back-off a signal ends
// within 20 ms.
template <class Stop>
void pause_unless(Stop&& stop, std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (!stop()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(20)));
  }
}

// Says when something periodic is due: at most once per `period` (never
// for a period of 0), the first time at once or after one period.
class Every {
 public:
  Every(std::chrono::steady_clock::duration period, bool at_once)
      : period_(period), last_(at_once ? std::chrono::steady_clock::time_point{} : std::chrono::steady_clock::now()) {}
  bool due() {
    if (period_.count() <= 0) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < period_) return false;
    last_ = now;
    return true;
  }

 private:
  std::chrono::steady_clock::duration period_;
  std::chrono::steady_clock::time_point last_;
};

// Calls f() until it returns without a GatewayError, backing off from 50 ms
// to 2 s between attempts while the errors are transient (a server
// restarting answers with timeouts and no responders until JetStream has
// loaded its streams again). A fatal error, `give_up` later, or stop()
// rethrows the last error.
template <class F, class Stop>
auto retry_transient(F&& f, Stop&& stop, std::chrono::milliseconds give_up = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + give_up;
  std::chrono::milliseconds backoff{50};
  while (true) {
    try {
      return f();
    } catch (const GatewayError& e) {
      if (is_fatal(e) || stop() || std::chrono::steady_clock::now() + backoff > deadline) throw;
    }
    pause_unless(stop, backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
  }
}

// Adds stream `stream` on `subject` alone, file storage, the server's
// defaults otherwise (no limits, a 2-minute duplicate window). Returns the
// client's status, `code` the JetStream error code.
natsStatus add_file_stream(jsCtx* js, const std::string& stream, const std::string& subject, jsErrCode& code);

// A JetStream API failure as one line: "stream 'X' not found", "permission
// denied ...", "no JetStream at ..." from the status and JetStream error code.
std::string js_error_text(const std::string& what, natsStatus s, jsErrCode code,
                          const std::string& async_error);

}  // namespace shmbus::nats
