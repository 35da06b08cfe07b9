#include "tools/common/open_bus.hpp"

#include <fmt/format.h>

#include <thread>

#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/program.hpp"

namespace shmbus::tools {

Bus open_bus_waiting(const std::string& name, const OpenOptions& options,
                     const std::optional<std::chrono::nanoseconds>& wait) {
  if (!wait) return Bus::open(name, options);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (Bus::exists(name)) {
      try {
        return Bus::open(name, options);
      } catch (const Error& e) {
        if (e.errc() != Errc::not_found) throw;  // else removed again: wait on
      }
    }
    if (stop_requested()) {
      throw Failure(exit_failure, fmt::format("bus '{}': stopped while waiting for it to exist", name),
                    "interrupted");
    }
    if (*wait != std::chrono::nanoseconds::max() && std::chrono::steady_clock::now() - start >= *wait) {
      throw Failure(exit_failure, fmt::format("bus '{}': does not exist (waited {})", name, format_duration(*wait)),
                    "not_found");
    }
    // Setup path only: a short sleep between looks is fine here.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace shmbus::tools
