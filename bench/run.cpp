// shmbus-bench — running the matrix (run.hpp): the transports' names, the
// plan of a command line, one run in child processes, and the child side.
#include "run.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "machine.hpp"
#include "roles.hpp"

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
    case Mode::catchup: return "catchup";
  }
  return "?";
}

namespace {

std::optional<Transport> parse_transport(const std::string& s) {
  for (Transport t : kAllTransports)
    if (s == name_of(t)) return t;
  return std::nullopt;
}

}  // namespace

void apply_scale(Options& o) {
  const std::vector<int> cores = one_cpu_per_core();
  if (cores.size() < 2) throw Usage("--scale: needs at least two physical cores (found " +
                                    std::to_string(cores.size()) + ")");
  const auto most = static_cast<std::uint32_t>(std::min<std::size_t>(cores.size() - 1, kMaxConsumers));
  // At most kMaxConsumers (16): on a bigger machine half the cores is that many.
  std::vector<std::uint32_t> fan{1, 4, std::min(static_cast<std::uint32_t>(cores.size() / 2), most), most};
  std::sort(fan.begin(), fan.end());
  fan.erase(std::unique(fan.begin(), fan.end()), fan.end());
  fan.erase(std::remove_if(fan.begin(), fan.end(), [&](std::uint32_t n) { return n < 1 || n > most; }), fan.end());
  o.transports = {"ring", "shmbus"};
  o.modes = {"full", "pingpong"};
  o.consumers = fan;
  o.sizes = {32, 128, 512, 1024, 4096, 65536};
  o.pp_sizes = {128};
  o.cpus_text = join(std::vector<int>(cores.begin(), cores.begin() + most + 1));
}

