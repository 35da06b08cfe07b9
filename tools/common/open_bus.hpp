// shmbus tools — opening the bus a program works on, now or once it
// appears (--wait-for-bus).
#pragma once

#include <shmbus/shmbus.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace shmbus::tools {

// Bus::open(name, options); with `wait`, first waits up to that long
// (nanoseconds::max(): forever) for the name to appear. A bus appears under
// its name only once complete, so whatever is there is judged at once.
// Throws shmbus::Error, or Failure ("does not exist (waited ...)", or
// "stopped while waiting" on SIGINT/SIGTERM with install_stop_handlers()).
Bus open_bus_waiting(const std::string& name, const OpenOptions& options,
                     const std::optional<std::chrono::nanoseconds>& wait);

}  // namespace shmbus::tools
