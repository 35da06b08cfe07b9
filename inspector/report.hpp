// shmbus-inspect — what a bus looks like to a person: one or two snapshots
// turned into lags, rates and warnings, rendered as text or JSON.
//
// Everything here is derived from shmbus::Snapshot (inspect.hpp); nothing
// reads the segment directly.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shmbus/inspect.hpp"

namespace shmbus::inspect_tool {

struct ReaderReport {
  ReaderView view;
  bool alive = false;            // liveness == alive
  bool stopped = false;          // alive but stopped (SIGSTOP, a debugger): reads nothing
  std::uint64_t lag = 0;         // head - cursor: messages not yet read
  double lag_percent = 0;        // lag as % of capacity
  std::optional<double> rate;    // messages/s delivered over the sample
  std::optional<double> idle_s;  // since its last read or wait; empty if never
};

// What the retained records hold, walked in sequence order from the oldest
// (shmbus-inspect show; a copy of every retained message, so not in watch).
struct RingUse {
  std::uint64_t messages = 0;         // messages whose first record is retained and readable
  std::uint64_t message_records = 0;  // records those messages take
  std::uint64_t spans = 0;            // of them, messages that span records
  std::uint64_t span_records = 0;     // records those take
  std::uint32_t largest_span = 0;     // most records one message takes (0: no spans)
  std::uint64_t padding = 0;          // records padding the end of a lap before a span
  std::uint64_t gaps = 0;             // sequences that gap markers skip (skip_to)
  std::uint64_t partial = 0;          // records inside a message whose first record is gone
  std::uint64_t unreadable = 0;       // overwritten while read, uncommitted or corrupt
};

struct BusReport {
  Snapshot snap;
  std::uint64_t now_ns = 0;              // CLOCK_REALTIME when the report was taken
  std::optional<double> sample_s;        // seconds between the two snapshots
  std::optional<double> publish_rate;    // messages/s over the sample
  std::uint64_t retained = 0;            // head - oldest: records a late joiner can read
  // head - the cursor of the slowest reader that holds the producer (on an
  // `overwrite` bus, of the slowest reader), at most capacity: how near a
  // `block` producer is to waiting. Best-effort readers, readers let go and
  // evicted ones hold nothing back and are left out.
  std::uint64_t unread = 0;
  double fill_percent = 0;               // unread as % of capacity
  std::uint32_t fill_readers = 0;        // readers counted in unread
  // The producer's wait for space under way: for how long, 0 if none.
  std::uint64_t waiting_ns = 0;
  std::optional<double> publish_age_s;   // since the newest record was published
  bool producer_alive = false;           // attached and alive
  bool producer_stopped = false;         // alive but stopped (SIGSTOP, a debugger)
  std::optional<std::uint32_t> blocked_on_slot;  // Diagnosis::blocked_on_slot
  std::vector<ReaderReport> readers;     // by slot
  std::vector<Warning> warnings;         // diagnose(): the library's judgement
  std::optional<RingUse> ring_use;       // show only
};

// A report from one snapshot (no rates) ...
BusReport make_report(const Snapshot& snap, std::uint64_t now_ns);
// ... or from two taken `seconds` apart (rates from the difference).
BusReport make_report(const Snapshot& before, const Snapshot& after, double seconds,
                      std::uint64_t now_ns);

bool is_alive(Liveness l) noexcept;

// What the STATE column shows: "alive", "alive,asleep", "stopped", "dead"
// or "unknown".
std::string reader_state(const ReaderReport& r);

// JSON (schema in docs/inspector.md).
nlohmann::ordered_json to_json(const BusReport& r);
nlohmann::ordered_json to_json(const ReaderView& r);
nlohmann::ordered_json to_json(const ListEntry& e, std::uint64_t now_ns);
nlohmann::ordered_json to_json(const CreationFile& f);

// Text.
std::string render_show(const BusReport& r);
std::string render_watch_line(const BusReport& r);  // one line, no newline
// Buses, then the files of creations under way or killed mid-way.
std::string render_list(const std::vector<ListEntry>& entries, const std::vector<CreationFile>& creations,
                        std::uint64_t now_ns);

// A library message without its leading "bus 'NAME': ", for places that
// already name the bus.
std::string strip_bus_prefix(const std::string& bus, const std::string& message);

// Serialises with invalid UTF-8 replaced, so an odd reader name cannot throw.
std::string dump_json(const nlohmann::ordered_json& j, bool pretty);

}  // namespace shmbus::inspect_tool
