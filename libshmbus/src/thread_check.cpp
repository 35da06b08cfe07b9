// shmbus — see thread_check.hpp.
#include "thread_check.hpp"

namespace shmbus::detail {

bool thread_checks_built() noexcept {
#if SHMBUS_THREAD_CHECKS
  return true;
#else
  return false;
#endif
}

}  // namespace shmbus::detail
