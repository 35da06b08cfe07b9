// shmbus-bench — the end-to-end benchmark: shmbus against the transports
// users would otherwise pick, in the same run, between separate processes.
//
// The orchestrator (this program without --role) runs every configuration of
// the matrix: for each it creates the transport's shared objects, forks and
// execs itself once per role (one producer, N consumers; or pinger and
// ponger), waits, and reads the results the children left in a shared
// control block (an anonymous memfd inherited across exec). Repeated runs are
// interleaved across transports so every ratio compares runs made at the
// same time; medians are reported. Progress goes to stderr; the machine, the
// placement and one markdown table to stdout; everything to --json.
//
// Every table row is also compared with the reference ring of its group
// (transport_ring.cpp, `÷ ring`): the ceiling a minimal ring reaches on the
// same CPUs in the same run.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tools/common/program.hpp"
#include "roles.hpp"

#ifndef SHMBUS_BENCH_BRIDGE  // built without bridge/: the two transports refuse to run
#define SHMBUS_BRIDGE_PATH ""
namespace bench {
BridgeServer bridge_start(const RunConfig&, const std::string&) {
  throw std::runtime_error("bridge: shmbus-bench was built without bridge/");
}
std::string bridge_stop(BridgeServer&) { return {}; }
std::vector<int> tcp_pairs(std::uint32_t) {
  throw std::runtime_error("tcp: shmbus-bench was built without bridge/");
}
void run_bridge(Control&, Role, int) {}
void run_tcp(Control&, Role, int) {}
}  // namespace bench
#endif

namespace bench {

// Set-up and tear-down of each transport's named objects (transport_*.cpp).
void shmbus_create(const RunConfig& cfg);
void shmbus_remove(const RunConfig& cfg);
ShmbusCounters shmbus_counters(const RunConfig& cfg);
void bipc_create(const RunConfig& cfg);
void bipc_remove(const RunConfig& cfg);
void zmq_cleanup(const RunConfig& cfg);
int ring_create(const RunConfig& cfg);  // returns the segment's memfd

const char* name_of(Transport t) noexcept {
  switch (t) {
    case Transport::shmbus: return "shmbus";
    case Transport::bipc: return "bipc";
    case Transport::uds: return "uds";
    case Transport::pipe: return "pipe";
    case Transport::zmq: return "zmq";
    case Transport::ring: return "ring";
    case Transport::bridge: return "bridge";
    case Transport::tcp: return "tcp";
  }
  return "?";
}
const char* label_of(Transport t) noexcept {
  switch (t) {
    case Transport::shmbus: return "shmbus";
    case Transport::bipc: return "Boost.Interprocess message_queue";
    case Transport::uds: return "Unix domain socket (stream)";
    case Transport::pipe: return "pipe";
    case Transport::zmq: return "ZeroMQ ipc:// PUB/SUB";
    case Transport::ring: return "reference ring (not a library)";
    case Transport::bridge: return "shmbus → shmbus-bridge serve → TCP subscriber (loopback)";
    case Transport::tcp: return "plain TCP socket (loopback), batched writes";
  }
  return "?";
}
bool has_broadcast(Transport t) noexcept {
  return t == Transport::shmbus || t == Transport::zmq || t == Transport::ring ||
         t == Transport::bridge;
}
const char* name_of(Mode m) noexcept {
  switch (m) {
    case Mode::full: return "full";
    case Mode::rate: return "rate";
    case Mode::pingpong: return "pingpong";
    case Mode::idle: return "idle";
  }
  return "?";
}

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

namespace {

using json = nlohmann::json;

// --------------------------------------------------------------- machine
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

// The first line of a (sysfs) file, "" if it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The kernel's CPU list format ("0-3,8,10-11") into CPU numbers, in order.
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

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// Where a role runs under --cpus: the producer (pinger) on the first CPU, the
// consumers round-robin over the rest, everyone on the first if it is alone.
int cpu_for(const RunConfig& cfg, Role role, int id) {
  if (role == Role::producer || cfg.ncpus == 1) return cfg.cpus[0];
  return cfg.cpus[1 + static_cast<std::uint32_t>(id) % (cfg.ncpus - 1)];
}

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

// Where the roles run (--cpus, or unpinned on the CPUs allowed here), whether
// those CPUs are SMT siblings, and the caches of the first.
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

// The report's header: what the numbers below were measured on.
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

// ------------------------------------------------------------ a result
struct Metrics {
  bool ok = false;
  std::string error;
  double per_consumer_mps = 0;  // the slowest consumer
  double max_consumer_mps = 0;  // the fastest (starvation check)
  double total_mps = 0;         // delivered, all consumers
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;  // ns
  double consumer_cpu = 0;      // % of a core, mean over consumers
  double producer_cpu = 0;
  double seconds = 0;
  ShmbusCounters bus;           // shmbus only
};

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

struct Config {
  Transport transport;
  Mode mode;
  std::uint32_t consumers;
  std::uint32_t size;
};

struct Options {
  std::vector<std::string> transports{"ring", "shmbus", "bipc", "uds", "pipe", "zmq"};
  std::vector<std::string> modes{"full"};
  std::vector<std::uint32_t> consumers{1, 2, 4};
  std::vector<std::uint32_t> sizes{32, 128, 1024};
  std::vector<std::uint32_t> rate_consumers{1};
  std::vector<std::uint32_t> rate_sizes{128};
  std::vector<std::uint32_t> pp_sizes{128};
  std::vector<std::string> idle_transports{"shmbus"};
  std::uint64_t count = 1'000'000;
  std::uint64_t rate = 100'000;
  std::uint64_t rate_count = 200'000;
  std::uint64_t pp_count = 100'000;
  std::uint64_t pp_warmup = 10'000;
  double idle_seconds = 5;
  int runs = 1;
  std::string policy = "block";
  std::string wait = "adaptive";
  double spin_us = -1;
  double yield_us = -1;
  std::uint64_t capacity = 0;  // 0: the library's default
  std::uint32_t queue_depth = 1024;
  std::string lib_timestamps = "off";  // the library's default
  std::uint32_t stamp_every = RunConfig{}.stamp_every;
  std::string shmbus_read = "next";  // next: Consumer::next() per message; batch: read_batch()
  std::string cpus_text;             // --cpus as given
  std::vector<int> cpus;             // parsed; empty: unpinned
  std::string clock = "tsc";
  double timeout_s = 120;
  std::string json_path;
  std::string bridge_path = SHMBUS_BRIDGE_PATH;  // the shmbus-bridge program of this build
  bool targets = false;
  bool quick = false;
};

std::optional<Transport> parse_transport(const std::string& s) {
  for (Transport t : kAllTransports)
    if (s == name_of(t)) return t;
  return std::nullopt;
}

// ------------------------------------------------------- child processes
std::string g_self;
volatile sig_atomic_t g_interrupted = 0;  // SIGINT/SIGTERM: stop, clean up, exit
extern "C" void on_interrupt(int) { g_interrupted = 1; }

pid_t spawn(int ctl_fd, const char* role, int id) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    const std::string fd = std::to_string(ctl_fd);
    const std::string ids = std::to_string(id);
    const char* argv[] = {"shmbus-bench", "--role", role, "--id", ids.c_str(),
                          "--ctl-fd", fd.c_str(), nullptr};
    execv(g_self.c_str(), const_cast<char* const*>(argv));
    _exit(127);
  }
  return pid;
}

