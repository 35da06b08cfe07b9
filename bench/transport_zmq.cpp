// shmbus-bench — ZeroMQ ipc:// PUB/SUB (Debian's libzmq).
//
// The producer binds an XPUB socket (a PUB that also sees subscriptions) with
// ZMQ_XPUB_NODROP: a plain PUB silently drops messages for a subscriber
// whose queue is at its high-water mark, which would fail every fast run on
// sequence errors; with NODROP a full subscriber queue blocks the send, the
// same back-pressure shmbus's `block` policy gives. Consumers are SUB sockets
// subscribed to everything. Default high-water marks (1000 messages).
//
// PUB/SUB drops what is published before a subscription reaches the
// publisher, so the producer sends handshake messages (sequence kWarmupSeq)
// every millisecond until every consumer has seen one; only then does the
// timed run start. Ping-pong uses two PUB/SUB pairs, one per direction.
#include <poll.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "roles.hpp"

namespace bench {

std::string zmq_endpoint(const RunConfig& cfg, const char* suffix) {
  return "ipc:///tmp/" + std::string(cfg.name) + "." + suffix;
}
void zmq_cleanup(const RunConfig& cfg) {
  for (const char* s : {"pub", "ping", "pong"})
    ::unlink(("/tmp/" + std::string(cfg.name) + "." + s).c_str());
}

namespace {

[[noreturn]] void zmq_fail(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + zmq_strerror(zmq_errno()));
}

class ZmqContext {
 public:
  ZmqContext() : ctx_(zmq_ctx_new()) {
    if (!ctx_) zmq_fail("zmq_ctx_new");
  }
  ~ZmqContext() { zmq_ctx_term(ctx_); }
  ZmqContext(const ZmqContext&) = delete;
  ZmqContext& operator=(const ZmqContext&) = delete;
  void* get() const { return ctx_; }

 private:
  void* ctx_;
};

class ZmqSocket {
 public:
  ZmqSocket(const ZmqContext& ctx, int type) : s_(zmq_socket(ctx.get(), type)) {
    if (!s_) zmq_fail("zmq_socket");
    int linger = 0;
    zmq_setsockopt(s_, ZMQ_LINGER, &linger, sizeof linger);
  }
  ~ZmqSocket() { zmq_close(s_); }
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;
  void* get() const { return s_; }

 private:
  void* s_;
};

// Which peers must be finished before a sender may close its socket.
enum class Peers { none, consumers, producer };

class ZmqSender {
 public:
  ZmqSender(const ZmqContext& ctx, const std::string& endpoint, Control& c, Peers wait_for)
      : sock_(ctx, ZMQ_XPUB), c_(c), wait_for_(wait_for) {
    int one = 1;
    if (zmq_setsockopt(sock_.get(), ZMQ_XPUB_NODROP, &one, sizeof one) != 0)
      zmq_fail("ZMQ_XPUB_NODROP");
    // Closing must not discard what is still queued for a slow subscriber.
    int linger = 10'000;
    zmq_setsockopt(sock_.get(), ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(sock_.get(), endpoint.c_str()) != 0) zmq_fail("zmq_bind");
  }
  bool send(const std::byte* p, std::size_t n) noexcept {
    for (;;) {
      if (zmq_send(sock_.get(), p, n, 0) >= 0) return true;
      if (zmq_errno() == EINTR) continue;
      if (zmq_errno() == EAGAIN) {  // NODROP at the high-water mark
        sched_yield();
        continue;
      }
      return false;
    }
  }
  // Sends handshake messages until every consumer has seen one.
  bool handshake(Control& c, std::uint64_t deadline) {
    Clock clk;
    clk.use(c.clock);
    std::vector<std::byte> buf(c.cfg.size);
    put_header(buf.data(), kWarmupSeq, 0);
    while (c.joined.load(std::memory_order_acquire) < c.cfg.consumers) {
      if (clk.now() > deadline || c.abort.load(std::memory_order_relaxed)) return false;
      if (zmq_send(sock_.get(), buf.data(), buf.size(), ZMQ_DONTWAIT) < 0 && zmq_errno() != EAGAIN)
        return false;
      sleep_ms(1);
    }
    return true;
  }
  // Messages still travelling when a PUB socket disconnects are lost, linger
  // or not (the subscriber's side drops what it had not yet queued), so the
  // sender keeps its socket open until its peers are finished.
  void finish() noexcept {
    Clock clk;
    clk.use(c_.clock);
    const std::uint64_t deadline = clk.now() + c_.cfg.timeout_ns;
    auto done = [&] {
      if (wait_for_ == Peers::none) return true;
      if (wait_for_ == Peers::producer) return c_.producer.done.load(std::memory_order_acquire) != 0;
      for (std::uint32_t i = 0; i < c_.cfg.consumers; ++i)
        if (!c_.consumer[i].done.load(std::memory_order_acquire)) return false;
      return true;
    };
    while (!done() && !c_.abort.load(std::memory_order_relaxed) && clk.now() < deadline) sleep_ms(1);
  }
  const char* error() const noexcept { return zmq_strerror(zmq_errno()); }

