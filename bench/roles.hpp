// shmbus-bench — the measuring loops, the same for every transport.
//
// A transport supplies a Sender (the producer's side: send one message to
// every consumer) and a Receiver (a consumer's side: hand over the messages
// that are available, waiting for at least one). The loops are templates over
// them, so no virtual call sits between the harness and a transport's
// send/receive: what is measured is the transport.
//
//   Sender:    bool send(const std::byte* p, std::size_t n);   // to all consumers
//              void finish();                                   // after the last send
//              void flush();     // optional: a sender that publishes in batches (the
//                                // reference ring) makes what it sent visible now; called
//                                // when the role is about to wait for something else
//   Receiver:  template <class F> long recv(F&& on_message, std::uint64_t timeout_ns);
//                 calls on_message(const std::byte* p, std::size_t n) for each message
//                 available (at least one unless it times out); returns how many,
//                 0 on timeout, -1 at end of stream or on error (error() says why).
//              const char* error() const;
//
// Timestamps come from one shared clock (common.hpp). A consumer stamps the
// receive time once per recv() call, when the first stamped message of the
// batch is handed over: the time the application could act on the batch. At
// full speed only every RunConfig::stamp_every-th message is stamped (its
// latency is a sample), so the clock is not what limits the rate; every
// message still has its sequence checked.
#pragma once

#include <emmintrin.h>
#include <sched.h>
#include <time.h>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common.hpp"

namespace bench {

inline constexpr std::uint64_t kForever = std::numeric_limits<std::uint64_t>::max();

inline void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  nanosleep(&ts, nullptr);
}

// A filler payload: header at the front, a fixed pattern behind it.
inline std::vector<std::byte> make_payload(std::size_t size) {
  std::vector<std::byte> b(size);
  for (std::size_t i = 0; i < size; ++i) b[i] = std::byte(i * 7 + 1);
  return b;
}

inline void put_header(std::byte* p, std::uint64_t seq, std::uint64_t ns) noexcept {
  const MsgHeader h{seq, ns};
  std::memcpy(p, &h, sizeof h);
}
inline MsgHeader get_header(const std::byte* p) noexcept {
  MsgHeader h;
  std::memcpy(&h, p, sizeof h);
  return h;
}

// Waits until `n` consumers have said they are ready, or the run is aborted.
inline bool wait_ready(Control& c, std::uint32_t n, const Clock& clk, std::uint64_t deadline) {
  while (c.ready.load(std::memory_order_acquire) < n) {
    if (c.abort.load(std::memory_order_relaxed) || clk.now() > deadline) return false;
    sleep_ms(1);
  }
  return true;
}

// The role is about to wait (for an echo, for the next message's due time):
// a batching sender publishes what it has. No-op for the others.
template <class Sender>
void flush(Sender& s) noexcept {
  if constexpr (requires { s.flush(); }) s.flush();
}

// The CPU time this thread spent since `from` (cpu_times()), user and system.
inline void charge_cpu(RoleResult& r, const CpuTimes& from) noexcept {
  const CpuTimes now = cpu_times();
  r.cpu_user_ns = now.user_ns - from.user_ns;
  r.cpu_sys_ns = now.sys_ns - from.sys_ns;
}

inline void finish_result(RoleResult& r, bool ok) {
  r.ok = ok ? 1u : 0u;
  r.done.store(1, std::memory_order_release);
}

