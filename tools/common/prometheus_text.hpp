// The Prometheus text exposition format (version 0.0.4, which OpenMetrics
// scrapers accept too): metric families written with HELP and TYPE once,
// then their samples. Shared by every program that exports metrics
// (shmbus-inspect metrics, shmbus-bridge and shmbus-nats --metrics-listen).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace shmbus::tools {

// A label value: printable ASCII, with \ and " escaped; any other byte
// becomes '?' (values such as reader names are written by other processes).
std::string prometheus_label(std::string_view v);

// One metric family. A counter's name is given without "_total": the
// samples and the HELP/TYPE lines get it.
struct MetricFamily {
  const char* name;
  const char* type;  // "counter" or "gauge"
  const char* help;
  std::string samples;

  // `labels` is the inside of the braces (`bus="x",slot="0"`), escaped
  // already; it may be empty.
  void sample(const std::string& labels, double value);
};

// The families in order; a family without samples is left out.
std::string render_families(const std::vector<const MetricFamily*>& families);

}  // namespace shmbus::tools
