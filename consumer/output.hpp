// shmbus-consumer — stdout: each message written in the --format chosen,
// buffered per batch. A closed pipe (EPIPE) stops the consumer quietly.
#pragma once

#include <fmt/format.h>
#include <shmbus/shmbus.hpp>

#include "consumer/options.hpp"

namespace shmbus::consumer {

class Output {
 public:
  explicit Output(Format format) : format_(format) {}

  // Appends `m` to the batch, in the format (tools/common/message_format.hpp).
  void write(const Message& m);
  // Writes the batch to stdout; after a failed write, closed() is true and
  // nothing more is written.
  void flush();
  bool pending() const noexcept { return buf_.size() > 0; }
  bool closed() const noexcept { return closed_; }

 private:
  Format format_;
  fmt::memory_buffer buf_;
  bool closed_ = false;
};

}  // namespace shmbus::consumer
