// shmbus-consumer — one run: open the source (a local bus or tcp://), read
// until the stream ends or a limit is reached, write the summary. Returns the
// exit status; throws tools::Failure (and the library's shmbus::Error) for
// run_main() to report.
#pragma once

#include "consumer/options.hpp"

namespace shmbus::consumer {

int run(const Options& o);

}  // namespace shmbus::consumer