std::vector<std::vector<Config>> plan(Options& o) {
  if (o.quick) {
    o.count = std::min<std::uint64_t>(o.count, 20'000);
    o.rate_count = std::min<std::uint64_t>(o.rate_count, 2'000);
    o.pp_count = std::min<std::uint64_t>(o.pp_count, 2'000);
    o.pp_warmup = std::min<std::uint64_t>(o.pp_warmup, 200);
    o.catchup_count = std::min<std::uint64_t>(o.catchup_count, 20'000);
    o.idle_seconds = std::min(o.idle_seconds, 1.0);
    o.size_bytes = std::min<std::uint64_t>(o.size_bytes, std::uint64_t{64} << 20);
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
  check_sizes(o.catchup_sizes);
  if (o.catchup_count < 1) throw Usage("--catchup-count must be >= 1");
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
    } else if (ms == "catchup") {
      // A backlog is something only the bridge and the plain socket it is
      // judged by are measured on; the other transports are left out.
      std::vector<Transport> cts;
      for (auto t : ts)
        if (t == Transport::bridge || t == Transport::tcp) cts.push_back(t);
      if (cts.empty()) throw Usage("mode catchup: needs --transports bridge and/or tcp");
      for (auto size : o.catchup_sizes) {
        groups.emplace_back();
        for (auto t : cts) groups.back().push_back({t, Mode::catchup, 1, size});
      }
    } else if (ms == "sizes") {
      // Not a matrix of transports: run_sizes() runs it (sizes.hpp).
    } else if (ms == "idle") {
      groups.emplace_back();
      for (auto t : idle_ts) groups.back().push_back({t, Mode::idle, 1, 128});
    } else {
      throw Usage("unknown mode '" + ms + "'");
    }
  }
  return groups;
}

namespace {

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

}  // namespace

void start_orchestrator() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw std::runtime_error("cannot find /proc/self/exe");
  self[n] = '\0';
  g_self = self;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGINT, on_interrupt);
  signal(SIGTERM, on_interrupt);
}

bool interrupted() noexcept { return g_interrupted != 0; }

namespace {

// The settings of one run of `cf`, in the control block the children read.
void configure(RunConfig& cfg, const Options& o, const Config& cf, int serial) {
  cfg.transport = cf.transport;
  cfg.mode = cf.mode;
  cfg.consumers = cf.mode == Mode::pingpong ? 1 : cf.consumers;
  cfg.size = cf.size;
  cfg.count = cf.mode == Mode::rate       ? o.rate_count
              : cf.mode == Mode::pingpong ? o.pp_count
              : cf.mode == Mode::catchup  ? o.catchup_count
              : o.scale ? std::min<std::uint64_t>(o.count, std::max<std::uint64_t>(10'000, kScaleBytes / cf.size))
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
  if (cf.mode == Mode::catchup) {  // the bus holds the whole backlog
    const std::uint64_t need = std::bit_ceil(cfg.count);
    cfg.capacity = std::max<std::uint64_t>(cfg.capacity, need);
  }
  cfg.lib_timestamps = o.lib_timestamps == "off" ? 0 : o.lib_timestamps == "precise" ? 2 : 1;
  cfg.queue_depth = o.queue_depth;
  cfg.recv_batch = o.shmbus_read == "batch" ? kBatchMax : 1;
  cfg.stamp_every = o.stamp_every;
  cfg.ncpus = static_cast<std::uint32_t>(o.cpus.size());
  for (std::size_t i = 0; i < o.cpus.size(); ++i) cfg.cpus[i] = o.cpus[i];
  std::snprintf(cfg.name, sizeof cfg.name, "shmbus-bench-%d-%d", static_cast<int>(getpid()),
                serial);
}

// The channels of the uds and pipe transports, two descriptors each: the
// producer's end (a pipe's write end), then the consumer's (the read end).
std::vector<int> stream_channels(const RunConfig& cfg) {
  const bool uds = cfg.transport == Transport::uds;
  const int channels = cfg.mode == Mode::pingpong ? (uds ? 1 : 2) : static_cast<int>(cfg.consumers);
  std::vector<int> fds;
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
  return fds;
}

// Transport set-up in the orchestrator: the named objects (and the bridge's
// server), and in cfg.fds the descriptors the children inherit.
void set_up_transport(RunConfig& cfg, const Options& o, BridgeServer& server) {
  std::vector<int> fds;
  switch (cfg.transport) {
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
      if (cfg.mode == Mode::pingpong || cfg.mode == Mode::idle)
        throw std::runtime_error("tcp: full and rate modes only");
      fds = tcp_pairs(cfg.consumers);
      break;
    case Transport::uds:
    case Transport::pipe: fds = stream_channels(cfg); break;
  }
  if (fds.size() > static_cast<std::size_t>(kMaxFds)) throw std::runtime_error("too many consumers");
  for (std::size_t i = 0; i < fds.size(); ++i) cfg.fds[i] = fds[i];
  cfg.nfds = static_cast<std::uint32_t>(fds.size());
}

// A child process, and what errors call it.
using Child = std::pair<pid_t, std::string>;

// Consumers first, then the producer (the last of the list).
std::vector<Child> spawn_roles(int ctl_fd, const RunConfig& cfg) {
  std::vector<Child> kids;
  for (std::uint32_t i = 0; i < cfg.consumers; ++i)
    kids.emplace_back(spawn(ctl_fd, "consumer", static_cast<int>(i)), "consumer " + std::to_string(i));
  kids.emplace_back(spawn(ctl_fd, "producer", 0), "producer");
  return kids;
}

// How the children ended: their wait statuses, in the order of the list,
// and whether they were killed.
struct Exits {
  std::vector<int> status;
  bool killed = false;
};

// Waits for all, up to the timeout (plus the idle time and a grace period)
// or SIGINT/SIGTERM; then sets the abort flag and, a second later, kills
// those still running.
Exits wait_for(const std::vector<Child>& kids, Control& c) {
  const std::uint64_t deadline = mono_ns() + c.cfg.timeout_ns + c.cfg.idle_ns + 5'000'000'000ull;
  Exits e{std::vector<int>(kids.size(), -1), false};
  std::size_t left = kids.size();
  while (left) {
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (e.status[i] != -1) continue;
      int st = 0;
      const pid_t r = waitpid(kids[i].first, &st, WNOHANG);
      if (r == kids[i].first) {
        e.status[i] = st;
        --left;
      }
    }
    if (!left) break;
    if ((mono_ns() > deadline || g_interrupted) && !e.killed) {
      c.abort.store(1);
      sleep_ms(1000);
      for (std::size_t i = 0; i < kids.size(); ++i)
        if (e.status[i] == -1) kill(kids[i].first, SIGKILL);
      e.killed = true;
    }
    sleep_ms(5);
  }
  return e;
}

// m.ok when every role finished and succeeded; m.error says which died or
// failed, and how.
void check_roles(const Control& c, const std::vector<Child>& kids, const Exits& exits, Metrics& m) {
  std::string err;
  auto check = [&](const RoleResult& r, const std::string& who, int st) {
    if (!r.done.load(std::memory_order_acquire)) {
      std::ostringstream s;
      s << who << " died";
      if (WIFSIGNALED(st)) s << " (signal " << WTERMSIG(st) << ")";
      if (WIFEXITED(st)) s << " (exit " << WEXITSTATUS(st) << ")";
      if (exits.killed) s << " (killed after the timeout)";
      err += (err.empty() ? "" : "; ") + s.str();
      return false;
    }
    if (!r.ok) err += (err.empty() ? "" : "; ") + who + ": " + r.error;
    return r.ok != 0;
  };
  bool ok = true;
  for (std::uint32_t i = 0; i < c.cfg.consumers; ++i)
    ok &= check(c.consumer[i], kids[i].second, exits.status[i]);
  ok &= check(c.producer, "producer", exits.status.back());
  m.ok = ok;
  m.error = err;
}

// A role's CPU time, in % of a core over its measured interval.
double cpu_pct(const RoleResult& r) { return pct(r.cpu_user_ns + r.cpu_sys_ns, r.wall_ns); }

// The latency quantiles and the maximum of `h`.
void set_latencies(Metrics& m, const Histogram& h) {
  m.p50 = static_cast<double>(h.quantile(0.5));
  m.p90 = static_cast<double>(h.quantile(0.9));
  m.p99 = static_cast<double>(h.quantile(0.99));
  m.p999 = static_cast<double>(h.quantile(0.999));
  m.max = static_cast<double>(h.max());
}

// Idle: what the waiting consumers cost.
void measure_idle(const Control& c, Metrics& m) {
  double cpu = 0;
  for (std::uint32_t i = 0; i < c.cfg.consumers; ++i) cpu += cpu_pct(c.consumer[i]);
  m.consumer_cpu = cpu / c.cfg.consumers;
  m.seconds = static_cast<double>(c.consumer[0].wall_ns) / 1e9;
}

// Ping-pong: round trips, timed by the pinger (the producer).
void measure_pingpong(const Control& c, Metrics& m) {
  const RoleResult& prod = c.producer;
  m.per_consumer_mps = m.max_consumer_mps = m.total_mps =
      prod.wall_ns ? static_cast<double>(prod.received) * 1e9 / static_cast<double>(prod.wall_ns) : 0;
  set_latencies(m, prod.hist);
  m.producer_cpu = cpu_pct(prod);
  m.consumer_cpu = cpu_pct(c.consumer[0]);
  m.seconds = static_cast<double>(prod.wall_ns) / 1e9;
}

// Full speed, fixed rate and catch-up: every consumer from the producer's
// first send to its own last message.
void measure_stream(const Control& c, Metrics& m) {
  const RoleResult& prod = c.producer;
  Histogram all;
  double min_mps = 1e300, max_mps = 0, cpu = 0;
  std::uint64_t delivered = 0, last = 0;
  for (std::uint32_t i = 0; i < c.cfg.consumers; ++i) {
    const RoleResult& r = c.consumer[i];
    all.merge(r.hist);
    const double secs = r.last_ns > prod.start_ns ? static_cast<double>(r.last_ns - prod.start_ns) / 1e9 : 0;
    const double mps = secs > 0 ? static_cast<double>(r.received) / secs : 0;
    min_mps = std::min(min_mps, mps);
    max_mps = std::max(max_mps, mps);
    cpu += cpu_pct(r);
    delivered += r.received;
    last = std::max(last, r.last_ns);
  }
  m.per_consumer_mps = min_mps;
  m.max_consumer_mps = max_mps;
  m.total_mps =
      last > prod.start_ns ? static_cast<double>(delivered) * 1e9 / static_cast<double>(last - prod.start_ns) : 0;
  set_latencies(m, all);
  m.consumer_cpu = cpu / c.cfg.consumers;
  m.producer_cpu = cpu_pct(prod);
  m.seconds = last > prod.start_ns ? static_cast<double>(last - prod.start_ns) / 1e9 : 0;
}

// Tear-down in the orchestrator: the named objects go (shmbus's counters are
// read first), and a bridge server that had to be killed fails the run.
void tear_down_transport(const RunConfig& cfg, BridgeServer& server, Metrics& m) {
  switch (cfg.transport) {
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
}

}  // namespace

Metrics run_once(const Options& o, const Config& cf, const ClockCalibration& cal, int serial) {
  Metrics m;
  const int ctl_fd = memfd_create("shmbus-bench-ctl", 0);
  if (ctl_fd < 0) throw std::runtime_error("memfd_create failed");
  if (ftruncate(ctl_fd, sizeof(Control)) != 0) throw std::runtime_error("ftruncate failed");
  void* mem = mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED, ctl_fd, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* c = new (mem) Control{};
  c->clock = cal;
  configure(c->cfg, o, cf, serial);
  BridgeServer server;
  set_up_transport(c->cfg, o, server);

  const std::vector<Child> kids = spawn_roles(ctl_fd, c->cfg);
  for (std::uint32_t i = 0; i < c->cfg.nfds; ++i) close(c->cfg.fds[i]);
  const Exits exits = wait_for(kids, *c);

  check_roles(*c, kids, exits, m);
  switch (cf.mode) {
    case Mode::idle: measure_idle(*c, m); break;
    case Mode::pingpong: measure_pingpong(*c, m); break;
    default: measure_stream(*c, m); break;
  }

  tear_down_transport(c->cfg, server, m);
  munmap(mem, sizeof(Control));
  close(ctl_fd);
  return m;
}

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

}  // namespace bench