// ---------------------------------------------------------------- producer
//
// Full speed: send `count` messages back to back, stamping every
// stamp_every-th with the time it is handed to the transport (0 in the rest). Fixed rate: message i is due at
// start + i / rate; the producer waits until then (spinning, yielding the CPU
// while more than 5 µs remain) and stamps the DUE time,
// so a send that is late (because the transport stalled) shows up as latency
// in every message behind it.
template <class Sender>
void producer_loop(Control& c, Sender& s) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.producer;
  Clock clk;
  clk.use(c.clock);
  const std::uint64_t deadline = clk.now() + cfg.timeout_ns;
  if (!wait_ready(c, cfg.consumers, clk, deadline)) {
    set_error(res, "consumers never became ready");
    finish_result(res, false);
    return;
  }
  if constexpr (requires { s.handshake(c, deadline); }) {
    if (!s.handshake(c, deadline)) {
      set_error(res, "subscribers never joined");
      finish_result(res, false);
      return;
    }
  }
  auto buf = make_payload(cfg.size);
  const std::uint64_t n = cfg.count;
  const auto cpu0 = cpu_times();
  const std::uint64_t start = clk.now();
  res.start_ns = start;
  c.go_ns.store(start, std::memory_order_release);
  bool ok = true;
  std::uint64_t i = 0;
  if (cfg.mode == Mode::rate) {
    const double interval = 1e9 / static_cast<double>(cfg.rate);
    for (; i < n; ++i) {
      const std::uint64_t due = start + static_cast<std::uint64_t>(static_cast<double>(i) * interval);
      // Spin until due, but yield while more than 5 µs remain: a consumer
      // that the scheduler put on this CPU gets to run instead of waiting for
      // the producer's time slice to end.
      std::uint64_t now = clk.now();
      if (now < due) flush(s);
      for (; now < due; now = clk.now()) {
        if (due - now > 5'000) sched_yield();
        else _mm_pause();
      }
      put_header(buf.data(), i, due);
      if (!s.send(buf.data(), buf.size())) {
        ok = false;
        break;
      }
    }
  } else {
    const std::uint64_t every = cfg.stamp_every ? cfg.stamp_every : 1;
    for (; i < n; ++i) {
      put_header(buf.data(), i, i % every == 0 ? clk.now() : 0);
      if (!s.send(buf.data(), buf.size())) {
        ok = false;
        break;
      }
    }
  }
  res.last_ns = clk.now();
  s.finish();
  charge_cpu(res, cpu0);
  res.wall_ns = res.last_ns - start;
  res.received = i;
  if (!ok) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "send failed at message %llu: %s",
                  static_cast<unsigned long long>(i), s.error());
    set_error(res, msg);
  }
  finish_result(res, ok);
}

// ---------------------------------------------------------------- consumer
//
// Receives until message count-1 arrives, checking that every message carries
// the next sequence number: a gap (loss), a repeat or a step back is counted
// as a sequence error and fails the run.
template <class Receiver>
void consumer_loop(Control& c, int id, Receiver& r) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.consumer[id];
  Clock clk;
  clk.use(c.clock);
  const std::uint64_t n = cfg.count;
  const std::uint64_t t_begin = clk.now();
  const std::uint64_t deadline = t_begin + cfg.timeout_ns;
  std::uint64_t expected = 0;
  std::uint64_t received = 0;
  std::uint64_t bad = 0;
  bool joined = false;
  bool stale = true;
  std::uint64_t now = 0;
  std::uint64_t first_ns = 0;
  bool done = n == 0;
  CpuTimes cpu0 = cpu_times();
  Histogram& hist = res.hist;
  hist.clear();
  const std::size_t size = cfg.size;

  auto on_message = [&](const std::byte* p, std::size_t len) {
    if (len < sizeof(MsgHeader)) {
      ++bad;
      return;
    }
    const MsgHeader h = get_header(p);
    if (h.seq == kWarmupSeq) {
      if (!joined) {
        joined = true;
        c.joined.fetch_add(1, std::memory_order_acq_rel);
      }
      return;
    }
    // The clock is read for stamped messages, and for the first and last
    // (they bound the measured interval).
    if (stale && (h.send_ns != 0 || received == 0 || h.seq + 1 >= n)) {
      now = clk.now();
      stale = false;
    }
    if (received == 0) {  // CPU use is measured from the first message on
      first_ns = now;
      cpu0 = cpu_times();
    }
    if (h.seq != expected || len != size) [[unlikely]] {
      if (bad == 0) {
        res.first_bad_expected = expected;
        res.first_bad_got = h.seq;
      }
      ++bad;
    }
    expected = h.seq + 1;
    ++received;
    if (h.send_ns != 0) hist.record(now > h.send_ns ? now - h.send_ns : 0);
    if (h.seq + 1 >= n) done = true;
  };

  c.ready.fetch_add(1, std::memory_order_acq_rel);
  const std::uint64_t wall0 = clk.now();
  const char* failure = nullptr;
  while (!done) {
    stale = true;
    const long got = r.recv(on_message, 100'000'000);  // 100 ms slices: notice an abort
    if (got < 0) {
      failure = r.error();
      break;
    }
    if (got == 0) {
      if (c.abort.load(std::memory_order_relaxed)) {
        failure = "aborted";
        break;
      }
      if (clk.now() > deadline) {
        failure = "timed out";
        break;
      }
    }
  }
  const std::uint64_t last = now;
  charge_cpu(res, cpu0);
  res.wall_ns = received ? last - first_ns : clk.now() - wall0;
  res.start_ns = wall0;
  res.first_ns = first_ns;
  res.last_ns = last;
  res.received = received;
  res.bad = bad;
  char msg[320];  // room for a receiver's whole error; set_error() keeps what fits
  if (failure) {
    std::snprintf(msg, sizeof msg, "after %llu of %llu messages: %s",
                  static_cast<unsigned long long>(received), static_cast<unsigned long long>(n),
                  failure);
    set_error(res, msg);
  } else if (bad || received != n) {
    std::snprintf(msg, sizeof msg,
                  "%llu sequence errors, %llu of %llu received (first: expected %llu, got %llu)",
                  static_cast<unsigned long long>(bad), static_cast<unsigned long long>(received),
                  static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(res.first_bad_expected),
                  static_cast<unsigned long long>(res.first_bad_got));
    set_error(res, msg);
  }
  finish_result(res, !failure && bad == 0 && received == n);
}

