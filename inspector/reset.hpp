// shmbus-inspect reset — moves a remembered reader name (a durable
// consumer's bookmark) so that the next consumer resuming under it starts
// elsewhere, like kafka-consumer-groups --reset-offsets.
#pragma once

#include <shmbus/inspect.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace shmbus::inspect_tool {

// --to: "earliest", "latest", a sequence number, or a time: UTC as
// "2026-11-22T03:53:43.767Z" or as dump prints it ("2026-11-22
// 03:53:43.767074832 UTC"), or "now-DURATION" ("now-5m"). Throws
// std::invalid_argument (a usage error) naming `text`.
ReaderNameTarget parse_reset_target(std::string_view text, std::uint64_t now_ns);

int run_reset(const std::string& bus, const std::string& reader, const std::string& to, bool json);

}  // namespace shmbus::inspect_tool
