// shmbus-bench — the TCP bridge, and the plain TCP socket it is judged by.
//
// bridge: the producer publishes to a shmbus bus exactly as the `shmbus`
// transport does; the orchestrator runs the real `shmbus-bridge serve BUS
// --listen 127.0.0.1:0 --slow block` (the program users run, spawned by path)
// and each consumer subscribes to it over loopback with the bridge's own
// client (bridge/client.hpp, what `shmbus-consumer tcp://` and `mirror` use).
// `--slow block` makes the chain lossless end to end like every other row:
// a subscriber that falls behind holds the bus's producer back. The serve
// process is not pinned (--cpus places the producer and the consumers).
//
// tcp: what the bridge is measured against — one loopback TCP connection per
// consumer (TCP_NODELAY, as the bridge sets), made by the orchestrator; the
// producer writes each message with the bridge's per-message header in front
// (sequence, timestamp, length: 24 bytes, docs/protocol.md "batch") into a
// 64 KiB buffer and write()s it when full or when it is about to wait (rate
// mode), as the bridge writes batches; the consumer read()s 256 KiB at a time
// and splits the records. The bridge's 16 bytes per frame (header + count) are
// left out: at most a few per 64 KiB.
//
// catchup (both): the backlog is there before the subscriber starts. bridge:
// the producer publishes every message into a bus that holds them all (its
// capacity is raised to fit), closes it, and only then lets the subscriber
// connect to `serve`, run with its default options as users run it; the
// clock starts when the subscriber is let go, so the connection and the
// handshake are part of the catch-up. tcp: the producer encodes every record
// (the same 24-byte header and payload) into memory first, then, once the
// consumer is waiting, writes it out 64 KiB at a time. The consumer reads as
// in full mode. Messages carry no send time (a backlog's age is not a
// latency): only msgs/s and MB/s are reported.
//
// Descriptors (tcp): fds[2i] producer's end, fds[2i+1] consumer i's end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "bridge/client.hpp"
#include "fd_io.hpp"
#include "roles.hpp"
#include "shmbus/shmbus.hpp"

namespace bench {

namespace {

constexpr std::size_t kRecordHeader = 24;  // seq u64, timestamp u64, length u32, reserved u32

// Closes every inherited descriptor of the run except `keep`.
void close_all_but(const RunConfig& cfg, int keep) {
  for (std::uint32_t i = 0; i < cfg.nfds; ++i)
    if (cfg.fds[i] != keep) ::close(cfg.fds[i]);
}

// ------------------------------------------------------------------ bridge

class BridgeReceiver {
 public:
  explicit BridgeReceiver(const RunConfig& cfg) : client_(options(cfg)) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    try {
      const auto wait = timeout_ns == kForever
                            ? std::chrono::milliseconds::max()
                            : std::chrono::milliseconds((timeout_ns + 999'999) / 1'000'000);
      const shmbus::bridge::Event ev = client_.next(wait);
      switch (ev.kind) {
        case shmbus::bridge::Event::Kind::none:
          return 0;
        case shmbus::bridge::Event::Kind::batch: {
          long n = 0;
          for (const shmbus::bridge::BatchMessage m : ev.batch) {
            on_message(m.payload.data(), m.payload.size());
            ++n;
          }
          return n;
        }
        case shmbus::bridge::Event::Kind::loss:
          return fail("the bridge reported a loss");
        case shmbus::bridge::Event::Kind::end:
          return fail("end of stream");
      }
      return fail("unknown event");
    } catch (const std::exception& e) {
      return fail(e.what());
    }
  }
  const char* error() const noexcept { return msg_; }

 private:
  static shmbus::bridge::ClientOptions options(const RunConfig& cfg) {
    shmbus::bridge::ClientOptions o;
    o.host = "127.0.0.1";
    o.port = static_cast<std::uint16_t>(cfg.port);
    o.bus = cfg.name;
    o.start = shmbus::bridge::StartKind::earliest;
    return o;
  }
  long fail(const char* what) noexcept {
    std::snprintf(msg_, sizeof msg_, "%s", what);
    return -1;
  }
  shmbus::bridge::Client client_;
  char msg_[160] = {};
};

// --------------------------------------------------------------------- tcp

class TcpSender {
 public:
  explicit TcpSender(std::vector<int> fds) : fds_(std::move(fds)) {
    buf_.reserve(kFlushAt + 65536 + kRecordHeader);
  }
  bool send(const std::byte* p, std::size_t n) noexcept {
    unsigned char h[kRecordHeader] = {};
    std::memcpy(h, &seq_, 8);  // little-endian hosts only, as the bench is x86
    const auto len = static_cast<std::uint32_t>(n);
    std::memcpy(h + 16, &len, 4);
    ++seq_;
    const std::size_t at = buf_.size();
    buf_.resize(at + kRecordHeader + n);
    std::memcpy(buf_.data() + at, h, kRecordHeader);
    std::memcpy(buf_.data() + at + kRecordHeader, p, n);
    return buf_.size() < kFlushAt || write_out();
  }
  void flush() noexcept { write_out(); }
  void finish() noexcept { write_out(); }
  const char* error() const noexcept { return err_ ? std::strerror(err_) : "write failed"; }

