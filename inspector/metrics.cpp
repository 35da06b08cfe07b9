// shmbus-inspect metrics: Prometheus text exposition of the counters every
// bus keeps in its segment, read through shmbus::Inspector (read-only, no
// reader slot). With --listen, the shared metrics server
// (tools/common/metrics_server.hpp: one thread, every connection
// asynchronous with its own deadlines) renders them afresh for every GET
// /metrics.
//
// Everything in a segment is untrusted: reader names are written by other
// processes, so label values are escaped and limited to printable ASCII.
#include "inspector/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <optional>
#include <span>
#include <string_view>

#include "inspector/report.hpp"
#include "shmbus/inspect.hpp"
#include "tools/common/metrics_server.hpp"
#include "tools/common/program.hpp"
#include "tools/common/prometheus_text.hpp"

namespace shmbus::inspect_tool {
namespace {

using Family = tools::MetricFamily;

double seconds(std::uint64_t ns) { return static_cast<double>(ns) / 1e9; }

constexpr std::array<const char*, 4> kProducerStates = {"alive", "stopped", "dead", "unknown"};
constexpr std::array<const char*, 6> kReaderStates = {"alive", "stopped", "let_go", "evicted", "dead", "unknown"};

// A reader's one state, the most urgent first: its process gone (or not
// testable), its slot taken from it (the producer ignores it), let go (by
// a hold limit or shmbus-inspect let-go; it no longer holds the producer
// and is lapped if it falls behind, stopped or not), stopped, alive.
std::string_view reader_state_name(const ReaderReport& rr) {
  const ReaderView& r = rr.view;
  if (r.liveness != Liveness::alive) return to_string(r.liveness);
  if (r.evicted) return "evicted";
  if (r.let_go_ns != 0) return "let_go";
  return rr.stopped ? "stopped" : "alive";
}

// The families of one bus's figures, in exposition order.
struct BusFamilies {
  Family up{"shmbus_bus_up", "gauge", "1 if the bus could be opened and validated, else 0", {}};
  Family capacity{"shmbus_bus_capacity_records", "gauge", "Records in the ring", {}};
  Family record_size{"shmbus_bus_record_size_bytes", "gauge", "Bytes per record, header included", {}};
  Family head{"shmbus_bus_head", "gauge", "Next sequence number the producer will publish", {}};
  Family oldest{"shmbus_bus_oldest", "gauge", "Oldest sequence number still retained", {}};
  Family published{"shmbus_messages_published", "counter", "Messages published", {}};
  Family waits{"shmbus_producer_waits", "counter", "Times the producer found the ring full", {}};
  Family wait_s{"shmbus_producer_wait_seconds", "counter",
                "Time the producer spent waiting for space, the wait in progress included", {}};
  Family waiting_s{"shmbus_producer_waiting_seconds", "gauge",
                   "How long the wait for space in progress has lasted, 0 if the producer is not waiting", {}};
  Family wakeups{"shmbus_wakeups", "counter", "Futex wake calls made (data and space)", {}};
  Family reclaimed{"shmbus_readers_reclaimed", "counter", "Dead reader slots reclaimed", {}};
  Family let_go{"shmbus_readers_let_go", "counter",
                "Readers let go: by the producer's hold limit, or by shmbus-inspect let-go", {}};
  Family max_hold{"shmbus_producer_max_hold_seconds", "gauge",
                  "The attached producer's hold limit, 0 if it has none", {}};
  Family last_pub{"shmbus_last_publish_timestamp_seconds", "gauge",
                  "CLOCK_REALTIME of the newest record, 0 if the producer does not stamp", {}};
  Family sleepers{"shmbus_data_sleepers", "gauge", "Consumers asleep waiting for data", {}};
  Family readers{"shmbus_readers", "gauge", "Reader slots in use", {}};
  Family prod_alive{"shmbus_producer_alive", "gauge",
                    "1 if a live process holds the producer role (stopped or not), else 0", {}};
  Family prod_state{"shmbus_producer_state", "gauge",
                    "1 for the producer role's state (alive, stopped, dead, unknown), 0 for the others", {}};
  Family prod_pid{"shmbus_producer_pid", "gauge",
                  "Pid of the producer role's holder, or of its last holder (in its own PID namespace)", {}};
  Family prod_waiting{"shmbus_producer_waiting_for_space", "gauge",
                      "1 if the producer is blocked on a full ring", {}};
  Family prod_closed{"shmbus_producer_closed", "gauge", "1 if end-of-stream was marked", {}};
  Family takeovers{"shmbus_producer_takeovers", "counter", "Producers that took the bus over", {}};

