#include "tools/common/bus_dir.hpp"

#include <shmbus/bus.hpp>

namespace shmbus::tools {

CLI::Option* add_dir_option(CLI::App& app, std::string& dir) {
  return app
      .add_option("--dir", dir,
                  "directory of the bus segments, on tmpfs or hugetlbfs (default: $SHMBUS_DIR, else "
                  "/dev/shm); every program of a bus must name the same one")
      ->type_name("DIR");
}

void apply_dir(const std::string& dir) {
  if (dir.empty()) {
    check_bus_dir();
  } else {
    set_bus_dir(dir);
  }
}

}  // namespace shmbus::tools
