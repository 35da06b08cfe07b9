// shmbus-bench — Unix domain stream sockets and pipes.
//
// Neither broadcasts: with N consumers the orchestrator makes N channels and
// the producer writes every message to each (one write() per message per
// consumer, as an application sending discrete messages would). A consumer
// reads whatever is available into a 64 KiB buffer and splits it into
// fixed-size messages.
//
// Descriptors (inherited across exec, numbers in RunConfig::fds):
//   full/rate/idle: fds[2i] producer's end, fds[2i+1] consumer i's end
//   ping-pong, uds:  fds[0] pinger's end, fds[1] ponger's end (one socketpair)
//   ping-pong, pipe: fds[0]/fds[1] ping write/read, fds[2]/fds[3] pong write/read
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "fd_io.hpp"
#include "roles.hpp"

namespace bench {
namespace {

class StreamSender {
 public:
  explicit StreamSender(std::vector<int> fds) : fds_(std::move(fds)) {}
  bool send(const std::byte* p, std::size_t n) noexcept {
    for (int fd : fds_) {
      if (!write_all(fd, p, n, err_)) return false;
    }
    return true;
  }
  void finish() noexcept {}
  const char* error() const noexcept { return err_ ? std::strerror(err_) : "write failed"; }

 private:
  std::vector<int> fds_;
  int err_ = 0;
};

class StreamReceiver : public StreamReading {
 public:
  StreamReceiver(int fd, std::size_t msg_size) : fd_(fd), size_(msg_size), buf_(64 * 1024) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    const int ready = wait_readable(fd_, timeout_ns);
    if (ready <= 0) return ready == 0 ? 0 : fail("poll", errno);
    do {
      if (read_more(fd_, buf_, have_) < 0) return -1;
    } while (have_ < size_);  // a partial message: read the rest
    long n = 0;
    std::size_t off = 0;
    for (; off + size_ <= have_; off += size_, ++n) on_message(buf_.data() + off, size_);
    have_ -= off;
    if (have_) std::memmove(buf_.data(), buf_.data() + off, have_);
    return n;
  }

 private:
  int fd_;
  std::size_t size_;
  std::vector<std::byte> buf_;
  std::size_t have_ = 0;
};

// Closes every inherited descriptor of the run except `keep`: a process must
// not hold another's end open (a reader would never see end of stream).
void close_others(const RunConfig& cfg, std::initializer_list<int> keep) {
  for (std::uint32_t i = 0; i < cfg.nfds; ++i) {
    bool mine = false;
    for (int k : keep) mine |= cfg.fds[i] == k;
    if (!mine) ::close(cfg.fds[i]);
  }
}

}  // namespace

void run_stream(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  const bool uds = cfg.transport == Transport::uds;
  if (cfg.mode == Mode::pingpong) {
    int out, in;
    if (uds) {
      out = in = role == Role::producer ? cfg.fds[0] : cfg.fds[1];
    } else if (role == Role::producer) {
      out = cfg.fds[0];
      in = cfg.fds[3];
    } else {
      out = cfg.fds[2];
      in = cfg.fds[1];
    }
    close_others(cfg, {out, in});
    StreamSender s({out});
    StreamReceiver r(in, cfg.size);
    if (role == Role::producer)
      ping_loop(c, s, r);
    else
      pong_loop(c, s, r);
    return;
  }
  if (role == Role::producer) {
    std::vector<int> outs;
    for (std::uint32_t i = 0; i < cfg.consumers; ++i) outs.push_back(cfg.fds[2 * i]);
    for (std::uint32_t i = 0; i < cfg.nfds; ++i)
      if (i % 2 == 1) ::close(cfg.fds[i]);
    StreamSender s(outs);
    if (cfg.mode == Mode::idle)
      idle_producer_loop(c, s);
    else
      producer_loop(c, s);
    for (int fd : outs) ::close(fd);
  } else {
    const int in = cfg.fds[2 * id + 1];
    close_others(cfg, {in});
    StreamReceiver r(in, cfg.size);
    if (cfg.mode == Mode::idle)
      idle_consumer_loop(c, id, r);
    else
      consumer_loop(c, id, r);
  }
}

}  // namespace bench
