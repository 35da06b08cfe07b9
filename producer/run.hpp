// shmbus-producer — one run: open or create the bus, attach, publish,
// mark end-of-stream (or leave the bus open), and print the summary.
#pragma once

#include <CLI/CLI.hpp>

#include "producer/options.hpp"

namespace shmbus::producer {

// The exit status. `app` says which options were given.
int run(const Options& o, const CLI::App& app);

}  // namespace shmbus::producer
