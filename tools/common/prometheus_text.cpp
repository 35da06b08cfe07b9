// The Prometheus text exposition format: see prometheus_text.hpp.
#include "tools/common/prometheus_text.hpp"

#include <fmt/format.h>

namespace shmbus::tools {

std::string prometheus_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u > 0x7e) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out;
}

namespace {
bool is_counter(const MetricFamily& f) { return std::string_view(f.type) == "counter"; }
}  // namespace

void MetricFamily::sample(const std::string& labels, double value) {
  const char* suffix = is_counter(*this) ? "_total" : "";
  if (labels.empty()) {
    samples += fmt::format("{}{} {}\n", name, suffix, value);
  } else {
    samples += fmt::format("{}{}{{{}}} {}\n", name, suffix, labels, value);
  }
}

std::string render_families(const std::vector<const MetricFamily*>& families) {
  std::string out;
  for (const MetricFamily* f : families) {
    if (f->samples.empty()) continue;
    const char* suffix = is_counter(*f) ? "_total" : "";
    out += fmt::format("# HELP {}{} {}\n# TYPE {}{} {}\n", f->name, suffix, f->help, f->name, suffix, f->type);
    out += f->samples;
  }
  return out;
}

}  // namespace shmbus::tools
