// shmbus-bench — blocking descriptor I/O shared by the stream transports
// (pipe, Unix socket, plain TCP).
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "roles.hpp"

namespace bench {

// Writes all n bytes to fd. False with `err` set to errno on failure.
inline bool write_all(int fd, const std::byte* p, std::size_t n, int& err) noexcept {
  std::size_t off = 0;
  while (off < n) {
    const ssize_t w = ::write(fd, p + off, n - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      err = errno;
      return false;
    }
    off += static_cast<std::size_t>(w);
  }
  return true;
}

// Waits until fd is readable (kForever: returns at once, the read blocks).
// 1: readable (or waiting forever), 0: timed out or interrupted, -1: poll
// failed (errno set).
inline int wait_readable(int fd, std::uint64_t timeout_ns) noexcept {
  if (timeout_ns == kForever) return 1;
  pollfd pfd{fd, POLLIN, 0};
  const int r = ::poll(&pfd, 1, static_cast<int>((timeout_ns + 999'999) / 1'000'000));
  if (r < 0) return errno == EINTR ? 0 : -1;
  return r == 0 ? 0 : 1;
}

// The receiving side of a byte stream: reads what a descriptor has into a
// buffer, and keeps what went wrong for error() once recv() returned -1.
class StreamReading {
 public:
  const char* error() const noexcept { return err_; }

 protected:
  // Reads what `fd` has (at least a byte; EINTR retried) into buf[have..]
  // and adds it to `have`. The bytes read, or -1: a failed read, or the end
  // of the stream.
  long read_more(int fd, std::vector<std::byte>& buf, std::size_t& have) noexcept {
    for (;;) {
      const ssize_t got = ::read(fd, buf.data() + have, buf.size() - have);
      if (got < 0) {
        if (errno == EINTR) continue;
        return fail("read", errno);
      }
      if (got == 0) return fail("end of stream");
      have += static_cast<std::size_t>(got);
      return got;
    }
  }
  long fail(const char* what, int e) noexcept {
    std::snprintf(msg_, sizeof msg_, "%s: %s", what, std::strerror(e));
    err_ = msg_;
    return -1;
  }
  long fail(const char* what) noexcept {
    err_ = what;
    return -1;
  }

 private:
  const char* err_ = "";
  char msg_[96] = {};
};

}  // namespace bench
