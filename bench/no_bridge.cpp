// shmbus-bench without bridge/ (a build with SHMBUS_BUILD_PROGRAMS=OFF):
// built instead of transport_bridge.cpp, so the bridge and tcp transports
// refuse to run before any process is spawned, and the child side of them
// is never reached.
#include <stdexcept>
#include <string>
#include <vector>

#include "roles.hpp"

namespace bench {

BridgeServer bridge_start(const RunConfig&, const std::string&) {
  throw std::runtime_error("bridge: shmbus-bench was built without bridge/");
}
std::string bridge_stop(BridgeServer&) { return {}; }
std::vector<int> tcp_pairs(std::uint32_t) {
  throw std::runtime_error("tcp: shmbus-bench was built without bridge/");
}
void run_bridge(Control&, Role, int) {}
void run_tcp(Control&, Role, int) {}

}  // namespace bench
