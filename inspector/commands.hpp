// shmbus-inspect — the subcommands. Each returns the process exit status:
//   0  success (check: the bus is clean)
//   1  the bus has problems (check; dump: a record with an impossible length),
//      the command was refused (rm), or an error
// and throws on errors (tools::Failure, shmbus::Error), which run_main()
// reports as one line on stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shmbus/bus.hpp"
#include "tools/common/failure.hpp"

namespace shmbus::inspect_tool {

// Whose segments the commands open besides the caller's own and root's.
void set_trust(Trust trust);
const Trust& inspect_trust();

// An error the program itself detects: "bus 'NAME': problem", exit 1, with
// `code` as the "code" of its JSON form (docs/inspector.md).
tools::Failure bus_failure(const std::string& bus, const std::string& problem, std::string code = "error");

int run_list(bool json);
int run_show(const std::string& bus, std::chrono::nanoseconds sample, bool json);

enum class DumpFormat { text, hex, json };
struct DumpArgs {
  std::string bus;
  std::optional<std::uint64_t> from;  // default: the oldest retained record
  std::optional<std::uint64_t> last;  // instead of --from: the newest N records
  std::uint64_t count = 10;           // 0: everything up to head
  DumpFormat format = DumpFormat::text;
};
int run_dump(const DumpArgs& args);

int run_watch(const std::string& bus, std::chrono::nanoseconds interval,
              std::optional<std::uint64_t> count, bool json);
int run_check(const std::string& bus, bool json);
int run_gc(const std::string& bus, const std::vector<std::string>& forget, bool json);
int run_rm(const std::string& bus, bool force, bool json);

}  // namespace shmbus::inspect_tool
