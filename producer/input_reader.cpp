#include "producer/input_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tools/common/program.hpp"

namespace shmbus::producer {

using tools::stop_requested;

InputReader::InputReader(int fd, bool binary, std::size_t max_message, Oversize oversize)
    : fd_(fd), binary_(binary), oversize_(oversize), max_message_(max_message),
      buf_(std::size_t{1} << 20) {}

InputReader::Status InputReader::next(std::span<const std::byte>& out, std::uint64_t& length) {
  for (;;) {
    if (!drop_pending()) {
      // Still inside an oversized message: drop what has arrived, read on.
    } else if (binary_) {
      if (end_ - begin_ >= 4) {
        std::uint32_t len;
        std::memcpy(&len, buf_.data() + begin_, 4);
        length = len;
        if (len > max_message_) {
          if (oversize_ == Oversize::error) {
            ++index_;
            length_known_ = true;
            return Status::too_long;
          }
          if (oversize_ == Oversize::skip) {
            ++index_;
            ++skipped_;
            begin_ += 4;
            drop_bytes_ = len;
            continue;
          }
          if (end_ - begin_ >= 4 + max_message_) {  // truncate: the first max bytes
            ++index_;
            ++truncated_;
            out = {buf_.data() + begin_ + 4, max_message_};
            begin_ += 4 + max_message_;
            drop_bytes_ = len - max_message_;
            return Status::message;
          }
        } else if (end_ - begin_ >= 4 + std::size_t{len}) {
          ++index_;
          out = {buf_.data() + begin_ + 4, len};
          begin_ += 4 + std::size_t{len};
          return Status::message;
        }
      }
    } else {
      const std::size_t avail = end_ - begin_;
      const void* nl = std::memchr(buf_.data() + begin_, '\n', avail);
      const std::size_t len =
          nl != nullptr ? static_cast<std::size_t>(static_cast<const std::byte*>(nl) - (buf_.data() + begin_)) : avail;
      if (len > max_message_) {
        length = len;
        ++index_;
        if (oversize_ == Oversize::error) {
          length_known_ = nl != nullptr || eof_;
          return Status::too_long;
        }
        drop_line_ = true;
        if (oversize_ == Oversize::skip) {
          ++skipped_;
          continue;
        }
        ++truncated_;
        out = {buf_.data() + begin_, max_message_};
        begin_ += max_message_;
        return Status::message;
      }
      if (nl != nullptr) {
        ++index_;
        length = len;
        out = {buf_.data() + begin_, len};
        begin_ += len + 1;
        return Status::message;
      }
      if (eof_ && avail > 0) {  // a last line without '\n'
        ++index_;
        length = avail;
        out = {buf_.data() + begin_, avail};
        begin_ = end_;
        return Status::message;
      }
    }
    if (eof_) return end_ == begin_ ? Status::end : Status::truncated;
    const Status s = fill();
    if (s != Status::message) return s;
  }
}

bool InputReader::drop_pending() {
  if (drop_bytes_ > 0) {
    const std::size_t n = std::min<std::uint64_t>(drop_bytes_, end_ - begin_);
    begin_ += n;
    drop_bytes_ -= n;
    return drop_bytes_ == 0;
  }
  if (drop_line_) {
    const std::size_t avail = end_ - begin_;
    const void* nl = std::memchr(buf_.data() + begin_, '\n', avail);
    if (nl == nullptr) {
      begin_ = end_;
      if (eof_) drop_line_ = false;
      return !drop_line_;
    }
    begin_ = static_cast<std::size_t>(static_cast<const std::byte*>(nl) - buf_.data()) + 1;
    drop_line_ = false;
  }
  return true;
}

InputReader::Status InputReader::fill() {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // Full, and what it holds is the start of one message: room for the
  // longest one a bus takes (a frame's 4-byte length, or a line and one byte
  // more to see that it is too long), grown as messages need it.
  const std::size_t most = max_message_ + 8;
  if (end_ == buf_.size() && buf_.size() < most) buf_.resize(std::min(2 * buf_.size(), most));
  const ssize_t n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
  if (n < 0) {
    if (errno == EINTR) return stop_requested() ? Status::interrupted : Status::message;
    errno_ = errno;
    return Status::io_error;
  }
  if (n == 0) eof_ = true;
  end_ += static_cast<std::size_t>(n);
  return Status::message;
}

}  // namespace shmbus::producer