double pct(std::uint64_t cpu_ns, std::uint64_t wall_ns) {
  return wall_ns ? 100.0 * static_cast<double>(cpu_ns) / static_cast<double>(wall_ns) : 0;
}

// Runs one configuration once: set up, spawn, wait, read the results.
Metrics run_once(const Options& o, const Config& cf, const ClockCalibration& cal, int serial) {
  Metrics m;
  const int ctl_fd = memfd_create("shmbus-bench-ctl", 0);
  if (ctl_fd < 0) throw std::runtime_error("memfd_create failed");
  if (ftruncate(ctl_fd, sizeof(Control)) != 0) throw std::runtime_error("ftruncate failed");
  void* mem = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, ctl_fd, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* c = new (mem) Control{};
  c->clock = cal;
  RunConfig& cfg = c->cfg;
  cfg.transport = cf.transport;
  cfg.mode = cf.mode;
  cfg.consumers = cf.mode == Mode::pingpong ? 1 : cf.consumers;
  cfg.size = cf.size;
  cfg.count = cf.mode == Mode::rate       ? o.rate_count
              : cf.mode == Mode::pingpong ? o.pp_count
                                          : o.count;
  cfg.warmup = cf.mode == Mode::pingpong ? o.pp_warmup : 0;
  cfg.rate = o.rate;
  cfg.idle_ns = static_cast<std::uint64_t>(o.idle_seconds * 1e9);
  cfg.timeout_ns = static_cast<std::uint64_t>(o.timeout_s * 1e9);
  cfg.policy = o.policy == "overwrite" ? 2 : 1;
  cfg.wait_strategy = o.wait == "busy-spin" ? 0 : o.wait == "spin-yield" ? 1 : 2;
  cfg.spin_ns = o.spin_us < 0 ? -1 : static_cast<std::int64_t>(o.spin_us * 1000);
  cfg.yield_ns = o.yield_us < 0 ? -1 : static_cast<std::int64_t>(o.yield_us * 1000);
  cfg.capacity = o.capacity;
  cfg.lib_timestamps = o.lib_timestamps == "off" ? 0 : o.lib_timestamps == "precise" ? 2 : 1;
  cfg.queue_depth = o.queue_depth;
  cfg.recv_batch = o.shmbus_read == "batch" ? kBatchMax : 1;
  cfg.stamp_every = o.stamp_every;
  cfg.ncpus = static_cast<std::uint32_t>(o.cpus.size());
  for (std::size_t i = 0; i < o.cpus.size(); ++i) cfg.cpus[i] = o.cpus[i];
  std::snprintf(cfg.name, sizeof cfg.name, "shmbus-bench-%d-%d", static_cast<int>(getpid()),
                serial);

  // Transport set-up in the orchestrator.
  std::vector<int> fds;
  BridgeServer server;
  switch (cf.transport) {
    case Transport::shmbus: shmbus_create(cfg); break;
    case Transport::bipc: bipc_create(cfg); break;
    case Transport::zmq: zmq_cleanup(cfg); break;
    case Transport::ring: fds.push_back(ring_create(cfg)); break;  // the segment, as fds[0]
    case Transport::bridge:
      shmbus_create(cfg);
      try {
        server = bridge_start(cfg, o.bridge_path);
      } catch (...) {
        shmbus_remove(cfg);
        throw;
      }
      cfg.port = server.port;
      break;
    case Transport::tcp:
      if (cf.mode == Mode::pingpong || cf.mode == Mode::idle)
        throw std::runtime_error("tcp: full and rate modes only");
      fds = tcp_pairs(cfg.consumers);
      break;
    case Transport::uds:
    case Transport::pipe: {
      const bool uds = cf.transport == Transport::uds;
      const int channels = cf.mode == Mode::pingpong ? (uds ? 1 : 2) : static_cast<int>(cfg.consumers);
      for (int i = 0; i < channels; ++i) {
        int p[2];
        const int r = uds ? socketpair(AF_UNIX, SOCK_STREAM, 0, p) : pipe(p);
        if (r != 0) throw std::runtime_error(std::string("socketpair/pipe: ") + std::strerror(errno));
        if (uds) {
          fds.push_back(p[0]);  // producer's end
          fds.push_back(p[1]);  // consumer's end
        } else {
          fds.push_back(p[1]);  // write end
          fds.push_back(p[0]);  // read end
        }
      }
      break;
    }
  }
  if (fds.size() > static_cast<std::size_t>(kMaxFds)) throw std::runtime_error("too many consumers");
  for (std::size_t i = 0; i < fds.size(); ++i) cfg.fds[i] = fds[i];
  cfg.nfds = static_cast<std::uint32_t>(fds.size());

  // Consumers first, then the producer.
  std::vector<std::pair<pid_t, std::string>> kids;
  for (std::uint32_t i = 0; i < cfg.consumers; ++i)
    kids.emplace_back(spawn(ctl_fd, "consumer", static_cast<int>(i)), "consumer " + std::to_string(i));
  kids.emplace_back(spawn(ctl_fd, "producer", 0), "producer");
  for (int fd : fds) close(fd);

  // Wait for all, up to the timeout (plus the idle time and a grace period).
  const std::uint64_t deadline = mono_ns() + cfg.timeout_ns + cfg.idle_ns + 5'000'000'000ull;
  std::vector<int> status(kids.size(), -1);
  std::size_t left = kids.size();
  bool killed = false;
  while (left) {
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      const pid_t r = waitpid(kids[i].first, &st, WNOHANG);
      if (r == kids[i].first) {
        status[i] = st;
        --left;
      }
    }
    if (!left) break;
    if ((mono_ns() > deadline || g_interrupted) && !killed) {
      c->abort.store(1);
      sleep_ms(1000);
      for (std::size_t i = 0; i < kids.size(); ++i)
        if (status[i] == -1) kill(kids[i].first, SIGKILL);
      killed = true;
    }
    sleep_ms(5);
  }

  // Results.
  std::string err;
  auto check = [&](const RoleResult& r, const std::string& who, int st) {
    if (!r.done.load(std::memory_order_acquire)) {
      std::ostringstream s;
      s << who << " died";
      if (WIFSIGNALED(st)) s << " (signal " << WTERMSIG(st) << ")";
      if (WIFEXITED(st)) s << " (exit " << WEXITSTATUS(st) << ")";
      if (killed) s << " (killed after the timeout)";
      err += (err.empty() ? "" : "; ") + s.str();
      return false;
    }
    if (!r.ok) err += (err.empty() ? "" : "; ") + who + ": " + r.error;
    return r.ok != 0;
  };
  bool ok = true;
  for (std::uint32_t i = 0; i < cfg.consumers; ++i)
    ok &= check(c->consumer[i], kids[i].second, status[i]);
  ok &= check(c->producer, "producer", status.back());
  m.ok = ok;
  m.error = err;

  const RoleResult& prod = c->producer;
  if (cf.mode == Mode::idle) {
    double cpu = 0;
    for (std::uint32_t i = 0; i < cfg.consumers; ++i)
      cpu += pct(c->consumer[i].cpu_user_ns + c->consumer[i].cpu_sys_ns, c->consumer[i].wall_ns);
    m.consumer_cpu = cpu / cfg.consumers;
    m.seconds = static_cast<double>(c->consumer[0].wall_ns) / 1e9;
  } else if (cf.mode == Mode::pingpong) {
    const Histogram& h = prod.hist;
    m.per_consumer_mps = m.max_consumer_mps = m.total_mps =
        prod.wall_ns ? static_cast<double>(prod.received) * 1e9 / static_cast<double>(prod.wall_ns) : 0;
    m.p50 = static_cast<double>(h.quantile(0.5));
    m.p90 = static_cast<double>(h.quantile(0.9));
    m.p99 = static_cast<double>(h.quantile(0.99));
    m.p999 = static_cast<double>(h.quantile(0.999));
    m.max = static_cast<double>(h.max());
    m.producer_cpu = pct(prod.cpu_user_ns + prod.cpu_sys_ns, prod.wall_ns);
    m.consumer_cpu = pct(c->consumer[0].cpu_user_ns + c->consumer[0].cpu_sys_ns, c->consumer[0].wall_ns);
    m.seconds = static_cast<double>(prod.wall_ns) / 1e9;
  } else {
    Histogram all;
    double min_mps = 1e300, max_mps = 0, cpu = 0;
    std::uint64_t delivered = 0, last = 0;
    for (std::uint32_t i = 0; i < cfg.consumers; ++i) {
      const RoleResult& r = c->consumer[i];
      all.merge(r.hist);
      const double secs = r.last_ns > prod.start_ns ? static_cast<double>(r.last_ns - prod.start_ns) / 1e9 : 0;
      const double mps = secs > 0 ? static_cast<double>(r.received) / secs : 0;
      min_mps = std::min(min_mps, mps);
      max_mps = std::max(max_mps, mps);
      cpu += pct(r.cpu_user_ns + r.cpu_sys_ns, r.wall_ns);
      delivered += r.received;
      last = std::max(last, r.last_ns);
    }
    m.per_consumer_mps = min_mps;
    m.max_consumer_mps = max_mps;
    m.total_mps = last > prod.start_ns ? static_cast<double>(delivered) * 1e9 / static_cast<double>(last - prod.start_ns) : 0;
    m.p50 = static_cast<double>(all.quantile(0.5));
    m.p90 = static_cast<double>(all.quantile(0.9));
    m.p99 = static_cast<double>(all.quantile(0.99));
    m.p999 = static_cast<double>(all.quantile(0.999));
    m.max = static_cast<double>(all.max());
    m.consumer_cpu = cpu / cfg.consumers;
    m.producer_cpu = pct(prod.cpu_user_ns + prod.cpu_sys_ns, prod.wall_ns);
    m.seconds = last > prod.start_ns ? static_cast<double>(last - prod.start_ns) / 1e9 : 0;
  }

  // Tear-down.
  switch (cf.transport) {
    case Transport::shmbus:
      m.bus = shmbus_counters(cfg);
      shmbus_remove(cfg);
      break;
    case Transport::bipc: bipc_remove(cfg); break;
    case Transport::zmq: zmq_cleanup(cfg); break;
    case Transport::bridge: {
      const std::string e = bridge_stop(server);
      if (!e.empty() && m.ok) {
        m.ok = false;
        m.error = e;
      }
      shmbus_remove(cfg);
      break;
    }
    default: break;
  }
  munmap(mem, sizeof(Control));
  close(ctl_fd);
  return m;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Row {
  Config cf;
  std::vector<Metrics> runs;
  Metrics med;
  int failed = 0;
  std::string first_error;
  std::optional<double> vs_shmbus;  // median of per-round ratios
  // This row as a fraction of the reference ring of its group (1: as fast as
  // the ring, below 1: slower), median of per-round ratios. Full speed:
  // msgs/s per consumer ÷ the ring's (vs_ring). Fixed rate and ping-pong:
  // the ring's latency ÷ this row's, at p99 (vs_ring) and p50 (vs_ring_p50).
  std::optional<double> vs_ring;
  std::optional<double> vs_ring_p50;
  // The bridge row ÷ the plain TCP socket of its group, median of per-round
  // ratios: msgs/s per consumer at full speed, the socket's p99 ÷ the
  // bridge's at a fixed rate.
  std::optional<double> vs_tcp;
};

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
    if (other.cf.mode == Mode::full) {
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
  if (r.cf.mode == Mode::full) return fmt_ratio(*r.vs_ring);
  return (r.vs_ring_p50 ? fmt_ratio(*r.vs_ring_p50) : "–") + " / " + fmt_ratio(*r.vs_ring);
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
    const bool lat = have && !idle;
    std::printf("| %s | %s | %u | %u | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                name_of(r.cf.transport), mode_label(o, r.cf.mode).c_str(), r.cf.consumers, r.cf.size,
                fanout(r.cf).c_str(), lat ? fmt_rate(m.per_consumer_mps).c_str() : dash.c_str(),
                lat ? fmt("%.1f", m.per_consumer_mps * r.cf.size / 1e6).c_str() : dash.c_str(),
                lat ? fmt_rate(m.total_mps).c_str() : dash.c_str(),
                lat ? fmt_ns(m.p50).c_str() : dash.c_str(), lat ? fmt_ns(m.p90).c_str() : dash.c_str(),
                lat ? fmt_ns(m.p99).c_str() : dash.c_str(), lat ? fmt_ns(m.p999).c_str() : dash.c_str(),
                lat ? fmt_ns(m.max).c_str() : dash.c_str(),
                have ? fmt("%.1f %%", m.consumer_cpu).c_str() : dash.c_str(), ratio_s.c_str(),
                ring_cell(r).c_str(), status.c_str());
  }
  std::fflush(stdout);
}

