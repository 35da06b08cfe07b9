// shmbus-bench — the machine probe (machine.hpp): /proc/cpuinfo, sysfs
// topology and caches, uname, the load average.
#include "machine.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "roles.hpp"

namespace bench {

using json = nlohmann::json;

ClockCalibration Clock::calibrate(bool want_tsc, int ms) {
  ClockCalibration c;
  if (!want_tsc) return c;
  const std::uint64_t m0 = mono_ns();
  const std::uint64_t t0 = __rdtsc();
  sleep_ms(ms);
  const std::uint64_t m1 = mono_ns();
  const std::uint64_t t1 = __rdtsc();
  if (t1 <= t0 || m1 <= m0) return c;
  c.tsc0 = t0;
  c.mono0 = m0;
  c.ns_per_tick = static_cast<double>(m1 - m0) / static_cast<double>(t1 - t0);
  return c;
}

bool invariant_tsc() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0)
      return line.find(" constant_tsc") != std::string::npos &&
             line.find(" nonstop_tsc") != std::string::npos;
  }
  return false;
}

namespace {

// The first line of a (sysfs) file, "" if it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    int lo = 0, hi = 0;
    char rest = 0;
    const auto dash = item.find('-');
    const bool ok = dash == std::string::npos
                        ? std::sscanf(item.c_str(), "%d%c", &lo, &rest) == 1 && (hi = lo, true)
                        : std::sscanf(item.c_str(), "%d-%d%c", &lo, &hi, &rest) == 2;
    if (!ok || lo < 0 || hi < lo || hi >= CPU_SETSIZE)
      throw std::runtime_error("not a CPU list: '" + text + "' (e.g. 0,1 or 0-3)");
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::vector<int> one_cpu_per_core() {
  const std::vector<int> allowed = allowed_cpus();
  std::vector<int> out;
  for (int c : allowed) {
    const std::string sib =
        first_line("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/thread_siblings_list");
    std::vector<int> s;
    try {
      if (!sib.empty()) s = parse_cpu_list(sib);
    } catch (const std::exception&) {
      s.clear();
    }
    // A sibling before it that this process may use stands for the core.
    const bool first = std::none_of(s.begin(), s.end(), [&](int b) {
      return b < c && std::find(allowed.begin(), allowed.end(), b) != allowed.end();
    });
    if (first) out.push_back(c);
  }
  return out;
}

int cpu_for(const RunConfig& cfg, Role role, int id) {
  if (role == Role::producer || cfg.ncpus == 1) return cfg.cpus[0];
  return cfg.cpus[1 + static_cast<std::uint32_t>(id) % (cfg.ncpus - 1)];
}

namespace {

// Which of `cpus` are hardware threads of one core, as sysfs says
// (cpuN/topology/thread_siblings_list). A VM's sysfs shows the topology the
// hypervisor presents, not necessarily the host's.
struct Smt {
  std::string verdict;  // "separate physical cores", "SMT siblings", "one CPU", "unknown"
  std::string detail;
};
Smt smt_of(const std::vector<int>& cpus) {
  std::vector<int> distinct = cpus;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() == 1) return {"one CPU", "every process shares CPU " + std::to_string(distinct[0])};
  for (int a : distinct) {
    const std::string sib = first_line("/sys/devices/system/cpu/cpu" + std::to_string(a) +
                                       "/topology/thread_siblings_list");
    if (sib.empty()) return {"unknown", "no topology for CPU " + std::to_string(a) + " in sysfs"};
    const auto s = parse_cpu_list(sib);
    for (int b : distinct)
      if (b != a && std::find(s.begin(), s.end(), b) != s.end())
        return {"SMT siblings",
                "CPUs " + std::to_string(a) + " and " + std::to_string(b) + " are threads of one core"};
  }
  return {"separate physical cores", "no two of CPUs " + join(distinct) + " share a core"};
}

// The caches of CPU `cpu` (sysfs cache/index*): level, type, size, sharers.
json caches_of(int cpu) {
  json out = json::array();
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index" + std::to_string(i);
    const std::string level = first_line(dir + "/level");
    if (level.empty()) break;
    out.push_back({{"level", std::atoi(level.c_str())}, {"type", first_line(dir + "/type")},
                   {"size", first_line(dir + "/size")}, {"shared_cpu_list", first_line(dir + "/shared_cpu_list")}});
  }
  return out;
}

}  // namespace

std::string caches_text(const json& caches) {
  std::string s;
  for (const auto& c : caches) {
    const std::string type = c["type"].get<std::string>();
    s += (s.empty() ? "L" : ", L") + std::to_string(c["level"].get<int>()) +
         (type == "Data" ? "d" : type == "Instruction" ? "i" : "") + " " + c["size"].get<std::string>();
    if (c["level"].get<int>() >= 2) s += " (CPUs " + c["shared_cpu_list"].get<std::string>() + ")";
  }
  return s.empty() ? "unknown" : s;
}

json machine_info() {
  json m;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  bool hypervisor = false;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 && !m.contains("cpu")) m["cpu"] = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) hypervisor |= (line + " ").find(" hypervisor ") != std::string::npos;
  }
  m["cores"] = sysconf(_SC_NPROCESSORS_ONLN);
  m["virtual_machine"] = hypervisor;
  utsname u{};
  uname(&u);
  m["kernel"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  char buf[64];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  m["date"] = buf;
  double load[3] = {};
  if (getloadavg(load, 3) == 3) m["loadavg_at_start"] = {load[0], load[1], load[2]};
  return m;
}

json placement_info(const std::vector<int>& cpus) {
  json p;
  const bool pinned = !cpus.empty();
  const std::vector<int> used = pinned ? cpus : allowed_cpus();
  p["pinned"] = pinned;
  p["cpus"] = used;
  if (pinned) {
    p["producer_cpu"] = cpus[0];
    p["consumer_cpus"] = cpus.size() == 1 ? cpus : std::vector<int>(cpus.begin() + 1, cpus.end());
  }
  const Smt smt = smt_of(used.empty() ? std::vector<int>{0} : used);
  p["smt"] = smt.verdict;
  p["smt_detail"] = smt.detail;
  const int first = used.empty() ? 0 : used[0];
  p["caches_of_cpu"] = first;
  p["caches"] = caches_of(first);
  return p;
}

}  // namespace bench
