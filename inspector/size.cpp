#include "inspector/size.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <stdexcept>

#include "inspector/text.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/sizing.hpp"

namespace shmbus::inspect_tool {

int run_size(const SizeArgs& a) {
  tools::SizingAsk ask;
  tools::Sizing s;
  try {
    if (!a.max_message.empty()) ask.max_message = tools::parse_bytes(a.max_message, "--max-message");
    if (!a.message.empty()) ask.message = tools::parse_bytes(a.message, "--message");
    if (!a.retain.empty()) ask.retain = tools::parse_retention(a.retain);
    ask.record_size = a.record_size;
    s = tools::size_bus(ask);
  } catch (const std::invalid_argument& e) {
    throw tools::Failure(tools::exit_usage, e.what(), "usage");
  }
  const std::uint64_t usual = ask.message != 0 ? ask.message : s.record_size - 24;
  if (a.json) {
    const nlohmann::ordered_json j{{"record_size", s.record_size}, {"capacity", s.capacity},
                                   {"max_message", s.max_message}, {"ring_bytes", s.ring_bytes},
                                   {"retains", s.retains},         {"message", usual},
                                   {"decided_by", s.decided_by}};
    std::puts(j.dump().c_str());
    return 0;
  }
  std::fputs(fmt::format("--record-size {} --capacity {}\n"
                         "ring {} ({} records of {} bytes); takes messages of up to {} bytes; holds {} messages "
                         "of {} bytes; the capacity is set by the {}\n",
                         s.record_size, s.capacity, human_bytes(s.ring_bytes), s.capacity, s.record_size,
                         s.max_message, s.retains, usual, s.decided_by)
                 .c_str(),
             stdout);
  return 0;
}

}  // namespace shmbus::inspect_tool