 private:
  static constexpr std::size_t kFlushAt = 64 * 1024;
  bool write_out() noexcept {
    if (err_) return false;
    for (int fd : fds_) {
      if (!write_all(fd, buf_.data(), buf_.size(), err_)) return false;
    }
    buf_.clear();
    return true;
  }
  std::vector<int> fds_;
  std::vector<std::byte> buf_;
  std::uint64_t seq_ = 0;
  int err_ = 0;
};

class TcpReceiver : public StreamReading {
 public:
  explicit TcpReceiver(int fd) : fd_(fd), buf_(256 * 1024) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    const int ready = wait_readable(fd_, timeout_ns);
    if (ready <= 0) return ready == 0 ? 0 : fail("poll", errno);
    long n = 0;
    while (n == 0) {
      if (read_more(fd_, buf_, have_) < 0) return -1;
      std::size_t off = 0;
      while (have_ - off >= kRecordHeader) {
        std::uint64_t seq;
        std::uint32_t len;
        std::memcpy(&seq, buf_.data() + off, 8);
        std::memcpy(&len, buf_.data() + off + 16, 4);
        if (seq != next_seq_ || len > buf_.size() - kRecordHeader) return fail("bad record header");
        if (have_ - off < kRecordHeader + len) break;
        on_message(buf_.data() + off + kRecordHeader, len);
        ++next_seq_;
        ++n;
        off += kRecordHeader + len;
      }
      have_ -= off;
      if (have_) std::memmove(buf_.data(), buf_.data() + off, have_);
    }
    return n;
  }

 private:
  int fd_;
  std::vector<std::byte> buf_;
  std::size_t have_ = 0;
  std::uint64_t next_seq_ = 0;
};

}  // namespace

// ------------------------------------------------------- orchestrator side

BridgeServer bridge_start(const RunConfig& cfg, const std::string& program) {
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(err[1], 2);
    // A catch-up is measured with serve's defaults (--slow disconnect: the
    // ring is the subscriber's buffer); the streaming modes with --slow block.
    const char* argv[] = {program.c_str(), "serve", cfg.name, "--listen", "127.0.0.1:0", "--stats-interval", "0",
                          "--slow", "block", nullptr};
    if (cfg.mode == Mode::catchup) argv[7] = nullptr;
    execv(program.c_str(), const_cast<char* const*>(argv));
    std::fprintf(stderr, "exec %s: %s\n", program.c_str(), std::strerror(errno));
    _exit(127);
  }
  ::close(err[1]);
  BridgeServer s{pid, err[0], 0};
  // The first line says where it listens: "... serving bus 'NAME' on 127.0.0.1:PORT (--slow
  // block)".
  std::string line;
  const std::uint64_t deadline = mono_ns() + 10'000'000'000ull;
  while (line.find('\n') == std::string::npos) {
    pollfd pfd{err[0], POLLIN, 0};
    const std::uint64_t now = mono_ns();
    if (now > deadline || ::poll(&pfd, 1, static_cast<int>((deadline - now) / 1'000'000) + 1) <= 0)
      break;
    char b[256];
    const ssize_t got = ::read(err[0], b, sizeof b);
    if (got <= 0) break;
    line.append(b, static_cast<std::size_t>(got));
  }
  const auto at = line.find("127.0.0.1:");
  if (at != std::string::npos)
    s.port = static_cast<std::uint32_t>(std::strtoul(line.c_str() + at + 10, nullptr, 10));
  if (s.port == 0) {
    bridge_stop(s);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    throw std::runtime_error("shmbus-bridge serve did not start: " +
                             (line.empty() ? program : line));
  }
  return s;
}

