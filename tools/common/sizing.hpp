// shmbus tools — sizing a bus from what its user knows: the largest
// message, the usual one, and how much a slow or late reader should still
// find. The one rule behind it is the library's (shmbus/placement.hpp): a
// bus takes every message up to capacity x record size / 2 - 24 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shmbus::tools {

// A byte count on the command line: "100" or "100B", "64K"/"64KiB",
// "1M"/"1MiB", "2G"/"2GiB" (powers of 1024), "1kB"/"1MB"/"1GB" (powers of
// 1000); a fraction ("1.5MiB") is rounded up to whole bytes. Throws
// std::invalid_argument with one line naming `option` and `text`.
std::uint64_t parse_bytes(std::string_view text, std::string_view option);

// How much a ring should retain: N messages, or DURATION@RATE, messages of
// that rate for that long ("2s@50000/s", "500ms@1e6", "1m@200/s"). Throws
// std::invalid_argument naming `text`.
std::uint64_t parse_retention(std::string_view text);

struct SizingAsk {
  std::uint64_t max_message = 0;   // the longest message the bus must take (0: one record's)
  std::uint64_t message = 0;       // the usual message (0: the default record size's payload)
  std::uint64_t retain = 0;        // usual messages the ring should hold besides
  std::uint32_t record_size = 0;   // 0: the fewest 64-byte lines that hold `message`
};

struct Sizing {
  std::uint32_t record_size = 0;
  std::uint64_t capacity = 0;
  std::uint32_t max_message = 0;   // what such a bus takes (BusInfo::max_message)
  std::uint64_t ring_bytes = 0;    // capacity x record size
  std::uint64_t retains = 0;       // usual messages the ring holds
  std::string decided_by;          // what set the capacity: "max message", "retain" or "minimum"
};

// The smallest bus (records, then ring) that takes `ask.max_message`,
// holds `ask.retain` usual messages and has at least 64 records. Throws
// std::invalid_argument with one line when no bus does (a message over
// 1 GiB, a ring over 2^32 records, a record over 1 MiB).
Sizing size_bus(const SizingAsk& ask);

}  // namespace shmbus::tools
