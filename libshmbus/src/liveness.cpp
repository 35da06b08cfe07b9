// shmbus — naming the holders of roles (shmbus/liveness.hpp).
#include "shmbus/liveness.hpp"

#include "sys.hpp"

namespace shmbus {

bool in_other_pid_namespace(std::uint32_t pid_ns) noexcept {
  if (pid_ns == 0) return false;
  const std::uint32_t ours = detail::self_pid_namespace();
  return ours != 0 && ours != pid_ns;
}

std::string pid_label(pid_t pid, std::uint32_t pid_ns) {
  std::string s = "pid " + std::to_string(pid);
  if (in_other_pid_namespace(pid_ns)) s += " in another PID namespace";
  return s;
}

const char* to_string(Liveness l) noexcept {
  switch (l) {
    case Liveness::alive: return "alive";
    case Liveness::dead: return "dead";
    case Liveness::unknown: return "unknown";
  }
  return "?";
}

}  // namespace shmbus
