#include "consumer/output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <iterator>

#include "tools/common/message_format.hpp"

namespace shmbus::consumer {

void Output::write(const Message& m) {
  switch (format_) {
    case Format::text:
      tools::append_escaped_text(buf_, m.payload);
      buf_.push_back('\n');
      break;
    case Format::hex:
      fmt::format_to(std::back_inserter(buf_), "{} ", m.seq);
      tools::append_hex(buf_, m.payload);
      buf_.push_back('\n');
      break;
    case Format::json:
      tools::append_message_json(buf_, m.seq, m.timestamp_ns, m.payload, m.records);
      buf_.push_back('\n');
      break;
    case Format::binary: {
      // The frames shmbus-producer --binary reads: u32 little-endian length, bytes.
      const auto n = static_cast<std::uint32_t>(m.payload.size());
      const char len[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                           static_cast<char>(n >> 24)};
      buf_.append(len, len + 4);
      buf_.append(reinterpret_cast<const char*>(m.payload.data()),
                  reinterpret_cast<const char*>(m.payload.data()) + m.payload.size());
      break;
    }
    case Format::none:
      break;
  }
}

void Output::flush() {
  const char* p = buf_.data();
  std::size_t left = buf_.size();
  while (left > 0 && !closed_) {
    const ssize_t n = ::write(STDOUT_FILENO, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      closed_ = true;  // EPIPE or another error: nobody reads any more
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  buf_.clear();
}

}  // namespace shmbus::consumer