// ------------------------------------------------------------------- idle
//
// A consumer waits on a transport nobody sends on, for cfg.idle_ns, and
// reports its own CPU use over that time (getrusage). The producer side is
// attached but silent.
template <class Receiver>
void idle_consumer_loop(Control& c, int id, Receiver& r) {
  RoleResult& res = c.consumer[id];
  Clock clk;
  clk.use(c.clock);
  c.ready.fetch_add(1, std::memory_order_acq_rel);
  const auto cpu0 = cpu_times();
  const std::uint64_t t0 = clk.now();
  const std::uint64_t end = t0 + c.cfg.idle_ns;
  std::uint64_t got_total = 0;
  bool ok = true;
  for (std::uint64_t now = t0; now < end; now = clk.now()) {
    const long got = r.recv([&](const std::byte*, std::size_t) {}, end - now);
    if (got < 0) {
      set_error(res, r.error());
      ok = false;
      break;
    }
    got_total += static_cast<std::uint64_t>(got);
  }
  charge_cpu(res, cpu0);
  res.wall_ns = clk.now() - t0;
  res.received = got_total;
  if (got_total != 0 && ok) {
    set_error(res, "received messages on an idle transport");
    ok = false;
  }
  finish_result(res, ok);
}

template <class Sender>
void idle_producer_loop(Control& c, Sender& s) {
  RoleResult& res = c.producer;
  Clock clk;
  clk.use(c.clock);
  const std::uint64_t deadline = clk.now() + c.cfg.timeout_ns;
  bool ok = wait_ready(c, c.cfg.consumers, clk, deadline);
  while (ok && !c.consumer[0].done.load(std::memory_order_acquire)) {
    if (c.abort.load(std::memory_order_relaxed) || clk.now() > deadline) ok = false;
    sleep_ms(20);
  }
  s.finish();
  finish_result(res, ok);
}

// -------------------------------------------------------------- ping-pong
//
// The pinger (producer role) sends message i stamped with the send time and
// waits for the ponger (consumer 0) to echo it on the return channel; one-way
// latency is half the round trip. cfg.warmup round trips go first, unrecorded.
template <class Sender, class Receiver>
void ping_loop(Control& c, Sender& s, Receiver& r) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.producer;
  Clock clk;
  clk.use(c.clock);
  const std::uint64_t deadline = clk.now() + cfg.timeout_ns;
  if (!wait_ready(c, 1, clk, deadline)) {
    set_error(res, "the ponger never became ready");
    finish_result(res, false);
    return;
  }
  auto buf = make_payload(cfg.size);
  // Handshake: a warm-up message must make the round trip (ZeroMQ drops what
  // is published before a subscription has arrived).
  {
    bool back = false;
    std::uint64_t next_send = 0;
    while (!back) {
      const std::uint64_t now = clk.now();
      if (now > deadline || c.abort.load(std::memory_order_relaxed)) {
        set_error(res, "no echo of the handshake");
        finish_result(res, false);
        return;
      }
      if (now >= next_send) {
        put_header(buf.data(), kWarmupSeq, 0);
        if (!s.send(buf.data(), buf.size())) {
          set_error(res, s.error());
          finish_result(res, false);
          return;
        }
        flush(s);
        next_send = now + 5'000'000;
      }
      if (r.recv([&](const std::byte* p, std::size_t) { back |= get_header(p).seq == kWarmupSeq; },
                 1'000'000) < 0) {
        set_error(res, r.error());
        finish_result(res, false);
        return;
      }
    }
  }
  Histogram& hist = res.hist;
  hist.clear();
  const std::uint64_t total = cfg.warmup + cfg.count;
  const auto cpu0 = cpu_times();
  std::uint64_t start = clk.now();
  res.start_ns = start;
  c.go_ns.store(start, std::memory_order_release);
  std::uint64_t bad = 0;
  std::uint64_t done = 0;
  const char* failure = nullptr;
  for (std::uint64_t i = 0; i < total && !failure; ++i) {
    if (i == cfg.warmup) {
      start = clk.now();
      res.start_ns = start;
    }
    const std::uint64_t t = clk.now();
    put_header(buf.data(), i, t);
    if (!s.send(buf.data(), buf.size())) {
      failure = s.error();
      break;
    }
    flush(s);
    bool echoed = false;
    while (!echoed) {
      const long got = r.recv(
          [&](const std::byte* p, std::size_t len) {
            const MsgHeader h = get_header(p);
            if (h.seq == kWarmupSeq) return;  // a late handshake echo
            if (h.seq != i || len != cfg.size) ++bad;
            if (h.seq == i) echoed = true;
          },
          100'000'000);
      if (got < 0) {
        failure = r.error();
        break;
      }
      if (got == 0 && (c.abort.load(std::memory_order_relaxed) || clk.now() > deadline)) {
        failure = "timed out waiting for an echo";
        break;
      }
    }
    if (echoed && i >= cfg.warmup) {
      hist.record((clk.now() - t) / 2);
      ++done;
    }
  }
  res.last_ns = clk.now();
  s.finish();
  charge_cpu(res, cpu0);
  res.wall_ns = res.last_ns - start;
  res.received = done;
  res.bad = bad;
  if (failure) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "after %llu round trips: %s",
                  static_cast<unsigned long long>(done), failure);
    set_error(res, msg);
  } else if (bad) {
    set_error(res, "echo out of sequence");
  }
  finish_result(res, !failure && bad == 0 && done == cfg.count);
}

