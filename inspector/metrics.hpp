// shmbus-inspect metrics — the counters of buses in the Prometheus text
// exposition format, printed once or served over HTTP for a scraper.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shmbus/bus.hpp"

namespace shmbus::inspect_tool {

struct MetricsArgs {
  std::vector<std::string> buses;  // empty: every bus on the machine
  std::string listen;              // "HOST:PORT" to serve over HTTP; empty: print once
};

// What a server remembers from one scrape to the next, so that a counter
// never goes backwards: shmbus_producer_wait_seconds_total by bus (name and
// creation time).
struct MetricsMemory {
  std::map<std::string, double> wait_seconds;
};

// Every metric of `buses` (all buses if empty) as Prometheus text (format
// 0.0.4, which OpenMetrics scrapers accept too). A bus that cannot be opened
// is reported with shmbus_bus_up 0 and does not stop the others. `memory`
// (may be null) carries what a server keeps between scrapes.
std::string render_metrics(const std::vector<std::string>& buses, const Trust& trust,
                           MetricsMemory* memory = nullptr);

// Prints the metrics once, or (args.listen) serves GET /metrics until SIGINT
// or SIGTERM. Returns the exit status.
int run_metrics(const MetricsArgs& args, const Trust& trust);

}  // namespace shmbus::inspect_tool