std::string bridge_stop(BridgeServer& s) {
  std::string out;
  if (s.pid > 0) {
    ::kill(s.pid, SIGTERM);
    const std::uint64_t deadline = mono_ns() + 5'000'000'000ull;
    int st = 0;
    while (::waitpid(s.pid, &st, WNOHANG) == 0) {
      if (mono_ns() > deadline) {
        ::kill(s.pid, SIGKILL);
        ::waitpid(s.pid, &st, 0);
        out = "shmbus-bridge serve did not stop on SIGTERM";
        break;
      }
      sleep_ms(5);
    }
    s.pid = -1;
  }
  if (s.err_fd >= 0) {
    ::close(s.err_fd);
    s.err_fd = -1;
  }
  return out;
}

std::vector<int> tcp_pairs(std::uint32_t n) {
  auto fail = [](const char* what) {
    throw std::runtime_error(std::string("tcp ") + what + ": " + std::strerror(errno));
  };
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) fail("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 16) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    ::close(lfd);
    fail("listen");
  }
  std::vector<int> fds;
  for (std::uint32_t i = 0; i < n; ++i) {
    const int out = ::socket(AF_INET, SOCK_STREAM, 0);
    if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) fail("connect");
    const int in = ::accept(lfd, nullptr, nullptr);
    if (in < 0) fail("accept");
    const int one = 1;
    ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fds.push_back(out);  // producer's end
    fds.push_back(in);   // consumer's end
  }
  ::close(lfd);
  return fds;
}

// ------------------------------------------------------------ the roles

// Both measure throughput and latency at a rate; ping-pong and idle are
// refused with the reason in the result.
bool refuse_mode(Control& c, Role role, int id, const char* transport) {
  if (c.cfg.mode != Mode::pingpong && c.cfg.mode != Mode::idle) return false;
  RoleResult& r = role == Role::producer ? c.producer : c.consumer[id];
  char what[64];
  std::snprintf(what, sizeof what, "%s: full and rate modes only", transport);
  set_error(r, what);
  finish_result(r, false);
  return true;
}

namespace {

// Lets the consumers go: the backlog is complete, and the clock starts.
void release_consumers(Control& c, std::uint64_t now) {
  c.producer.start_ns = now;
  c.go_ns.store(now, std::memory_order_release);
}

// Waits until the producer has released the consumers, or the run is aborted.
bool wait_released(Control& c) {
  const std::uint64_t deadline = mono_ns() + c.cfg.timeout_ns;
  while (c.go_ns.load(std::memory_order_acquire) == 0) {
    if (c.abort.load(std::memory_order_relaxed) || mono_ns() > deadline) return false;
    sleep_ms(1);
  }
  return true;
}

// catchup, bridge: every message into the bus (which holds them all), the
// end of the stream marked, then the subscribers are let go.
void bridge_catchup_producer(Control& c) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.producer;
  Clock clk;
  clk.use(c.clock);
  try {
    shmbus::Producer p(shmbus::Bus::open(cfg.name));
    auto buf = make_payload(cfg.size);
    for (std::uint64_t i = 0; i < cfg.count; ++i) {
      put_header(buf.data(), i, 0);
      const auto r = p.publish(std::span<const std::byte>(buf.data(), buf.size()));
      if (!r) throw std::runtime_error(std::string("publish: ") + shmbus::to_string(r.status));
    }
    p.close();
    res.received = cfg.count;
  } catch (const std::exception& e) {
    set_error(res, e.what());
    finish_result(res, false);
    c.abort.store(1);
    return;
  }
  const std::uint64_t now = clk.now();
  release_consumers(c, now);
  res.last_ns = now;
  finish_result(res, true);
}

