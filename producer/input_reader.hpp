// shmbus-producer — the input: lines or length-prefixed frames read from a
// file descriptor, handed out one message at a time without a copy or an
// allocation per message, with oversized messages refused, skipped or
// truncated (--oversize).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shmbus::producer {

// What to do with an input message longer than the bus's max message.
enum class Oversize { error, skip, truncate };

// Reads messages from a file descriptor into one reusable buffer: lines
// (without their '\n'), or frames of a u32 little-endian length followed by
// that many bytes. Hands out views into the buffer, which grows to hold the
// longest message seen (up to max_message); no allocation per message.
// Oversized messages are refused (Status::too_long), skipped or truncated.
class InputReader {
 public:
  enum class Status { message, end, too_long, truncated, io_error, interrupted };

  InputReader(int fd, bool binary, std::size_t max_message, Oversize oversize);

  // On Status::message, `out` views the message; on too_long, `length` is
  // its size (for a line: at least that) and index() is its number.
  Status next(std::span<const std::byte>& out, std::uint64_t& length);

  int error() const noexcept { return errno_; }
  // 1-based number of the last line or frame taken from the input (the
  // oversized one, after Status::too_long).
  std::uint64_t index() const noexcept { return index_; }
  // After Status::too_long: false if `length` is only what has arrived so far.
  bool length_known() const noexcept { return length_known_; }
  std::uint64_t skipped() const noexcept { return skipped_; }
  std::uint64_t truncated() const noexcept { return truncated_; }

 private:
  // Drops the rest of an oversized message from the buffer. True when
  // nothing is left to drop.
  bool drop_pending();

  // Reads more input behind what is buffered (moving that to the front).
  Status fill();

  int fd_;
  bool binary_;
  Oversize oversize_;
  std::size_t max_message_;
  std::uint64_t index_ = 0;
  std::uint64_t skipped_ = 0;
  std::uint64_t truncated_ = 0;
  std::uint64_t drop_bytes_ = 0;  // binary: bytes of an oversized frame still to drop
  bool drop_line_ = false;        // text: dropping the rest of an oversized line
  bool length_known_ = true;
  std::vector<std::byte> buf_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool eof_ = false;
  int errno_ = 0;
};

}  // namespace shmbus::producer