  std::vector<const Family*> all() const {
    return {&up, &capacity, &record_size, &head, &oldest, &published, &waits, &wait_s, &waiting_s, &wakeups, &reclaimed, &let_go, &max_hold, &last_pub, &sleepers, &readers, &prod_alive, &prod_state, &prod_pid, &prod_waiting, &prod_closed, &takeovers};
  }
};

// The families of one reader slot's figures.
struct ReaderFamilies {
  Family r_cursor{"shmbus_reader_cursor", "gauge", "Next sequence number the reader will read", {}};
  Family r_lag{"shmbus_reader_lag_messages", "gauge", "Messages published but not yet read (head - cursor)", {}};
  Family r_delivered{"shmbus_reader_delivered", "counter", "Messages delivered to the reader", {}};
  Family r_lost{"shmbus_reader_lost", "counter",
                 "Sequences the reader lost (lapped: overwrite, best-effort or let go)", {}};
  Family r_alive{"shmbus_reader_alive", "gauge",
                 "1 if the reader's process is alive (holds its slot's lock; stopped or not); 0 if dead or "
                 "unknown", {}};
  Family r_state{"shmbus_reader_state", "gauge",
                 "1 for the reader's state (alive, stopped, let_go, evicted, dead, unknown), 0 for the others", {}};
  Family r_pid{"shmbus_reader_pid", "gauge", "Pid of the reader's process (in its own PID namespace)", {}};
  Family r_last{"shmbus_reader_last_active_timestamp_seconds", "gauge",
                "CLOCK_REALTIME of the reader's last batch or wait", {}};
  Family r_holds{"shmbus_reader_holds_producer", "gauge",
                 "1 if the reader holds a block bus's producer back, 0 if it does not (best-effort, let go, "
                 "evicted, or an overwrite bus)", {}};
  Family r_let_go{"shmbus_reader_let_go_timestamp_seconds", "gauge",
                  "CLOCK_REALTIME the reader was let go (hold limit, or shmbus-inspect let-go), 0 if never", {}};

  std::vector<const Family*> all() const {
    return {&r_cursor, &r_lag, &r_delivered, &r_lost, &r_alive, &r_state, &r_pid, &r_last, &r_holds, &r_let_go};
  }
};

// The families of one remembered reader name's figures.
struct DurableFamilies {
  Family d_cursor{"shmbus_durable_cursor", "gauge", "Where the durable reader name resumes", {}};
  Family d_lag{"shmbus_durable_lag_messages", "gauge",
               "Messages published after the name's position (head - cursor)", {}};
  Family d_retained{"shmbus_durable_position_retained", "gauge",
                    "1 if the bus still holds the name's position, 0 if a resume would start with a loss", {}};
  Family d_gone{"shmbus_durable_gone_messages", "gauge",
                "Messages after the name's position the bus no longer holds (oldest - cursor), 0 if none", {}};
  Family d_held{"shmbus_durable_held", "gauge", "1 if a live reader holds the name now", {}};
  Family d_updated{"shmbus_durable_updated_timestamp_seconds", "gauge",
                   "CLOCK_REALTIME of the name holder's last attach or detach", {}};

