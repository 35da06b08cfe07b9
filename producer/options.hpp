// shmbus-producer — what the command line asks for, read into values.
#pragma once

#include <shmbus/shmbus.hpp>

#include <cstdint>
#include <string>

#include "producer/input_reader.hpp"
#include "tools/common/trust.hpp"

namespace shmbus::producer {

inline constexpr const char* kProgram = "shmbus-producer";

struct Options {
  std::string bus;
  bool create = false;
  bool as_is = false;  // --as-is: an existing bus with other options than given is used as it is
  std::uint64_t capacity = BusOptions{}.capacity;
  std::uint32_t record_size = BusOptions{}.record_size;
  Policy policy = Policy::block;
  std::string mode = "0600";
  std::uint32_t max_readers = BusOptions{}.max_readers;
  std::string max_message;  // --max-message SIZE (tools::parse_bytes); empty: not asked
  std::string file;
  bool binary = false;
  Oversize oversize = Oversize::error;
  std::uint64_t count = 0;
  bool synthetic = false;  // --count was given (even 0)
  std::string size = "64";  // --size N or MIN..MAX (tools::parse_size_range)
  double rate = 0;
  bool keep_open = false;
  std::string wait_timeout = "forever";
  std::uint32_t wait_for_readers = 0;
  std::string max_hold = "forever";
  WaitStrategy wait = WaitStrategy::adaptive;
  Timestamps timestamps = Timestamps::off;
  std::uint64_t stamp_every = 0;  // 0: 1 with --rate, 64 without
  bool json = false;
  tools::TrustArgs trust;
};

}  // namespace shmbus::producer
