// shmbus-bench — the report: the runs of each configuration reduced to
// medians, every row compared with shmbus, with the reference ring of its
// group (transport_ring.cpp, `÷ ring`: the ceiling a minimal ring reaches on
// the same CPUs in the same run) and, for the bridge, with the plain TCP
// socket; then the machine, the placement and one markdown table on stdout,
// progress on stderr, and everything as JSON for --json.
//
// Every ratio is taken per round (the runs of one group are interleaved
// across transports, so round k of each row ran at the same time) and the
// median of those is reported: the machines are shared and noisy, and
// absolute times drift.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "run.hpp"

namespace bench {

// One configuration: its runs, their medians, and how it compares.
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

// Once every run of the group that starts at rows[first] is in: the medians
// of each row, then its ratios to shmbus, the ring and the TCP socket.
void compare_group(std::vector<Row>& rows, std::size_t first);

// What the numbers are measured on and how: the machine, the placement, the
// clock, the command line (argv), the options, and what the ratio columns
// mean. The head of the --json document.
nlohmann::json describe_run(const Options& o, bool tsc, int argc, char** argv);
// The report's header on stdout: what the numbers below were measured on
// (describe_run()'s machine and placement) and how shmbus consumers read.
void print_header(const nlohmann::json& machine, const nlohmann::json& place, const std::string& shmbus_read);

// Progress on stderr: "[done/total] transport mode ... run k/runs ... "
// before a run, its outcome after it.
void print_run_start(std::size_t done, std::size_t total, const Config& cf, int k, int runs);
void print_run_end(const Config& cf, const Metrics& m);

// The table on stdout, then each bridge row ÷ the plain TCP socket.
void print_table(const Options& o, const std::vector<Row>& rows);
void print_vs_tcp(const Options& o, const std::vector<Row>& rows);

// --scale: shmbus ÷ the ring per consumer at full speed as a fan-out ×
// size table, and ping-pong's p50 / p99 ÷ the ring's, on stdout; the same
// as the --json document's "scale".
nlohmann::json print_scale_table(const std::vector<Row>& rows);

// The rows, every run and the medians, as the --json document's "results".
nlohmann::json results_json(const std::vector<Row>& rows);

}  // namespace bench
