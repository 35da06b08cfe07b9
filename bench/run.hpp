// shmbus-bench — running the matrix: what the command line asks for
// (Options), the configurations it expands to (Config, grouped so that
// every transport of a group runs the same workload), one run of a
// configuration in child processes (run_once), and the child side
// (child_main).
//
// The orchestrator (the program without --role) runs every configuration:
// for each it creates the transport's shared objects, forks and execs itself
// once per role (one producer, N consumers; or pinger and ponger), waits, and
// reads the results the children left in a shared control block (an
// anonymous memfd inherited across exec).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"

// The shmbus-bridge program of this build (bench/CMakeLists.txt); empty when
// bridge/ is not built, and then the bridge and tcp transports refuse to run.
#ifndef SHMBUS_BRIDGE_PATH
#define SHMBUS_BRIDGE_PATH ""
#endif

namespace bench {

// A command line that cannot be run: exit 2, like every shmbus program.
struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::vector<std::string> transports{"ring", "shmbus", "bipc", "uds", "pipe", "zmq"};
  std::vector<std::string> modes{"full"};
  std::vector<std::uint32_t> consumers{1, 2, 4};
  std::vector<std::uint32_t> sizes{32, 128, 1024};
  std::vector<std::uint32_t> rate_consumers{1};
  std::vector<std::uint32_t> rate_sizes{128};
  std::vector<std::uint32_t> pp_sizes{128};
  std::vector<std::uint32_t> catchup_sizes{128};
  std::vector<std::string> idle_transports{"shmbus"};
  // --modes sizes (sizes.hpp): message sizes, and bytes moved per throughput run.
  std::vector<std::uint64_t> size_axis{64, 128, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304};
  std::uint64_t size_bytes = std::uint64_t{1} << 30;
  std::uint64_t count = 1'000'000;
  std::uint64_t rate = 100'000;
  std::uint64_t rate_count = 200'000;
  std::uint64_t pp_count = 100'000;
  std::uint64_t pp_warmup = 10'000;
  std::uint64_t catchup_count = 1'000'000;  // messages in the backlog
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
  std::string bridge_path = SHMBUS_BRIDGE_PATH;
  bool quick = false;
  // --scale: the many-core table (apply_scale()).
  bool scale = false;
};

// One configuration of the matrix.
struct Config {
  Transport transport;
  Mode mode;
  std::uint32_t consumers;
  std::uint32_t size;
};

// --scale: the reference ring and shmbus, the producer and one consumer
// per physical core (the first CPU of each core this process may use),
// fan-out 1, 4, half and all but one of those cores, full speed at
// 32 B .. 64 KiB (kScaleBytes per run at most, and never more than
// --count messages), and ping-pong at 128 B. Replaces --transports,
// --modes, --consumers, --sizes, --pp-sizes and --cpus; throws Usage on
// a machine with one core.
inline constexpr std::uint64_t kScaleBytes = std::uint64_t{4} << 30;
void apply_scale(Options& o);

// Applies --quick, checks the options (throws Usage) and parses --cpus into
// o.cpus; then expands them into groups of one (mode, consumers, size)
// across the transports, in the order they are run.
std::vector<std::vector<Config>> plan(Options& o);

// What one run of a configuration measured.
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

// Makes the orchestrator ready to spawn its roles: finds its own program
// (/proc/self/exe), ignores SIGPIPE, and turns SIGINT and SIGTERM into
// interrupted().
void start_orchestrator();
// Whether SIGINT or SIGTERM arrived: the run in progress was stopped and
// cleaned up, and no other should start.
bool interrupted() noexcept;

// Runs one configuration once: set up, spawn, wait, read the results.
// `serial` makes the run's object names unique within this process.
Metrics run_once(const Options& o, const Config& cf, const ClockCalibration& cal, int serial);

// A child process (--role producer|consumer --id N --ctl-fd FD): pins
// itself, runs its role over the transport of the control block, and leaves
// its result there. Returns the exit code.
int child_main(const std::string& role, int id, int ctl_fd);

}  // namespace bench
