// shmbus-inspect size — the options of a bus that takes the largest
// message and keeps what slow or late readers should find, from what its
// user knows (tools/common/sizing.hpp). Touches no bus.
#pragma once

#include <cstdint>
#include <string>

namespace shmbus::inspect_tool {

struct SizeArgs {
  std::string max_message;  // SIZE: the longest message the bus must take
  std::string message;      // SIZE: the usual message (picks the record size)
  std::string retain;       // N or DURATION@RATE usual messages to keep
  std::uint32_t record_size = 0;
  bool json = false;
};

// Prints "--record-size R --capacity C" on the first line, then what such a
// bus takes and holds (or one JSON object). Usage errors throw tools::Failure.
int run_size(const SizeArgs& args);

}  // namespace shmbus::inspect_tool