// The ponger echoes every message (handshake included) until it has echoed
// warmup + count numbered ones.
template <class Sender, class Receiver>
void pong_loop(Control& c, Sender& s, Receiver& r) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.consumer[0];
  Clock clk;
  clk.use(c.clock);
  const std::uint64_t deadline = clk.now() + cfg.timeout_ns;
  const std::uint64_t total = cfg.warmup + cfg.count;
  std::uint64_t echoed = 0;
  const char* failure = nullptr;
  c.ready.fetch_add(1, std::memory_order_acq_rel);
  const auto cpu0 = cpu_times();
  const std::uint64_t t0 = clk.now();
  while (echoed < total && !failure) {
    const long got = r.recv(
        [&](const std::byte* p, std::size_t len) {
          if (!failure && !s.send(p, len)) failure = s.error();
          if (get_header(p).seq != kWarmupSeq) ++echoed;
        },
        100'000'000);
    if (got > 0) flush(s);
    if (got < 0) {
      failure = r.error();
    } else if (got == 0 && (c.abort.load(std::memory_order_relaxed) || clk.now() > deadline)) {
      failure = "timed out";
    }
  }
  s.finish();
  charge_cpu(res, cpu0);
  res.wall_ns = clk.now() - t0;
  res.received = echoed;
  if (failure) set_error(res, failure);
  finish_result(res, !failure);
}

// Runs the role `role`/`id` of the run in `c` with transport-specific sender
// and receiver factories. Each transport file defines one of these.
void run_shmbus(Control& c, Role role, int id);
void run_bipc(Control& c, Role role, int id);
void run_stream(Control& c, Role role, int id);  // uds and pipe
void run_zmq(Control& c, Role role, int id);
void run_ring(Control& c, Role role, int id);  // the reference ring
void run_bridge(Control& c, Role role, int id);  // bus -> shmbus-bridge serve -> TCP subscriber
void run_tcp(Control& c, Role role, int id);     // a plain loopback TCP socket

// The `shmbus-bridge serve` process of a bridge run (transport_bridge.cpp).
struct BridgeServer {
  int pid = -1;
  int err_fd = -1;  // its stderr, read for the port it listens on
  std::uint32_t port = 0;
};
// Starts `program serve cfg.name --listen 127.0.0.1:0 --slow block` and
// waits for the port it listens on; throws with its one-line error.
BridgeServer bridge_start(const RunConfig& cfg, const std::string& program);
// SIGTERM, then SIGKILL after 5 s; returns an error if it needed the SIGKILL.
std::string bridge_stop(BridgeServer& s);
// n connected loopback TCP pairs: producer's end, consumer's end, ...
std::vector<int> tcp_pairs(std::uint32_t n);

}  // namespace bench
