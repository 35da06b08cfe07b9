// shmbus-bench — the report (report.hpp): medians and per-round ratios,
// the markdown table, the progress lines and the JSON document.
#include "report.hpp"

#include <algorithm>
#include <cstdio>

#include "machine.hpp"

namespace bench {

using json = nlohmann::json;

namespace {

json to_json(const Metrics& m) {
  json bus = nullptr;
  if (m.bus.valid)
    bus = {{"published", m.bus.published}, {"producer_waits", m.bus.producer_waits},
           {"producer_wait_ns", m.bus.producer_wait_ns}, {"wakeups", m.bus.wakeups}};
  return {{"ok", m.ok},
          {"bus_counters", bus},
          {"error", m.error},
          {"per_consumer_msgs_per_s", m.per_consumer_mps},
          {"fastest_consumer_msgs_per_s", m.max_consumer_mps},
          {"delivered_msgs_per_s", m.total_mps},
          {"p50_ns", m.p50},
          {"p90_ns", m.p90},
          {"p99_ns", m.p99},
          {"p99_9_ns", m.p999},
          {"max_ns", m.max},
          {"consumer_cpu_pct", m.consumer_cpu},
          {"producer_cpu_pct", m.producer_cpu},
          {"seconds", m.seconds}};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void aggregate(Row& row) {
  std::vector<const Metrics*> ok;
  for (const auto& r : row.runs) {
    if (r.ok) ok.push_back(&r);
    else {
      ++row.failed;
      if (row.first_error.empty()) row.first_error = r.error;
    }
  }
  auto med = [&](double Metrics::*f) {
    std::vector<double> v;
    for (auto* r : ok) v.push_back(r->*f);
    return median(v);
  };
  Metrics& m = row.med;
  m.ok = row.failed == 0 && !ok.empty();
  m.per_consumer_mps = med(&Metrics::per_consumer_mps);
  m.max_consumer_mps = med(&Metrics::max_consumer_mps);
  m.total_mps = med(&Metrics::total_mps);
  m.p50 = med(&Metrics::p50);
  m.p90 = med(&Metrics::p90);
  m.p99 = med(&Metrics::p99);
  m.p999 = med(&Metrics::p999);
  m.max = med(&Metrics::max);
  m.consumer_cpu = med(&Metrics::consumer_cpu);
  m.producer_cpu = med(&Metrics::producer_cpu);
  m.seconds = med(&Metrics::seconds);
}

// How many times better row `first` is than row `other`: the throughput
// ratio (first ÷ other) at full speed, the latency ratio (other ÷ first, at
// the percentile `lat`) at a fixed rate and in ping-pong. Computed per round
// (runs made back to back), then the median. "shmbus ×" is ratio(shmbus,
// row); "÷ ring" is ratio(row, ring).
std::optional<double> ratio(const Row& first, const Row& other, double Metrics::*lat = &Metrics::p99) {
  std::vector<double> v;
  for (std::size_t i = 0; i < std::min(first.runs.size(), other.runs.size()); ++i) {
    const Metrics& a = first.runs[i];
    const Metrics& b = other.runs[i];
    if (!a.ok || !b.ok) continue;
    if (other.cf.mode == Mode::full || other.cf.mode == Mode::catchup) {
      if (b.per_consumer_mps > 0) v.push_back(a.per_consumer_mps / b.per_consumer_mps);
    } else if (other.cf.mode == Mode::idle) {
      continue;
    } else if (a.*lat > 0) {
      v.push_back(b.*lat / a.*lat);
    }
  }
  if (v.empty()) return std::nullopt;
  return median(v);
}

std::string fmt_rate(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2f M", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1f k", v / 1e3);
  else std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}
std::string fmt_ns(double ns) {
  char b[32];
  if (ns >= 1e9) std::snprintf(b, sizeof b, "%.2f s", ns / 1e9);
  else if (ns >= 1e6) std::snprintf(b, sizeof b, "%.2f ms", ns / 1e6);
  else if (ns >= 1e4) std::snprintf(b, sizeof b, "%.1f µs", ns / 1e3);
  else if (ns >= 1e3) std::snprintf(b, sizeof b, "%.2f µs", ns / 1e3);
  else std::snprintf(b, sizeof b, "%.0f ns", ns);
  return b;
}
std::string fmt(const char* f, double v) {
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// A ratio with two significant digits, never in exponent form.
std::string fmt_ratio(double v) {
  if (v >= 10) return fmt("%.0f", v);
  if (v >= 0.1) return fmt("%.2f", v);
  return fmt("%.2g", v);
}

std::string mode_label(const Options& o, Mode m) {
  switch (m) {
    case Mode::full: return "full speed";
    case Mode::rate: return "rate " + fmt_rate(static_cast<double>(o.rate)) + "/s";
    case Mode::pingpong: return "ping-pong";
    case Mode::idle: return "idle " + fmt("%g s", o.idle_seconds);
    case Mode::catchup: return "catch-up " + fmt_rate(static_cast<double>(o.catchup_count)) + " backlog";
  }
  return "?";
}

std::string fanout(const Config& cf) {
  if (cf.mode == Mode::pingpong) return "2 channels";
  if (cf.consumers == 1) return "1 channel";
  return has_broadcast(cf.transport) ? "broadcast" : std::to_string(cf.consumers) + "× unicast";
}

// The `÷ ring` cell: "1" for the ring, a throughput fraction at full speed,
// "p50 / p99" latency fractions otherwise, "–" without a ring to compare.
std::string ring_cell(const Row& r) {
  if (r.cf.mode == Mode::idle) return "–";
  if (r.cf.transport == Transport::ring) return r.med.ok ? "1" : "–";
  if (!r.vs_ring) return "–";
  if (r.cf.mode == Mode::full || r.cf.mode == Mode::catchup) return fmt_ratio(*r.vs_ring);
  return (r.vs_ring_p50 ? fmt_ratio(*r.vs_ring_p50) : "–") + " / " + fmt_ratio(*r.vs_ring);
}

}  // namespace

void compare_group(std::vector<Row>& rows, std::size_t first) {
  const Row* shm = nullptr;
  const Row* ring = nullptr;
  const Row* tcp = nullptr;
  for (std::size_t j = first; j < rows.size(); ++j) {
    aggregate(rows[j]);
    if (rows[j].cf.transport == Transport::shmbus) shm = &rows[j];
    if (rows[j].cf.transport == Transport::ring) ring = &rows[j];
    if (rows[j].cf.transport == Transport::tcp) tcp = &rows[j];
  }
  for (std::size_t j = first; j < rows.size(); ++j) {
    Row& r = rows[j];
    if (shm && r.cf.transport != Transport::shmbus) r.vs_shmbus = ratio(*shm, r);
    if (ring && r.cf.transport != Transport::ring) {
      r.vs_ring = ratio(r, *ring);
      if (r.cf.mode != Mode::full && r.cf.mode != Mode::catchup) r.vs_ring_p50 = ratio(r, *ring, &Metrics::p50);
    }
    if (tcp && r.cf.transport == Transport::bridge) r.vs_tcp = ratio(r, *tcp);
  }
}

json describe_run(const Options& o, bool tsc, int argc, char** argv) {
  json doc;
  doc["machine"] = machine_info();
  doc["placement"] = placement_info(o.cpus);
  doc["clock"] = tsc ? "rdtsc, calibrated to CLOCK_MONOTONIC (one calibration for all processes)"
                     : "clock_gettime(CLOCK_MONOTONIC)";
  std::string cmdline;
  for (int i = 0; i < argc; ++i) {
    if (i) cmdline += ' ';
    cmdline += argv[i];
  }
  doc["command"] = cmdline;
  doc["options"] = {{"count", o.count}, {"rate", o.rate}, {"rate_count", o.rate_count},
                    {"pp_count", o.pp_count}, {"catchup_count", o.catchup_count}, {"pp_warmup", o.pp_warmup}, {"idle_seconds", o.idle_seconds},
                    {"runs", o.runs}, {"policy", o.policy}, {"wait", o.wait}, {"capacity", o.capacity},
                    {"queue_depth", o.queue_depth}, {"lib_timestamps", o.lib_timestamps}, {"stamp_every", o.stamp_every},
                    {"shmbus_read", o.shmbus_read}, {"cpus", o.cpus}};
  doc["columns"] = {
      {"shmbus_times_better", "how many times better shmbus is than the row: msgs/s per consumer at full "
                              "speed, p99 latency otherwise; median of per-round ratios"},
      {"vs_ring", "the row as a fraction of the reference ring's speed in its group (1: as fast, below 1: "
                  "slower): msgs_per_s = msgs/s per consumer ÷ the ring's at full speed; p50, p99 = the "
                  "ring's latency ÷ the row's at a fixed rate and in ping-pong; median of per-round ratios"}};
  return doc;
}

void print_header(const json& machine, const json& place, const std::string& shmbus_read) {
  std::printf("- CPU: %s; %d CPUs online; %s%s\n", machine.value("cpu", std::string("?")).c_str(),
              machine.value("cores", 0), machine.value("kernel", std::string("?")).c_str(),
              machine.value("virtual_machine", false) ? "; a virtual machine (cpuinfo: hypervisor)" : "");
  std::printf("- caches of CPU %d: %s\n", place["caches_of_cpu"].get<int>(), caches_text(place["caches"]).c_str());
  const auto cpus = place["cpus"].get<std::vector<int>>();
  if (place["pinned"].get<bool>()) {
    const auto cons = place["consumer_cpus"].get<std::vector<int>>();
    std::printf("- placement: pinned (--cpus %s): producer on CPU %d, consumers on CPU%s %s%s; %s (%s)\n",
                join(cpus).c_str(), cpus[0], cons.size() > 1 ? "s" : "", join(cons).c_str(),
                cons.size() > 1 ? " round-robin" : "", place["smt"].get<std::string>().c_str(),
                place["smt_detail"].get<std::string>().c_str());
  } else {
    std::printf("- placement: unpinned, on CPUs %s; %s (%s)\n", join(cpus).c_str(),
                place["smt"].get<std::string>().c_str(), place["smt_detail"].get<std::string>().c_str());
  }
  std::printf("- shmbus consumers: %s\n\n",
              shmbus_read == "batch" ? "Consumer::read_batch(), up to 256 messages per call (the ring takes as many)"
                                     : "one Consumer::next() per message (the ring also hands over one per call)");
  std::fflush(stdout);
}

void print_run_start(std::size_t done, std::size_t total, const Config& cf, int k, int runs) {
  std::fprintf(stderr, "[%zu/%zu] %-6s %-8s consumers=%u size=%u run %d/%d ... ", done, total,
               name_of(cf.transport), name_of(cf.mode), cf.consumers, cf.size, k + 1, runs);
  std::fflush(stderr);
}

void print_run_end(const Config& cf, const Metrics& m) {
  if (!m.ok) std::fprintf(stderr, "FAILED: %s\n", m.error.c_str());
  else if (cf.mode == Mode::idle) std::fprintf(stderr, "consumer CPU %.3f %%\n", m.consumer_cpu);
  else if (cf.mode == Mode::catchup)
    std::fprintf(stderr, "%s msgs/s, %.1f MB/s (%.3f s)\n", fmt_rate(m.per_consumer_mps).c_str(),
                 m.per_consumer_mps * cf.size / 1e6, m.seconds);
  else std::fprintf(stderr, "%s msgs/s per consumer, p50 %s, p99 %s%s\n", fmt_rate(m.per_consumer_mps).c_str(),
                    fmt_ns(m.p50).c_str(), fmt_ns(m.p99).c_str(),
                    m.bus.valid ? (", bus: " + std::to_string(m.bus.wakeups) + " futex wakes, " +
                                   std::to_string(m.bus.producer_waits) + " producer waits")
                                      .c_str()
                                : "");
}

void print_table(const Options& o, const std::vector<Row>& rows) {
  std::printf(
      "`shmbus ×`: how many times better shmbus is than the row (msgs/s per consumer at full speed, p99 "
      "otherwise). `÷ ring`: the row as a fraction of the reference ring's speed in the same group (1 = as "
      "fast as the ring, below 1 = slower): msgs/s per consumer ÷ the ring's at full speed; the ring's "
      "latency ÷ the row's, p50 / p99, at a fixed rate and in ping-pong. Both are medians of per-round "
      "ratios.\n\n");
  std::printf(
      "| transport | mode | consumers | size | fan-out | msgs/s per consumer | MB/s per consumer | "
      "delivered msgs/s | p50 | p90 | p99 | p99.9 | max | consumer CPU | shmbus × | ÷ ring | status |\n");
  std::printf("|---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
  for (const Row& r : rows) {
    const Metrics& m = r.med;
    const bool idle = r.cf.mode == Mode::idle;
    const bool have = m.per_consumer_mps > 0 || idle;
    const std::string dash = "–";
    std::string status = r.failed == 0 ? "ok" : "FAILED " + std::to_string(r.failed) + "/" + std::to_string(r.runs.size()) + ": " + r.first_error;
    std::string ratio_s = dash;
    if (r.cf.transport == Transport::shmbus && !idle) ratio_s = "1";
    else if (r.vs_shmbus) ratio_s = *r.vs_shmbus >= 1 ? fmt(*r.vs_shmbus >= 10 ? "%.0f" : "%.1f", *r.vs_shmbus)
                                                      : fmt_ratio(*r.vs_shmbus);
    const bool rate = have && !idle;
    const bool lat = rate && r.cf.mode != Mode::catchup;  // a backlog's age is not a latency
    std::printf("| %s | %s | %u | %u | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                name_of(r.cf.transport), mode_label(o, r.cf.mode).c_str(), r.cf.consumers, r.cf.size,
                fanout(r.cf).c_str(), rate ? fmt_rate(m.per_consumer_mps).c_str() : dash.c_str(),
                rate ? fmt("%.1f", m.per_consumer_mps * r.cf.size / 1e6).c_str() : dash.c_str(),
                rate ? fmt_rate(m.total_mps).c_str() : dash.c_str(),
                lat ? fmt_ns(m.p50).c_str() : dash.c_str(), lat ? fmt_ns(m.p90).c_str() : dash.c_str(),
                lat ? fmt_ns(m.p99).c_str() : dash.c_str(), lat ? fmt_ns(m.p999).c_str() : dash.c_str(),
                lat ? fmt_ns(m.max).c_str() : dash.c_str(),
                have ? fmt("%.1f %%", m.consumer_cpu).c_str() : dash.c_str(), ratio_s.c_str(),
                ring_cell(r).c_str(), status.c_str());
  }
  std::fflush(stdout);
}

void print_vs_tcp(const Options& o, const std::vector<Row>& rows) {
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (!r.vs_tcp || r.cf.mode != Mode::catchup) continue;
    const Row* tcp = nullptr;
    for (const Row& t : rows)
      if (t.cf.transport == Transport::tcp && t.cf.mode == r.cf.mode && t.cf.size == r.cf.size) tcp = &t;
    if (!tcp) continue;
    auto mb = [](const Row& x) { return x.med.per_consumer_mps * x.cf.size / 1e6; };
    std::printf(
        "\n`bridge ÷ tcp`, %s of %u B messages: %s (bridge %s msgs/s, %.1f MB/s; plain socket %s msgs/s, %.1f "
        "MB/s; MB of payload; median of per-round ratios of msgs/s)\n",
        mode_label(o, r.cf.mode).c_str(), r.cf.size, fmt_ratio(*r.vs_tcp).c_str(),
        fmt_rate(r.med.per_consumer_mps).c_str(), mb(r), fmt_rate(tcp->med.per_consumer_mps).c_str(), mb(*tcp));
  }
  for (const Row& r : rows)
    if (r.vs_tcp && r.cf.mode != Mode::catchup)
      std::printf(
          "\n`bridge ÷ tcp`, %s, %u consumer(s), %u B: %s (%s; median of per-round ratios)\n",
          mode_label(o, r.cf.mode).c_str(), r.cf.consumers, r.cf.size,
          fmt_ratio(*r.vs_tcp).c_str(),
          r.cf.mode == Mode::full ? "msgs/s per consumer, the bridge's ÷ the plain socket's"
                                  : "p99 latency, the plain socket's ÷ the bridge's");
}

json results_json(const std::vector<Row>& rows) {
  json jrows = json::array();
  for (const Row& r : rows) {
    json jr;
    jr["transport"] = name_of(r.cf.transport);
    jr["transport_label"] = label_of(r.cf.transport);
    jr["mode"] = name_of(r.cf.mode);
    jr["consumers"] = r.cf.consumers;
    jr["size"] = r.cf.size;
    jr["fanout"] = fanout(r.cf);
    jr["broadcast"] = has_broadcast(r.cf.transport);
    jr["median"] = to_json(r.med);
    jr["median"]["per_consumer_mb_per_s"] = r.med.per_consumer_mps * r.cf.size / 1e6;  // payload bytes
    jr["failed_runs"] = r.failed;
    jr["status"] = r.failed ? "FAILED" : "ok";
    if (!r.first_error.empty()) jr["first_error"] = r.first_error;
    if (r.vs_shmbus) jr["shmbus_times_better"] = *r.vs_shmbus;
    if (r.vs_tcp)
      jr["vs_tcp"] =
          r.cf.mode == Mode::full || r.cf.mode == Mode::catchup ? json{{"msgs_per_s", *r.vs_tcp}} : json{{"p99", *r.vs_tcp}};
    if (r.cf.transport == Transport::ring && r.med.ok && r.cf.mode != Mode::idle) {
      jr["vs_ring"] = r.cf.mode == Mode::full ? json{{"msgs_per_s", 1.0}} : json{{"p50", 1.0}, {"p99", 1.0}};
    } else if (r.vs_ring) {
      jr["vs_ring"] = r.cf.mode == Mode::full || r.cf.mode == Mode::catchup ? json{{"msgs_per_s", *r.vs_ring}}
                                               : json{{"p50", r.vs_ring_p50 ? json(*r.vs_ring_p50) : json(nullptr)},
                                                      {"p99", *r.vs_ring}};
    }
    jr["runs"] = json::array();
    for (const auto& m : r.runs) jr["runs"].push_back(to_json(m));
    jrows.push_back(jr);
  }
  return jrows;
}

nlohmann::json print_scale_table(const std::vector<Row>& rows) {
  std::vector<std::uint32_t> fans, sizes;
  for (const Row& r : rows) {
    if (r.cf.transport != Transport::shmbus || r.cf.mode != Mode::full) continue;
    if (std::find(fans.begin(), fans.end(), r.cf.consumers) == fans.end()) fans.push_back(r.cf.consumers);
    if (std::find(sizes.begin(), sizes.end(), r.cf.size) == sizes.end()) sizes.push_back(r.cf.size);
  }
  std::sort(fans.begin(), fans.end());
  std::sort(sizes.begin(), sizes.end());
  auto size_label = [](std::uint32_t s) {
    return s % 1024 == 0 ? std::to_string(s / 1024) + " KiB" : std::to_string(s) + " B";
  };
  nlohmann::json out = {{"full", nlohmann::json::array()}, {"pingpong", nlohmann::json::array()}};
  std::printf("\nshmbus ÷ ring, msgs/s per consumer at full speed (medians of per-round ratios):\n\n");
  std::printf("| fan-out \\ size |");
  for (auto s : sizes) std::printf(" %s |", size_label(s).c_str());
  std::printf("\n|---|");
  for (std::size_t k = 0; k < sizes.size(); ++k) std::printf("--:|");
  std::printf("\n");
  for (auto n : fans) {
    std::printf("| 1 → %u |", n);
    for (auto s : sizes) {
      const auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
        return r.cf.transport == Transport::shmbus && r.cf.mode == Mode::full && r.cf.consumers == n &&
               r.cf.size == s;
      });
      const bool have = it != rows.end() && it->vs_ring && it->failed == 0;
      std::printf(" %s |", have ? fmt_ratio(*it->vs_ring).c_str() : "–");
      out["full"].push_back({{"consumers", n},
                             {"size", s},
                             {"vs_ring", have ? nlohmann::json(*it->vs_ring) : nlohmann::json()}});
    }
    std::printf("\n");
  }
  for (const Row& r : rows) {
    if (r.cf.transport != Transport::shmbus || r.cf.mode != Mode::pingpong || !r.vs_ring) continue;
    std::printf("\nping-pong %s: p50 %s, p99 %s; ÷ ring (the ring's latency ÷ shmbus's) p50 %s, p99 %s\n",
                size_label(r.cf.size).c_str(), fmt_ns(r.med.p50).c_str(), fmt_ns(r.med.p99).c_str(),
                r.vs_ring_p50 ? fmt_ratio(*r.vs_ring_p50).c_str() : "–", fmt_ratio(*r.vs_ring).c_str());
    out["pingpong"].push_back({{"size", r.cf.size},
                               {"p50_ns", r.med.p50},
                               {"p99_ns", r.med.p99},
                               {"vs_ring_p50", r.vs_ring_p50 ? nlohmann::json(*r.vs_ring_p50) : nlohmann::json()},
                               {"vs_ring_p99", *r.vs_ring}});
  }
  std::fflush(stdout);
  return out;
}

}  // namespace bench
