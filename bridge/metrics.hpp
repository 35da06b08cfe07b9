// shmbus-bridge --metrics-listen: what `serve` and `mirror` count, in the
// Prometheus text format (docs/metrics.md, "shmbus-bridge and shmbus-nats").
#pragma once

#include <string>

#include "bridge/mirror.hpp"
#include "bridge/server.hpp"

namespace shmbus::bridge {

// `serve`'s counters; `bus` is the bus served.
std::string serve_metrics(const ServeStats& s, const ServeOptions& o);

// `mirror`'s counters; labelled with the local bus and the remote one.
std::string mirror_metrics(const MirrorStats& s, const MirrorOptions& o);

}  // namespace shmbus::bridge