// catchup, tcp: every record encoded in memory first; once the consumers
// wait, written out as fast as the socket takes it.
void tcp_catchup_producer(Control& c, const std::vector<int>& outs) {
  const RunConfig& cfg = c.cfg;
  RoleResult& res = c.producer;
  Clock clk;
  clk.use(c.clock);
  const std::size_t rec = kRecordHeader + cfg.size;
  std::vector<std::byte> all(rec * cfg.count);
  auto payload = make_payload(cfg.size);
  for (std::uint64_t i = 0; i < cfg.count; ++i) {
    std::byte* at = all.data() + i * rec;
    std::memset(at, 0, kRecordHeader);
    std::memcpy(at, &i, 8);  // little-endian hosts only, as the bench is x86
    const auto len = static_cast<std::uint32_t>(cfg.size);
    std::memcpy(at + 16, &len, 4);
    put_header(payload.data(), i, 0);
    std::memcpy(at + kRecordHeader, payload.data(), cfg.size);
  }
  if (!wait_ready(c, cfg.consumers, clk, clk.now() + cfg.timeout_ns)) {
    set_error(res, "consumers never became ready");
    finish_result(res, false);
    return;
  }
  const auto cpu0 = cpu_times();
  const std::uint64_t start = clk.now();
  release_consumers(c, start);
  int err = 0;
  bool ok = true;
  constexpr std::size_t kWrite = 64 * 1024;
  for (std::size_t off = 0; ok && off < all.size(); off += kWrite) {
    const std::size_t n = std::min(kWrite, all.size() - off);
    for (int fd : outs) ok = ok && write_all(fd, all.data() + off, n, err);
  }
  res.last_ns = clk.now();
  const auto cpu1 = cpu_times();
  res.cpu_user_ns = cpu1.user_ns - cpu0.user_ns;
  res.cpu_sys_ns = cpu1.sys_ns - cpu0.sys_ns;
  res.wall_ns = res.last_ns - start;
  res.received = ok ? cfg.count : 0;
  if (!ok) set_error(res, err ? std::strerror(err) : "write failed");
  finish_result(res, ok);
}

}  // namespace

void run_bridge(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  if (refuse_mode(c, role, id, "bridge")) return;
  const auto subscribe_and_read = [&] {
    try {
      BridgeReceiver r(cfg);
      consumer_loop(c, id, r);
    } catch (const std::exception& e) {
      set_error(c.consumer[id], e.what());
      finish_result(c.consumer[id], false);
    }
  };
  if (cfg.mode == Mode::catchup) {
    if (role == Role::producer) {
      bridge_catchup_producer(c);
      return;
    }
    // Subscribe only once the backlog is complete.
    if (!wait_released(c)) {
      set_error(c.consumer[id], "the backlog never became ready");
      finish_result(c.consumer[id], false);
      return;
    }
    subscribe_and_read();
    return;
  }
  if (role == Role::producer) {
    run_shmbus(c, role, id);  // a producer on the bus, waiting for the bridge's reader slots
    return;
  }
  // Connect and subscribe before saying ready: the handshake attaches this
  // subscriber's reader slot on the bus, so the producer's first message is
  // held for it.
  subscribe_and_read();
}

void run_tcp(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  if (refuse_mode(c, role, id, "tcp")) return;
  if (role == Role::producer) {
    std::vector<int> outs;
    for (std::uint32_t i = 0; i < cfg.consumers; ++i) outs.push_back(cfg.fds[2 * i]);
    for (std::uint32_t i = 0; i < cfg.nfds; ++i)
      if (i % 2 == 1) ::close(cfg.fds[i]);
    if (cfg.mode == Mode::catchup) {
      tcp_catchup_producer(c, outs);
    } else {
      TcpSender s(outs);
      producer_loop(c, s);
    }
    for (int fd : outs) ::close(fd);
  } else {
    const int in = cfg.fds[2 * id + 1];
    close_all_but(cfg, in);
    TcpReceiver r(in);
    consumer_loop(c, id, r);
  }
}

}  // namespace bench
