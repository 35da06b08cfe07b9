// shmbus-bench — the end-to-end benchmark: shmbus against the transports
// users would otherwise pick, in the same run, between separate processes.
//
// This file is the wiring: the command line, then the matrix (run.hpp) run
// round by round, every configuration of a group once per round so that
// every ratio compares runs made at the same time, then the report
// (report.hpp) on stdout and in --json. The machine and the placement
// (machine.hpp) head both. Progress goes to stderr.
#include <CLI/CLI.hpp>
#include <shmbus/bus.hpp>
#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "machine.hpp"
#include "tools/common/program.hpp"
#include "report.hpp"
#include "run.hpp"
#include "sizes.hpp"

namespace {

using namespace bench;

// What the orchestrator passes a child it execs (--role, --id, --ctl-fd);
// no role: this is the orchestrator.
struct ChildArgs {
  std::string role;
  int id = 0;
  int ctl_fd = -1;
};

// The options of what is run: transports, modes, and each mode's workload.
void add_workload_options(CLI::App& app, Options& o) {
  app.add_option(
         "--transports", o.transports,
         "ring (the reference), shmbus, bipc, uds, pipe, zmq; also (not by default, full and rate "
         "modes) bridge (bus → shmbus-bridge serve → TCP subscriber) and tcp (a plain loopback "
         "socket)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--modes", o.modes,
                 "full, rate, pingpong, idle; also catchup (bridge and tcp only: a backlog of --catchup-count "
                 "messages already on the bus, or already encoded for the socket, read from start to end) and "
                 "sizes (shmbus by message size, --size-axis, 1 → 1 on the default bus: throughput with every "
                 "byte written and read beside one core's memcpy of the same bytes, and claim()/commit() "
                 "hand-off latency; --runs, --pp-count, --pp-warmup, --cpus apply)")
      ->delimiter(',')
      ->capture_default_str();
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
  app.add_option("--catchup-count", o.catchup_count, "messages in the backlog of a catchup run")
      ->capture_default_str();
  app.add_option("--size-axis", o.size_axis, "message sizes in bytes of the sizes mode, 16 .. 1 GiB")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--size-bytes", o.size_bytes,
                 "sizes mode: bytes per throughput run (at most --count messages, at least 64)")
      ->capture_default_str();
  app.add_option("--catchup-sizes", o.catchup_sizes, "message sizes in catchup mode")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--idle-seconds", o.idle_seconds, "how long the idle consumer waits")->capture_default_str();
  app.add_option("--idle-transports", o.idle_transports, "transports for the idle check")->delimiter(',')->capture_default_str();
  app.add_option("--runs", o.runs, "repeat each configuration; medians are reported")->capture_default_str();
  app.add_flag("--scale", o.scale,
               "the many-core table: ring and shmbus, the producer and one consumer per physical core, fan-out "
               "1, 4, half and all but one of the cores, full speed at 32 B .. 64 KiB (at most 4 GiB per run) "
               "and ping-pong at 128 B; after the full table, shmbus ÷ ring per consumer as a fan-out × size "
               "table. Sets --transports, --modes, --consumers, --sizes, --pp-sizes and --cpus");
}

// The options of how it is run: the transports' settings, placement, clock,
// output, and the hidden ones of a child.
void add_run_options(CLI::App& app, Options& o, std::string& dir, ChildArgs& child) {
  app.add_option("--policy", o.policy, "shmbus policy: block or overwrite")->capture_default_str();
  app.add_option("--wait", o.wait, "shmbus wait: adaptive, spin-yield, busy-spin")
      ->check(shmbus::tools::wait_strategy_check())
      ->capture_default_str();
  app.add_option("--spin-us", o.spin_us, "shmbus spin phase in µs (default: the library's)");
  app.add_option("--yield-us", o.yield_us, "shmbus yield phase in µs (default: the library's)");
  app.add_option("--capacity", o.capacity, "shmbus ring capacity in records (default: the library's, the power of two of records nearest 4 MiB)");
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
  app.add_option("--dir", dir,
                 "directory of the shmbus buses, tmpfs or hugetlbfs (default: $SHMBUS_DIR, else /dev/shm): "
                 "e.g. a hugetlbfs mount for 2 MiB pages (docs/huge-pages.md)")
      ->type_name("DIR");
  app.add_flag("--quick", o.quick,
               "tiny counts (a smoke test): 20000 msgs (and backlog), 2000 round trips, 1 s idle");
  // Set by the orchestrator when it execs a role; hidden from --help.
  app.add_option("--role", child.role)->group("");
  app.add_option("--id", child.id)->group("");
  app.add_option("--ctl-fd", child.ctl_fd)->group("");
}

// The roles are other processes: they find the directory in the
// environment. Set before any thread starts.
void use_bus_dir(const std::string& dir) {
  if (!dir.empty()) {
    shmbus::set_bus_dir(dir);
    ::setenv("SHMBUS_DIR", shmbus::bus_dir().c_str(), 1);
  } else {
    shmbus::check_bus_dir();
  }
}