  std::vector<const Family*> all() const {
    return {&d_cursor, &d_lag, &d_retained, &d_gone, &d_held, &d_updated};
  }
};

// One sample per state, 1 for the one that holds: the set of series stays
// the same while the state changes.
void states(Family& f, const std::string& labels, std::span<const char* const> all, std::string_view state) {
  for (const char* s : all) f.sample(fmt::format("{},state=\"{}\"", labels, s), state == s ? 1 : 0);
}

// The bus-wide figures of `s` (labels `bus`). The producer's wait time counts
// the wait in progress; `memory`, when given, keeps it from going backwards
// between scrapes, and `seen` collects what the next scrape keeps.
void sample_bus(BusFamilies& f, const std::string& name, const std::string& bus, const Snapshot& s,
                const BusReport& report, std::uint64_t now, const MetricsMemory* memory, MetricsMemory& seen) {
  f.capacity.sample(bus, static_cast<double>(s.info.capacity));
  f.record_size.sample(bus, s.info.record_size);
  f.head.sample(bus, static_cast<double>(s.head));
  f.oldest.sample(bus, static_cast<double>(s.oldest));
  f.published.sample(bus, static_cast<double>(s.counters.published));
  f.waits.sample(bus, static_cast<double>(s.counters.producer_waits));
  // A wait in progress counts as it goes, so that rate() sees a live
  // stall. The library adds a wait to the counter when it ends; until
  // then it is now - the time it began (a live producer's only).
  const bool producer_alive = s.producer.attached && s.producer.liveness == Liveness::alive;
  const std::uint64_t ongoing_ns = producer_alive && s.producer.waiting_for_space &&
                                           s.producer.waiting_since_ns != 0 && now > s.producer.waiting_since_ns
                                       ? now - s.producer.waiting_since_ns
                                       : 0;
  double wait_total = seconds(s.counters.producer_wait_ns + ongoing_ns);
  // Never backwards between scrapes of one server (the ended wait is
  // measured on another clock than the one it began on), or a rate()
  // would read a counter reset.
  const std::string key = fmt::format("{}@{}", name, s.info.creation_time_ns);
  if (memory != nullptr) {
    if (const auto it = memory->wait_seconds.find(key); it != memory->wait_seconds.end()) {
      wait_total = std::max(wait_total, it->second);
    }
    seen.wait_seconds[key] = wait_total;
  }
  f.wait_s.sample(bus, wait_total);
  f.waiting_s.sample(bus, seconds(ongoing_ns));
  f.wakeups.sample(bus, static_cast<double>(s.counters.wakeups));
  f.reclaimed.sample(bus, static_cast<double>(s.counters.readers_reclaimed));
  f.let_go.sample(bus, static_cast<double>(s.counters.readers_let_go));
  f.max_hold.sample(bus, seconds(s.producer.max_hold_ns));
  f.last_pub.sample(bus, seconds(s.last_publish_ns));
  f.sleepers.sample(bus, s.counters.data_sleepers);
  f.readers.sample(bus, static_cast<double>(s.readers.size()));
  f.prod_alive.sample(bus, producer_alive ? 1 : 0);
  states(f.prod_state, bus, kProducerStates, report.producer_stopped ? "stopped" : to_string(s.producer.liveness));
  f.prod_pid.sample(bus, s.producer.pid);
  f.prod_waiting.sample(bus, s.producer.waiting_for_space ? 1 : 0);
  f.prod_closed.sample(bus, s.producer.closed ? 1 : 0);
  f.takeovers.sample(bus, s.producer.takeovers);
}

// One reader slot's figures; slot and name only as labels, so that a
// restarted reader continues its series.
void sample_reader(ReaderFamilies& f, const std::string& bus, Policy policy, const ReaderReport& rr) {
  const ReaderView& r = rr.view;
  const std::string l = fmt::format("{},slot=\"{}\",name=\"{}\"", bus, r.slot, tools::prometheus_label(r.name));
  f.r_cursor.sample(l, static_cast<double>(r.cursor));
  f.r_lag.sample(l, static_cast<double>(rr.lag));
  f.r_delivered.sample(l, static_cast<double>(r.delivered));
  f.r_lost.sample(l, static_cast<double>(r.lost));
  f.r_alive.sample(l, rr.alive ? 1 : 0);
  states(f.r_state, l, kReaderStates, reader_state_name(rr));
  f.r_pid.sample(l, r.pid);
  f.r_last.sample(l, seconds(r.last_active_ns));
  f.r_holds.sample(l, policy == Policy::block && !r.best_effort && !r.evicted ? 1 : 0);
  f.r_let_go.sample(l, seconds(r.let_go_ns));
}

// One remembered reader name's figures.
void sample_durable(DurableFamilies& f, const std::string& bus, const Snapshot& s, const BookmarkView& b) {
  const std::string l = fmt::format("{},name=\"{}\"", bus, tools::prometheus_label(b.name));
  const std::uint64_t cursor = std::min(b.cursor, s.head);  // untrusted: never past the head
  f.d_cursor.sample(l, static_cast<double>(b.cursor));
  f.d_lag.sample(l, static_cast<double>(s.head - cursor));
  f.d_retained.sample(l, cursor >= s.oldest ? 1 : 0);
  f.d_gone.sample(l, static_cast<double>(cursor < s.oldest ? s.oldest - cursor : 0));
  f.d_held.sample(l, b.held ? 1 : 0);
  f.d_updated.sample(l, seconds(b.updated_ns));
}

// Every bus of `buses` (none: every bus there is), with its snapshot or
// none when it cannot be opened (the reason goes to stderr).
std::vector<std::pair<std::string, std::optional<Snapshot>>> snapshots(const std::vector<std::string>& buses,
                                                                        const Trust& trust) {
  std::vector<std::pair<std::string, std::optional<Snapshot>>> found;
  if (buses.empty()) {
    for (ListEntry& e : list_buses(trust)) found.emplace_back(e.name, std::move(e.snapshot));
    return found;
  }
  for (const std::string& name : buses) {
    std::optional<Snapshot> s;
    try {
      s = Inspector::open(name, trust).snapshot();
    } catch (const Error& e) {
      // Reported as down; the scrape goes on.
      tools::print_notice("shmbus-inspect", e.what());
    }
    found.emplace_back(name, std::move(s));
  }
  return found;
}

}  // namespace

std::string render_metrics(const std::vector<std::string>& buses, const Trust& trust, MetricsMemory* memory) {
  BusFamilies bus_f;
  ReaderFamilies reader_f;
  DurableFamilies durable_f;
  const std::uint64_t now = tools::realtime_ns();
  MetricsMemory seen;
  for (const auto& [name, snap] : snapshots(buses, trust)) {
    const std::string bus = fmt::format("bus=\"{}\"", tools::prometheus_label(name));
    bus_f.up.sample(bus, snap ? 1 : 0);
    if (!snap) continue;
    // The same judgement as `show`: a live process in state T is stopped.
    const BusReport report = make_report(*snap, now);
    sample_bus(bus_f, name, bus, *snap, report, now, memory, seen);
    for (const ReaderReport& rr : report.readers) sample_reader(reader_f, bus, snap->info.policy, rr);
    for (const BookmarkView& b : snap->bookmarks) sample_durable(durable_f, bus, *snap, b);
  }
  if (memory != nullptr) *memory = std::move(seen);  // forgets buses that are gone
  std::vector<const Family*> all = bus_f.all();
  for (const std::vector<const Family*>& more : {reader_f.all(), durable_f.all()})
    all.insert(all.end(), more.begin(), more.end());
  return tools::render_families(all);
}

int run_metrics(const MetricsArgs& args, const Trust& trust) {
  if (args.listen.empty()) {
    const std::string text = render_metrics(args.buses, trust);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  MetricsMemory memory;  // the server's thread only
  tools::MetricsServer server(args.listen, "--listen", "shmbus-inspect", [&] {
    return render_metrics(args.buses, trust, &memory);
  });
  server.run_until_signal([&] {
    // The real port (useful with port 0), so a script can find the server.
    std::fprintf(stderr, "shmbus-inspect: serving metrics on %s\n", server.url().c_str());
    std::fflush(stderr);
  });
  std::fprintf(stderr, "shmbus-inspect: metrics server stopped after %llu requests\n",
               static_cast<unsigned long long>(server.served()));
  return 0;
}

}  // namespace shmbus::inspect_tool