 private:
  ZmqSocket sock_;
  Control& c_;
  Peers wait_for_;
};

class ZmqReceiver {
 public:
  ZmqReceiver(const ZmqContext& ctx, const std::string& endpoint, std::size_t size)
      : sock_(ctx, ZMQ_SUB), buf_(size + 1) {
    int ivl = 10;  // the publisher may bind a moment later: retry quickly
    zmq_setsockopt(sock_.get(), ZMQ_RECONNECT_IVL, &ivl, sizeof ivl);
    if (zmq_setsockopt(sock_.get(), ZMQ_SUBSCRIBE, "", 0) != 0) zmq_fail("ZMQ_SUBSCRIBE");
    if (zmq_connect(sock_.get(), endpoint.c_str()) != 0) zmq_fail("zmq_connect");
  }
  // One message per call.
  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    int flags = 0;
    if (timeout_ns != kForever) {
      zmq_pollitem_t item{sock_.get(), 0, ZMQ_POLLIN, 0};
      const long ms = static_cast<long>((timeout_ns + 999'999) / 1'000'000);
      const int r = zmq_poll(&item, 1, ms);
      if (r < 0) return zmq_errno() == EINTR ? 0 : -1;
      if (r == 0) return 0;
      flags = ZMQ_DONTWAIT;
    }
    const int n = zmq_recv(sock_.get(), buf_.data(), buf_.size(), flags);
    if (n < 0) return zmq_errno() == EINTR || zmq_errno() == EAGAIN ? 0 : -1;
    on_message(buf_.data(), static_cast<std::size_t>(n));
    return 1;
  }
  const char* error() const noexcept { return zmq_strerror(zmq_errno()); }

 private:
  ZmqSocket sock_;
  std::vector<std::byte> buf_;
};

}  // namespace

void run_zmq(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  ZmqContext ctx;
  if (cfg.mode == Mode::pingpong) {
    const auto ping = zmq_endpoint(cfg, "ping");
    const auto pong = zmq_endpoint(cfg, "pong");
    if (role == Role::producer) {
      ZmqSender s(ctx, ping, c, Peers::none);  // the ponger waits for the pinger
      ZmqReceiver r(ctx, pong, cfg.size);
      ping_loop(c, s, r);
    } else {
      ZmqSender s(ctx, pong, c, Peers::producer);
      ZmqReceiver r(ctx, ping, cfg.size);
      pong_loop(c, s, r);
    }
    return;
  }
  const auto ep = zmq_endpoint(cfg, "pub");
  if (role == Role::producer) {
    ZmqSender s(ctx, ep, c, Peers::consumers);
    if (cfg.mode == Mode::idle)
      idle_producer_loop(c, s);
    else
      producer_loop(c, s);
  } else {
    ZmqReceiver r(ctx, ep, cfg.size);
    if (cfg.mode == Mode::idle)
      idle_consumer_loop(c, id, r);
    else
      consumer_loop(c, id, r);
  }
}

}  // namespace bench