// ------------------------------------------------------------- targets
struct Target {
  std::string what;
  std::string measured;
  std::optional<bool> met;  // nullopt: not measured in this run
};

const Row* find(const std::vector<Row>& rows, Transport t, Mode m, std::uint32_t n, std::uint32_t size) {
  for (const Row& r : rows)
    if (r.cf.transport == t && r.cf.mode == m && r.cf.consumers == n && r.cf.size == size) return &r;
  return nullptr;
}

std::vector<Target> check_targets(const Options& o, const std::vector<Row>& rows) {
  std::vector<Target> t;
  auto usable = [](const Row* r) { return r && r->med.ok; };
  auto ratio_to = [&](const Row* shm, const Row* other) { return shm && other ? ratio(*shm, *other) : std::nullopt; };
  const Row* s1 = find(rows, Transport::shmbus, Mode::full, 1, 128);
  const Row* b1 = find(rows, Transport::bipc, Mode::full, 1, 128);
  const Row* s4 = find(rows, Transport::shmbus, Mode::full, 4, 128);
  const Row* z4 = find(rows, Transport::zmq, Mode::full, 4, 128);
  const Row* sp = find(rows, Transport::shmbus, Mode::pingpong, 1, 128);
  const Row* up = find(rows, Transport::uds, Mode::pingpong, 1, 128);
  const Row* sr = find(rows, Transport::shmbus, Mode::rate, 1, 128);
  const Row* si = find(rows, Transport::shmbus, Mode::idle, 1, 128);
  auto add = [&](std::string what, bool have, std::string measured, bool met) {
    t.push_back({std::move(what), have ? measured : "not measured", have ? std::optional<bool>(met) : std::nullopt});
  };
  add("1→1, 128 B: ≥ 30 M msgs/s", usable(s1), usable(s1) ? fmt_rate(s1->med.per_consumer_mps) + " msgs/s" : "",
      usable(s1) && s1->med.per_consumer_mps >= 30e6);
  {
    auto r = ratio_to(s1, b1);
    add("1→1, 128 B: ≥ 10× Boost.Interprocess message_queue", r.has_value(), r ? fmt("%.1f×", *r) : "", r && *r >= 10);
  }
  add("1→4, 128 B: every consumer ≥ 15 M msgs/s", usable(s4),
      usable(s4) ? fmt_rate(s4->med.per_consumer_mps) + " msgs/s (slowest consumer; fastest " +
                       fmt_rate(s4->med.max_consumer_mps) + ")" : "",
      usable(s4) && s4->med.per_consumer_mps >= 15e6);
  {
    auto r = ratio_to(s4, z4);
    add("1→4, 128 B: ≥ 20× ZeroMQ PUB/SUB (per consumer)", r.has_value(), r ? fmt("%.1f×", *r) : "", r && *r >= 20);
  }
  add("ping-pong one-way p50 ≤ 300 ns", usable(sp), usable(sp) ? fmt_ns(sp->med.p50) : "", usable(sp) && sp->med.p50 <= 300);
  add("ping-pong one-way p99 ≤ 1 µs", usable(sp), usable(sp) ? fmt_ns(sp->med.p99) : "", usable(sp) && sp->med.p99 <= 1000);
  {
    auto r = ratio_to(sp, up);
    add("ping-pong p99 ≥ 10× lower than the Unix socket's", r.has_value(), r ? fmt("%.1f×", *r) : "", r && *r >= 10);
  }
  add("at " + fmt_rate(static_cast<double>(o.rate)) + " msgs/s offered: p99 ≤ 20 µs", usable(sr) && o.rate == 100'000,
      usable(sr) ? fmt_ns(sr->med.p99) + " (consumer CPU " + fmt("%.1f %%", sr->med.consumer_cpu) + ")" : "",
      usable(sr) && sr->med.p99 <= 20'000);
  add("idle consumer < 1 % of a core", usable(si), usable(si) ? fmt("%.3f %%", si->med.consumer_cpu) : "",
      usable(si) && si->med.consumer_cpu < 1.0);
  // Issue 10's bridge targets, measured only with --transports bridge,tcp.
  const Row* g1 = find(rows, Transport::bridge, Mode::full, 1, 128);
  const Row* gr = find(rows, Transport::bridge, Mode::rate, 1, 128);
  add("bridge 1→1, 128 B: ≥ 2 M msgs/s", usable(g1),
      usable(g1) ? fmt_rate(g1->med.per_consumer_mps) + " msgs/s" : "",
      usable(g1) && g1->med.per_consumer_mps >= 2e6);
  add("bridge 1→1, 128 B: ≥ 0.7× the plain TCP socket", g1 && g1->vs_tcp.has_value(),
      g1 && g1->vs_tcp ? fmt("%.2f×", *g1->vs_tcp) : "", g1 && g1->vs_tcp && *g1->vs_tcp >= 0.7);
  if (usable(gr))  // reported, no bound
    t.push_back(
        {"bridge at " + fmt_rate(static_cast<double>(o.rate)) + " msgs/s offered: p99 reported",
         "p50 " + fmt_ns(gr->med.p50) + ", p99 " + fmt_ns(gr->med.p99), std::nullopt});
  return t;
}

// ---------------------------------------------------------------- child
int child_main(const std::string& role, int id, int ctl_fd) {
  signal(SIGPIPE, SIG_IGN);
  void* mem = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, ctl_fd, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "shmbus-bench: cannot map the control block\n");
    return 2;
  }
  close(ctl_fd);
  auto& c = *static_cast<Control*>(mem);
  const Role r = role == "producer" ? Role::producer : Role::consumer;
  RoleResult& res = r == Role::producer ? c.producer : c.consumer[id];
  try {
    if (c.cfg.ncpus) {
      const int cpu = cpu_for(c.cfg, r, id);
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0)
        throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu) + ": " + std::strerror(errno));
    }
    switch (c.cfg.transport) {
      case Transport::shmbus: run_shmbus(c, r, id); break;
      case Transport::bipc: run_bipc(c, r, id); break;
      case Transport::uds:
      case Transport::pipe: run_stream(c, r, id); break;
      case Transport::zmq: run_zmq(c, r, id); break;
      case Transport::ring: run_ring(c, r, id); break;
      case Transport::bridge: run_bridge(c, r, id); break;
      case Transport::tcp: run_tcp(c, r, id); break;
    }
  } catch (const std::exception& e) {
    set_error(res, e.what());
    finish_result(res, false);
    c.abort.store(1);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace bench

namespace bench {
// A command line that cannot be run: exit 2, like every shmbus program.
struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  Options o;
  std::string role;
  int id = 0;
  int ctl_fd = -1;

  CLI::App app{
      "shmbus-bench: one producer, N consumers, in separate processes, over shmbus and the\n"
      "transports it replaces (Boost.Interprocess message_queue, a Unix domain socket, a pipe,\n"
      "ZeroMQ ipc:// PUB/SUB), in the same run, each also compared with a minimal reference\n"
      "ring (`ring`: the ceiling on this machine). Every receiver checks every sequence number;\n"
      "a run with a loss is FAILED. Machine, placement and a markdown table on stdout,\n"
      "progress on stderr."};
  app.add_option(
         "--transports", o.transports,
         "ring (the reference), shmbus, bipc, uds, pipe, zmq; also (not by default, full and rate "
         "modes) bridge (bus → shmbus-bridge serve → TCP subscriber) and tcp (a plain loopback "
         "socket)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--modes", o.modes, "full, rate, pingpong, idle")->delimiter(',')->capture_default_str();
  app.add_option("--consumers", o.consumers, "consumer counts (full speed)")->delimiter(',')->capture_default_str();
  app.add_option("--sizes", o.sizes, "message sizes in bytes (full speed), >= 16")->delimiter(',')->capture_default_str();
  app.add_option("--count", o.count, "messages per full-speed run")->capture_default_str();
  app.add_option("--rate", o.rate, "offered msgs/s in rate mode")
      ->check(shmbus::tools::positive_number())
      ->capture_default_str();
  app.add_option("--rate-count", o.rate_count, "messages per rate run")->capture_default_str();
  app.add_option("--rate-consumers", o.rate_consumers, "consumer counts in rate mode")->delimiter(',')->capture_default_str();
  app.add_option("--rate-sizes", o.rate_sizes, "message sizes in rate mode")->delimiter(',')->capture_default_str();
  app.add_option("--pp-count", o.pp_count, "round trips per ping-pong run")->capture_default_str();
  app.add_option("--pp-warmup", o.pp_warmup, "unrecorded round trips first")->capture_default_str();
  app.add_option("--pp-sizes", o.pp_sizes, "message sizes in ping-pong mode")->delimiter(',')->capture_default_str();
  app.add_option("--idle-seconds", o.idle_seconds, "how long the idle consumer waits")->capture_default_str();
  app.add_option("--idle-transports", o.idle_transports, "transports for the idle check")->delimiter(',')->capture_default_str();
  app.add_option("--runs", o.runs, "repeat each configuration; medians are reported")->capture_default_str();
  app.add_option("--policy", o.policy, "shmbus policy: block or overwrite")->capture_default_str();
  app.add_option("--wait", o.wait, "shmbus wait: adaptive, spin-yield, busy-spin")
      ->check(shmbus::tools::wait_strategy_check())
      ->capture_default_str();
  app.add_option("--spin-us", o.spin_us, "shmbus spin phase in µs (default: the library's)");
  app.add_option("--yield-us", o.yield_us, "shmbus yield phase in µs (default: the library's)");
  app.add_option("--capacity", o.capacity, "shmbus ring capacity in records (default: the library's, 65536)");
  app.add_option("--queue-depth", o.queue_depth, "message_queue depth in messages")->capture_default_str();
  app.add_option("--stamp-every", o.stamp_every,
                 "full speed: every Nth message carries its send time, and its latency is the sample "
                 "(1: every message; a clock read per message costs more than some transports)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--lib-timestamps", o.lib_timestamps,
                 "ProducerOptions::timestamps for shmbus: off (the library's default), coarse or precise "
                 "(latencies always come from the stamp each message carries)")
      ->check(CLI::IsMember({"off", "coarse", "precise"}))
      ->capture_default_str();
  app.add_option("--shmbus-read", o.shmbus_read,
                 "shmbus consumer: next (one Consumer::next() per message) or batch (read_batch(), up to 256 "
                 "per call); the ring takes as many per receive")
      ->check(CLI::IsMember({"next", "batch"}))
      ->capture_default_str();
  app.add_option("--cpus", o.cpus_text,
                 "pin the producer to the first CPU of this list and the consumers round-robin to the rest "
                 "(all to the one if only one), e.g. 0,1 or 0-3; default: unpinned");
  app.add_option("--clock", o.clock, "tsc (rdtsc calibrated to CLOCK_MONOTONIC) or monotonic")->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds before a run is killed and FAILED")->capture_default_str();
  app.add_option("--json", o.json_path, "write every run and the medians to this file");
  app.add_option("--bridge-path", o.bridge_path,
                 "the shmbus-bridge program the bridge transport runs")
      ->capture_default_str();
  app.add_flag("--targets", o.targets, "also print the issue's targets, met or not, as a second table");
  app.add_flag("--quick", o.quick, "tiny counts (a smoke test): 20000 msgs, 2000 round trips, 1 s idle");
  // Set by the orchestrator when it execs a role; hidden from --help.
  app.add_option("--role", role)->group("");
  app.add_option("--id", id)->group("");
  app.add_option("--ctl-fd", ctl_fd)->group("");
  shmbus::tools::add_version_flag(app, "shmbus-bench");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return shmbus::tools::cli_exit(app, e, "shmbus-bench");
  }

  if (!role.empty()) return child_main(role, id, ctl_fd);

  try {
    if (o.quick) {
      o.count = std::min<std::uint64_t>(o.count, 20'000);
      o.rate_count = std::min<std::uint64_t>(o.rate_count, 2'000);
      o.pp_count = std::min<std::uint64_t>(o.pp_count, 2'000);
      o.pp_warmup = std::min<std::uint64_t>(o.pp_warmup, 200);
      o.idle_seconds = std::min(o.idle_seconds, 1.0);
    }
    if (o.runs < 1) throw Usage("--runs must be >= 1");
    if (o.policy != "block" && o.policy != "overwrite") throw Usage("--policy: block or overwrite");
    if (o.clock != "tsc" && o.clock != "monotonic") throw Usage("--clock: tsc or monotonic");
    if (!o.cpus_text.empty()) {
      o.cpus = parse_cpu_list(o.cpus_text);
      if (o.cpus.empty()) throw Usage("--cpus: no CPU given");
      if (o.cpus.size() > static_cast<std::size_t>(kMaxCpus))
        throw Usage("--cpus: at most " + std::to_string(kMaxCpus) + " (one producer, 16 consumers)");
      const auto allowed = allowed_cpus();
      for (int c : o.cpus)
        if (std::find(allowed.begin(), allowed.end(), c) == allowed.end())
          throw Usage("--cpus: CPU " + std::to_string(c) + " is not available here (CPUs " +
                                   join(allowed) + ")");
    }
    auto transports = [](const std::vector<std::string>& names) {
      std::vector<Transport> v;
      for (const auto& n : names) {
        auto t = parse_transport(n);
        if (!t) throw Usage("unknown transport '" + n + "'");
        v.push_back(*t);
      }
      return v;
    };
    const auto ts = transports(o.transports);
    const auto idle_ts = transports(o.idle_transports);
    auto check_sizes = [](const std::vector<std::uint32_t>& v) {
      for (auto s : v)
        if (s < kMinMsgSize || s > 65536) throw Usage("message sizes must be 16..65536 bytes");
    };
    check_sizes(o.sizes);
    check_sizes(o.rate_sizes);
    check_sizes(o.pp_sizes);
    for (auto n : o.consumers)
      if (n < 1 || n > static_cast<std::uint32_t>(kMaxConsumers)) throw Usage("consumers must be 1..16");
    for (auto n : o.rate_consumers)
      if (n < 1 || n > static_cast<std::uint32_t>(kMaxConsumers)) throw Usage("consumers must be 1..16");

    // The matrix: groups of one (mode, consumers, size) across transports.
    std::vector<std::vector<Config>> groups;
    for (const auto& ms : o.modes) {
      if (ms == "full") {
        for (auto size : o.sizes)
          for (auto n : o.consumers) {
            groups.emplace_back();
            for (auto t : ts) groups.back().push_back({t, Mode::full, n, size});
          }
      } else if (ms == "rate") {
        for (auto size : o.rate_sizes)
          for (auto n : o.rate_consumers) {
            groups.emplace_back();
            for (auto t : ts) groups.back().push_back({t, Mode::rate, n, size});
          }
      } else if (ms == "pingpong") {
        for (auto size : o.pp_sizes) {
          groups.emplace_back();
          for (auto t : ts) groups.back().push_back({t, Mode::pingpong, 1, size});
        }
      } else if (ms == "idle") {
        groups.emplace_back();
        for (auto t : idle_ts) groups.back().push_back({t, Mode::idle, 1, 128});
      } else {
        throw Usage("unknown mode '" + ms + "'");
      }
    }

    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) throw std::runtime_error("cannot find /proc/self/exe");
    self[n] = '\0';
    g_self = self;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);

    const bool tsc = o.clock == "tsc" && invariant_tsc();
    const ClockCalibration cal = Clock::calibrate(tsc);
    json doc;
    doc["machine"] = machine_info();
    doc["placement"] = placement_info(o.cpus);
    print_header(doc["machine"], doc["placement"], o.shmbus_read);
    doc["clock"] = tsc ? "rdtsc, calibrated to CLOCK_MONOTONIC (one calibration for all processes)"
                       : "clock_gettime(CLOCK_MONOTONIC)";
    std::string cmdline;
    for (int i = 0; i < argc; ++i) cmdline += (i ? " " : "") + std::string(argv[i]);
    doc["command"] = cmdline;
    doc["options"] = {{"count", o.count}, {"rate", o.rate}, {"rate_count", o.rate_count},
                      {"pp_count", o.pp_count}, {"pp_warmup", o.pp_warmup}, {"idle_seconds", o.idle_seconds},
                      {"runs", o.runs}, {"policy", o.policy}, {"wait", o.wait}, {"capacity", o.capacity},
                      {"queue_depth", o.queue_depth}, {"lib_timestamps", o.lib_timestamps}, {"stamp_every", o.stamp_every},
                      {"shmbus_read", o.shmbus_read}, {"cpus", o.cpus}};
    doc["columns"] = {
        {"shmbus_times_better", "how many times better shmbus is than the row: msgs/s per consumer at full "
                                "speed, p99 latency otherwise; median of per-round ratios"},
        {"vs_ring", "the row as a fraction of the reference ring's speed in its group (1: as fast, below 1: "
                    "slower): msgs_per_s = msgs/s per consumer ÷ the ring's at full speed; p50, p99 = the "
                    "ring's latency ÷ the row's at a fixed rate and in ping-pong; median of per-round ratios"}};

    std::size_t total_runs = 0;
    for (const auto& g : groups) total_runs += g.size() * static_cast<std::size_t>(o.runs);
    std::vector<Row> rows;
    std::size_t done = 0;
    int serial = 0;
    const std::uint64_t t_start = mono_ns();
    for (const auto& g : groups) {
      const std::size_t first = rows.size();
      for (const auto& cf : g)
        rows.push_back(
            Row{cf, {}, {}, 0, {}, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
      for (int k = 0; k < o.runs; ++k) {
        for (std::size_t j = 0; j < g.size(); ++j) {
          const Config& cf = g[j];
          std::fprintf(stderr, "[%zu/%zu] %-6s %-8s consumers=%u size=%u run %d/%d ... ", ++done, total_runs,
                       name_of(cf.transport), name_of(cf.mode), cf.consumers, cf.size, k + 1, o.runs);
          std::fflush(stderr);
          Metrics m = run_once(o, cf, cal, serial++);
          if (g_interrupted) {
            std::fprintf(stderr, "interrupted\n");
            return 130;
          }
          if (!m.ok) std::fprintf(stderr, "FAILED: %s\n", m.error.c_str());
          else if (cf.mode == Mode::idle) std::fprintf(stderr, "consumer CPU %.3f %%\n", m.consumer_cpu);
          else std::fprintf(stderr, "%s msgs/s per consumer, p50 %s, p99 %s%s\n", fmt_rate(m.per_consumer_mps).c_str(),
                            fmt_ns(m.p50).c_str(), fmt_ns(m.p99).c_str(),
                            m.bus.valid ? (", bus: " + std::to_string(m.bus.wakeups) + " futex wakes, " +
                                           std::to_string(m.bus.producer_waits) + " producer waits")
                                              .c_str()
                                        : "");
          rows[first + j].runs.push_back(std::move(m));
        }
      }
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
          if (r.cf.mode != Mode::full) r.vs_ring_p50 = ratio(r, *ring, &Metrics::p50);
        }
        if (tcp && r.cf.transport == Transport::bridge) r.vs_tcp = ratio(r, *tcp);
      }
    }
    std::fprintf(stderr, "%zu runs in %.0f s\n", total_runs, static_cast<double>(mono_ns() - t_start) / 1e9);
    {
      double load[3] = {};
      if (getloadavg(load, 3) == 3) doc["machine"]["loadavg_at_end"] = {load[0], load[1], load[2]};
      doc["seconds"] = static_cast<double>(mono_ns() - t_start) / 1e9;
    }

    print_table(o, rows);
    for (const Row& r : rows)
      if (r.vs_tcp)
        std::printf(
            "\n`bridge ÷ tcp`, %s, %u consumer(s), %u B: %s (%s; median of per-round ratios)\n",
            mode_label(o, r.cf.mode).c_str(), r.cf.consumers, r.cf.size,
            fmt_ratio(*r.vs_tcp).c_str(),
            r.cf.mode == Mode::full ? "msgs/s per consumer, the bridge's ÷ the plain socket's"
                                    : "p99 latency, the plain socket's ÷ the bridge's");
    const auto targets = check_targets(o, rows);
    if (o.targets) {
      std::printf("\n| target | measured | met |\n|---|---|---|\n");
      for (const auto& t : targets)
        std::printf("| %s | %s | %s |\n", t.what.c_str(), t.measured.c_str(),
                    !t.met ? "–" : *t.met ? "yes" : "**no**");
    }

    int failed_rows = 0;
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
      jr["failed_runs"] = r.failed;
      jr["status"] = r.failed ? "FAILED" : "ok";
      if (!r.first_error.empty()) jr["first_error"] = r.first_error;
      if (r.vs_shmbus) jr["shmbus_times_better"] = *r.vs_shmbus;
      if (r.vs_tcp)
        jr["vs_tcp"] =
            r.cf.mode == Mode::full ? json{{"msgs_per_s", *r.vs_tcp}} : json{{"p99", *r.vs_tcp}};
      if (r.cf.transport == Transport::ring && r.med.ok && r.cf.mode != Mode::idle) {
        jr["vs_ring"] = r.cf.mode == Mode::full ? json{{"msgs_per_s", 1.0}} : json{{"p50", 1.0}, {"p99", 1.0}};
      } else if (r.vs_ring) {
        jr["vs_ring"] = r.cf.mode == Mode::full ? json{{"msgs_per_s", *r.vs_ring}}
                                                 : json{{"p50", r.vs_ring_p50 ? json(*r.vs_ring_p50) : json(nullptr)},
                                                        {"p99", *r.vs_ring}};
      }
      jr["runs"] = json::array();
      for (const auto& m : r.runs) jr["runs"].push_back(to_json(m));
      jrows.push_back(jr);
      failed_rows += r.failed ? 1 : 0;
    }
    doc["results"] = jrows;
    json jt = json::array();
    for (const auto& t : targets)
      jt.push_back({{"target", t.what}, {"measured", t.measured}, {"met", t.met ? json(*t.met) : json(nullptr)}});
    doc["targets"] = jt;
    if (!o.json_path.empty()) {
      std::ofstream f(o.json_path);
      f << doc.dump(2) << "\n";
      if (!f) throw std::runtime_error("cannot write " + o.json_path);
    }
    if (failed_rows) {
      std::fprintf(stderr, "shmbus-bench: %d configuration(s) FAILED (see the status column)\n", failed_rows);
      return 1;
    }
    return 0;
  } catch (const Usage& e) {
    shmbus::tools::print_error("shmbus-bench", std::string(e.what()) + " (see --help)");
    return shmbus::tools::exit_usage;
  } catch (const std::exception& e) {
    shmbus::tools::print_error("shmbus-bench", e.what());
    return 1;
  }
}