// What backs a bus there, from a small one made for the purpose: on stdout
// and in the --json document.
void report_bus_pages(nlohmann::json& doc) {
  const std::string probe = "bench-probe-" + std::to_string(::getpid());
  const std::string pages = shmbus::Bus::create(probe, {.capacity = 64, .record_size = 64}).info().pages;
  shmbus::Bus::remove(probe);
  std::printf("- shmbus buses in %s: %s\n\n", shmbus::bus_dir().c_str(), pages.c_str());
  std::fflush(stdout);
  doc["bus_dir"] = shmbus::bus_dir();
  doc["bus_pages"] = pages;
}

// Runs the matrix, round by round: every configuration of a group once per
// round, then the group's medians and ratios. False when interrupted (said
// on stderr), and `rows` is then incomplete.
bool run_matrix(const Options& o, const std::vector<std::vector<Config>>& groups, const ClockCalibration& cal,
                std::size_t total_runs, std::vector<Row>& rows) {
  std::size_t done = 0;
  int serial = 0;
  for (const auto& g : groups) {
    const std::size_t first = rows.size();
    for (const auto& cf : g)
      rows.push_back(
          Row{cf, {}, {}, 0, {}, std::nullopt, std::nullopt, std::nullopt, std::nullopt});
    for (int k = 0; k < o.runs; ++k) {
      for (std::size_t j = 0; j < g.size(); ++j) {
        print_run_start(++done, total_runs, g[j], k, o.runs);
        Metrics m = run_once(o, g[j], cal, serial++);
        if (interrupted()) {
          std::fprintf(stderr, "interrupted\n");
          return false;
        }
        print_run_end(g[j], m);
        rows[first + j].runs.push_back(std::move(m));
      }
    }
    compare_group(rows, first);
  }
  return true;
}

// The table on stdout and the --json document; the exit status: 1 when a
// configuration (or a size of the sizes mode) failed.
int report_results(const Options& o, const std::vector<Row>& rows, const nlohmann::json& size_rows,
                   nlohmann::json& doc) {
  if (!rows.empty()) {
    print_table(o, rows);
    print_vs_tcp(o, rows);
    if (o.scale) doc["scale"] = print_scale_table(rows);
  }
  doc["results"] = results_json(rows);
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << doc.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + o.json_path);
  }
  auto failed_rows = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.failed != 0; });
  for (const auto& r : size_rows)
    if (!r["error"].get<std::string>().empty()) ++failed_rows;
  if (failed_rows) {
    std::fprintf(stderr, "shmbus-bench: %d configuration(s) FAILED (see the status column)\n",
                 static_cast<int>(failed_rows));
    return 1;
  }
  return 0;
}

// The orchestrator: the machine and placement, the sizes mode, the matrix,
// then the report. The exit status; throws Usage for a command line that
// cannot be run.
int orchestrate(Options& o, const std::string& dir, int argc, char** argv) {
  use_bus_dir(dir);
  if (o.scale) apply_scale(o);
  const auto groups = plan(o);
  start_orchestrator();
  const bool tsc = o.clock == "tsc" && invariant_tsc();
  const ClockCalibration cal = Clock::calibrate(tsc);
  nlohmann::json doc = describe_run(o, tsc, argc, argv);
  print_header(doc["machine"], doc["placement"], o.shmbus_read);
  report_bus_pages(doc);

  std::size_t total_runs = 0;
  for (const auto& g : groups) total_runs += g.size() * static_cast<std::size_t>(o.runs);
  nlohmann::json size_rows;
  if (std::find(o.modes.begin(), o.modes.end(), "sizes") != o.modes.end()) {
    size_rows = run_sizes(o);
    doc["sizes"] = size_rows;
  }
  std::vector<Row> rows;
  const std::uint64_t t_start = mono_ns();
  if (!run_matrix(o, groups, cal, total_runs, rows)) return 130;
  std::fprintf(stderr, "%zu runs in %.0f s\n", total_runs, static_cast<double>(mono_ns() - t_start) / 1e9);
  double load[3] = {};
  if (getloadavg(load, 3) == 3) doc["machine"]["loadavg_at_end"] = {load[0], load[1], load[2]};
  doc["seconds"] = static_cast<double>(mono_ns() - t_start) / 1e9;
  return report_results(o, rows, size_rows, doc);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  ChildArgs child;
  std::string dir;

  CLI::App app{
      "shmbus-bench: one producer, N consumers, in separate processes, over shmbus and the\n"
      "transports it replaces (Boost.Interprocess message_queue, a Unix domain socket, a pipe,\n"
      "ZeroMQ ipc:// PUB/SUB), in the same run, each also compared with a minimal reference\n"
      "ring (`ring`: the ceiling on this machine). Every receiver checks every sequence number;\n"
      "a run with a loss is FAILED. Machine, placement and a markdown table on stdout,\n"
      "progress on stderr."};
  add_workload_options(app, o);
  add_run_options(app, o, dir, child);
  shmbus::tools::add_version_flag(app, "shmbus-bench");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return shmbus::tools::cli_exit(app, e, "shmbus-bench");
  }

  if (!child.role.empty()) return child_main(child.role, child.id, child.ctl_fd);

  try {
    return orchestrate(o, dir, argc, argv);
  } catch (const Usage& e) {
    shmbus::tools::print_error("shmbus-bench", std::string(e.what()) + " (see --help)");
    return shmbus::tools::exit_usage;
  } catch (const std::exception& e) {
    shmbus::tools::print_error("shmbus-bench", e.what());
    return 1;
  }
}
