// shmbus-nats --metrics-listen: what `out` and `in` count, in the Prometheus
// text format (docs/metrics.md, "shmbus-bridge and shmbus-nats").
#pragma once

#include <string>

#include "nats/in.hpp"
#include "nats/out.hpp"

namespace shmbus::nats {

// Labelled with the bus and the stream (and for `in` the durable consumer).
std::string out_metrics(const OutStats& s, const OutOptions& o);
std::string in_metrics(const InStats& s, const InOptions& o);

}  // namespace shmbus::nats
