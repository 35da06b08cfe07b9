#include "inspector/commands.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <vector>
#include <unistd.h>

#include "inspector/report.hpp"
#include "inspector/text.hpp"
#include "shmbus/inspect.hpp"
#include "tools/common/message_format.hpp"
#include "tools/common/program.hpp"

namespace shmbus::inspect_tool {

using json = nlohmann::ordered_json;

tools::Failure bus_failure(const std::string& bus, const std::string& problem, std::string code) {
  return tools::Failure(tools::exit_failure, fmt::format("bus '{}': {}", bus, problem), std::move(code));
}

namespace {

void print_out(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

// One report, one line: with --json every line of stdout is one JSON
// object (docs/programs.md, "Every line is JSON").
void print_json(const json& j) {
  print_out(dump_json(j, false));
  print_out("\n");
}

const char* errc_name(Errc e) { return tools::errc_name(e); }

// What creations of `bus` killed mid-way left, as gc and rm remove it.
void print_abandoned(const std::string& bus, const std::vector<std::string>& abandoned) {
  for (const std::string& path : abandoned)
    print_out(fmt::format("bus '{}': removed {} (left by a creation killed mid-way)\n", bus, path));
}

// Errors that say nothing about the segment's contents: the bus cannot be
// looked at at all, so they are errors rather than findings.
bool is_access_error(Errc e) {
  return e == Errc::not_found || e == Errc::permission_denied || e == Errc::invalid_name ||
         e == Errc::system || e == Errc::foreign_owner || e == Errc::unsafe_file;
}

Trust g_trust;

// Stop flag for watch: set by SIGINT/SIGTERM.
std::atomic<bool> g_stop{false};
extern "C" void on_watch_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_watch_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a sleeping nanosleep returns EINTR at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps for `d`, or until a stop signal arrives. False if stopped.
bool sleep_unless_stopped(std::chrono::nanoseconds d) {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const auto total = deadline.tv_nsec + d.count() % 1'000'000'000;
  deadline.tv_sec += static_cast<time_t>(d.count() / 1'000'000'000 + total / 1'000'000'000);
  deadline.tv_nsec = static_cast<long>(total % 1'000'000'000);
  while (!g_stop.load(std::memory_order_relaxed)) {
    const int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    if (rc == 0) return !g_stop.load(std::memory_order_relaxed);
    if (rc != EINTR) return !g_stop.load(std::memory_order_relaxed);
  }
  return false;
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Takes a report over `sample` (rates), or from one snapshot when it is zero.
BusReport sample_report(const Inspector& insp, std::chrono::nanoseconds sample) {
  if (sample.count() <= 0) return make_report(insp.snapshot(), tools::realtime_ns());
  const auto t0 = std::chrono::steady_clock::now();
  Snapshot before = insp.snapshot();
  if (!sleep_unless_stopped(sample)) return make_report(before, tools::realtime_ns());
  Snapshot after = insp.snapshot();
  const auto t1 = std::chrono::steady_clock::now();
  return make_report(before, after, seconds_between(t0, t1), tools::realtime_ns());
}

std::string hexdump(std::span<const std::byte> bytes) {
  std::string out;
  for (std::size_t off = 0; off < bytes.size(); off += 16) {
    const auto line = bytes.subspan(off, std::min<std::size_t>(16, bytes.size() - off));
    std::string ascii;
    for (std::byte b : line) {
      const auto c = static_cast<unsigned char>(b);
      ascii += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '.';
    }
    out += fmt::format("  {:08x}  {:<48}  |{}|\n", off, tools::hex_spaced(line), ascii);
  }
  return out;
}

// The message shape shmbus-consumer --format json writes (message_format.hpp).
json record_json(const RecordView& r) {
  fmt::memory_buffer b;
  shmbus::tools::append_message_json(b, r.seq, r.timestamp_ns, std::span<const std::byte>(r.payload),
                                     r.records);
  json j = json::parse(std::string_view(b.data(), b.size()));
  // The length field as stored, when it does not match the payload copied.
  if (r.length != r.payload.size()) j["length"] = r.length;
  return j;
}

// What is wrong with a record's framing, or empty. Inspector::record() hands
// back the length field as stored but never more payload than a record holds.
std::string record_problem(const RecordView& r, const BusInfo& info) {
  if (r.length > info.max_message) {
    return fmt::format("length {} exceeds the max message {}", r.length, info.max_message);
  }
  if (r.records == 0) {
    return fmt::format("length {} does not fit the records its header says it takes", r.length);
  }
  if (r.length != r.payload.size()) {
    return fmt::format("length {} but {} payload bytes", r.length, r.payload.size());
  }
  return {};
}

std::string record_header(const RecordView& r) {
  return fmt::format("seq {}  {}  len {}{}", r.seq,
                     r.timestamp_ns ? utc_time(r.timestamp_ns) : std::string("no timestamp"), r.length,
                     r.records > 1 ? fmt::format("  spans {} records", r.records) : std::string());
}

// A run of slots inside a span, found where a walk in sequence order
// landed on it (a --from inside a message, or past an unreadable record):
// [seq, end) are inside, and `start` is the message's own sequence when
// its first record is still readable.
struct InsideRun {
  std::uint64_t end = 0;
  std::optional<std::uint64_t> start;
  std::uint32_t records = 0;  // the message's, when start is known
};

InsideRun inside_run(const Inspector& insp, std::uint64_t seq, std::uint64_t oldest, std::uint64_t head) {
  InsideRun run;
  // Back to the first slot that is not inside: the message's own record, if
  // it is still there (a span takes at most half the ring).
  const std::uint64_t lowest = std::max(oldest, seq > insp.info().capacity / 2 ? seq - insp.info().capacity / 2 : 0);
  std::uint64_t k = seq;
  while (k > lowest) {
    const auto r = insp.record(k - 1);
    if (!r || !r->inside) {
      if (r && r->gap_to == 0 && r->records > seq - (k - 1)) {
        run.start = k - 1;
        run.records = r->records;
      }
      break;
    }
    --k;
  }
  if (run.start) {
    run.end = std::min(head, *run.start + run.records);
  } else {
    run.end = seq + 1;
    while (run.end < head) {
      const auto r = insp.record(run.end);
      if (!r || !r->inside) break;
      ++run.end;
    }
  }
  return run;
}

}  // namespace

void set_trust(Trust trust) { g_trust = std::move(trust); }
const Trust& inspect_trust() { return g_trust; }

int run_list(bool json_out) {
  const auto entries = list_buses(g_trust);
  const auto creations = list_creations();
  const auto now = tools::realtime_ns();
  if (json_out) {
    json buses = json::array();
    for (const ListEntry& e : entries) buses.push_back(to_json(e, now));
    json made = json::array();
    for (const CreationFile& f : creations) made.push_back(to_json(f));
    print_json(json{{"time_ns", now}, {"buses", std::move(buses)}, {"creations", std::move(made)}});
    return 0;
  }
  if (entries.empty() && creations.empty()) {
    std::fputs(fmt::format("shmbus-inspect: no shmbus segments in {}\n", bus_dir()).c_str(), stderr);
    return 0;
  }
  print_out(render_list(entries, creations, now));
  return 0;
}

// Walks the retained records from the oldest, a message at a time.
RingUse ring_use(const Inspector& insp, const Snapshot& snap) {
  RingUse u;
  for (std::uint64_t seq = snap.oldest; seq < snap.head;) {
    const auto rec = insp.record(seq);
    if (!rec) {
      ++u.unreadable;
      ++seq;
    } else if (rec->inside) {
      ++u.partial;  // the oldest end: its message's first record was overwritten
      ++seq;
    } else if (rec->gap_to != 0) {
      const std::uint64_t to = std::min(rec->gap_to, snap.head);
      (rec->padding ? u.padding : u.gaps) += to - seq;
      seq = to;
    } else if (rec->records == 0) {
      ++u.unreadable;  // corrupt framing (check explains)
      ++seq;
    } else {
      ++u.messages;
      u.message_records += rec->records;
      if (rec->records > 1) {
        ++u.spans;
        u.span_records += rec->records;
        u.largest_span = std::max(u.largest_span, rec->records);
      }
      seq += rec->records;
    }
  }
  return u;
}

int run_show(const std::string& bus, std::chrono::nanoseconds sample, bool json_out) {
  const Inspector insp = Inspector::open(bus, g_trust);
  BusReport r = sample_report(insp, sample);
  r.ring_use = ring_use(insp, r.snap);
  if (json_out) {
    print_json(to_json(r));
  } else {
    print_out(render_show(r));
  }
  return 0;
}

int run_dump(const DumpArgs& a) {
  const Inspector insp = Inspector::open(a.bus, g_trust);
  const Snapshot snap = insp.snapshot();
  std::uint64_t from = snap.oldest;
  if (a.from) {
    from = *a.from;
  } else if (a.last) {
    const std::uint64_t retained = snap.head > snap.oldest ? snap.head - snap.oldest : 0;
    from = snap.head - std::min(*a.last, retained);
  }
  if (from < snap.oldest) {
    throw bus_failure(a.bus,
                    fmt::format("sequence {} is no longer retained (oldest is {}, head {})", from,
                                snap.oldest, snap.head),
                    "not_retained");
  }
  if (from > snap.head) {
    throw bus_failure(a.bus,
                    fmt::format("sequence {} is in the future: not published yet (head is {})",
                                from, snap.head),
                    "not_retained");
  }
  // --last N already chose the range; otherwise --count N from `from` (0: to head).
  std::uint64_t end = snap.head;
  if (!a.last && a.count != 0) end = from + std::min(a.count, snap.head - from);

  std::uint64_t shown = 0;
  std::uint64_t corrupt = 0;
  std::vector<std::uint64_t> missing;
  json records = json::array();
  json gaps = json::array();
  json inside = json::array();
  for (std::uint64_t seq = from; seq < end; ++seq) {
    const auto rec = insp.record(seq);
    if (!rec) {
      // Overwritten while we read (overwrite bus), not committed, or its
      // commit tag names another sequence (check says which).
      missing.push_back(seq);
      if (a.format == DumpFormat::text || a.format == DumpFormat::hex) {
        print_out(fmt::format("seq {}  not readable: overwritten, uncommitted or corrupt\n", seq));
      }
      continue;
    }
    if (rec->gap_to != 0) {
      // A gap marker: no message; the stream continues at gap_to.
      const std::uint64_t to = std::min(rec->gap_to, end);  // > seq (read_gap checks)
      const std::string what = rec->gap_lost ? fmt::format("{} never published (a gap)", tools::plural(rec->gap_to - seq, "message"))
                               : rec->padding ? fmt::format("the rest of the lap ({}) padded before a message that spans records",
                                                            tools::plural(rec->gap_to - seq, "record"))
                                              : std::string("the bus starts there");
      if (a.format == DumpFormat::json) {
        gaps.push_back(json{{"seq", seq},
                            {"continues_at", rec->gap_to},
                            {"lost", rec->gap_lost ? rec->gap_to - seq : 0},
                            {"padding", rec->padding}});
      } else {
        print_out(fmt::format("seq {}  {}: continues at seq {}, {}\n", seq, rec->padding ? "padding" : "gap",
                              rec->gap_to, what));
      }
      seq = to - 1;
      continue;
    }
    if (rec->inside) {
      // No header of its own: the middle or end of a message that began
      // before `from`, or after a record that could not be read.
      const InsideRun run = inside_run(insp, seq, snap.oldest, snap.head);
      const std::string of = run.start ? fmt::format("the message at seq {} ({} records)", *run.start, run.records)
                                       : std::string("a message whose first record is gone");
      if (a.format == DumpFormat::json) {
        inside.push_back(json{{"seq", seq},
                              {"continues_at", run.end},
                              {"message_seq", run.start ? json(*run.start) : json(nullptr)}});
      } else {
        print_out(fmt::format("seq {}  inside {}: {} to its end, continues at seq {}\n", seq, of,
                              tools::plural(run.end - seq, "record"), run.end));
      }
      seq = std::min(run.end, end) - 1;
      continue;
    }
    ++shown;
    const std::string problem = record_problem(*rec, insp.info());
    corrupt += problem.empty() ? 0 : 1;
    switch (a.format) {
      case DumpFormat::json: {
        json j = record_json(*rec);
        j["corrupt"] = problem.empty() ? json(nullptr) : json(problem);
        records.push_back(std::move(j));
        break;
      }
      case DumpFormat::text:
        print_out(fmt::format("{}  \"{}\"{}\n", record_header(*rec),
                              tools::escape_ascii(std::span<const std::byte>(rec->payload)),
                              problem.empty() ? "" : "  CORRUPT: " + problem));
        break;
      case DumpFormat::hex:
        print_out(record_header(*rec) + (problem.empty() ? "" : "  CORRUPT: " + problem) + "\n" +
                  hexdump(rec->payload));
        break;
    }
    // A message that spans records takes `records` sequence numbers (the
    // end of --count/--last may cut it: it is shown whole).
    if (rec->records > 1) seq += rec->records - 1;
  }
  if (a.format == DumpFormat::json) {
    print_json(json{{"bus", a.bus},
                    {"head", snap.head},
                    {"oldest", snap.oldest},
                    {"from", from},
                    {"to", end},
                    {"missing", missing},
                    {"gaps", std::move(gaps)},
                    {"inside", std::move(inside)},
                    {"records", std::move(records)}});
  }
  std::fflush(stdout);
  if (!missing.empty() || corrupt) {
    std::fputs(fmt::format("shmbus-inspect: bus '{}': of {}, {} not readable and {} with "
                           "an impossible length (`shmbus-inspect check {}` explains)\n",
                           a.bus, tools::plural(end - from, "record"), missing.size(), corrupt, a.bus)
                   .c_str(),
               stderr);
  } else if (shown == 0) {
    std::fputs(fmt::format("shmbus-inspect: bus '{}': no records from {} (head is {})\n", a.bus,
                           from, snap.head)
                   .c_str(),
               stderr);
  }
  // A record that cannot be framed is a finding; one overwritten while we
  // read an `overwrite` bus is not.
  return corrupt ? 1 : 0;
}

int run_watch(const std::string& bus, std::chrono::nanoseconds interval,
              std::optional<std::uint64_t> count, bool json_out) {
  const Inspector insp = Inspector::open(bus, g_trust);
  install_stop_handlers();
  const bool tty = !json_out && isatty(STDOUT_FILENO) == 1;
  auto t0 = std::chrono::steady_clock::now();
  Snapshot before = insp.snapshot();
  for (std::uint64_t n = 0; !count || n < *count; ++n) {
    if (!sleep_unless_stopped(interval)) break;
    if (!Bus::exists(bus)) throw bus_failure(bus, "the bus was removed while watching", "not_found");
    Snapshot after = insp.snapshot();
    const auto t1 = std::chrono::steady_clock::now();
    const BusReport r = make_report(before, after, seconds_between(t0, t1), tools::realtime_ns());
    if (json_out) {
      print_json(to_json(r));
    } else if (tty) {
      // Home, clear, redraw: a refreshing view like top.
      print_out("\x1b[H\x1b[2J");
      print_out(render_show(r));
      print_out(fmt::format("\nevery {}; Ctrl-C to quit\n", human_duration(
                                                              std::chrono::duration<double>(interval).count())));
    } else {
      print_out(render_watch_line(r) + "\n");
    }
    std::fflush(stdout);
    before = std::move(after);
    t0 = t1;
  }
  return 0;
}

int run_check(const std::string& bus, bool json_out) {
  std::vector<Problem> problems;
  std::vector<Problem> undecided;  // parts a live producer kept rewriting: not judged, not problems
  std::string code;  // Errc name when the segment did not even open
  try {
    const Inspector insp = Inspector::open(bus, g_trust);
    problems = insp.check(undecided);
  } catch (const Error& e) {
    if (is_access_error(e.errc())) throw;
    code = errc_name(e.errc());
    problems.push_back({"segment", strip_bus_prefix(bus, e.what())});
  }
  if (json_out) {
    const auto listed = [](const std::vector<Problem>& ps) {
      json list = json::array();
      for (const Problem& p : ps) list.push_back({{"where", p.where}, {"what", p.what}});
      return list;
    };
    print_json(json{{"bus", bus},
                    {"clean", problems.empty()},
                    {"open_error", code.empty() ? json(nullptr) : json(code)},
                    {"problems", listed(problems)},
                    {"not_judged", listed(undecided)}});
  } else {
    if (problems.empty()) {
      print_out(fmt::format("bus '{}': clean (header, reader table and every retained record{})\n", bus,
                            undecided.empty() ? ""
                                              : fmt::format(" but {} its producer was writing meanwhile",
                                                            tools::plural(undecided.size(), "part"))));
    } else {
      print_out(fmt::format("bus '{}': {} problem{}{}\n", bus, problems.size(),
                            problems.size() == 1 ? "" : "s",
                            code.empty() ? "" : fmt::format(" ({})", code)));
      for (const Problem& p : problems) print_out(fmt::format("  {}: {}\n", p.where, p.what));
    }
    for (const Problem& p : undecided) print_out(fmt::format("  not judged: {}: {}\n", p.where, p.what));
  }
  std::fflush(stdout);
  if (problems.empty()) return 0;
  std::fputs(fmt::format("shmbus-inspect: bus '{}': check found {} problem{}\n", bus,
                         problems.size(), problems.size() == 1 ? "" : "s")
                 .c_str(),
             stderr);
  return 1;
}

int run_gc(const std::string& bus, const std::vector<std::string>& forget, bool json_out) {
  // What creators killed mid-way left in the bus directory (the bus itself may not
  // exist then).
  const std::vector<std::string> abandoned = remove_abandoned_creations(bus);
  if (!json_out) print_abandoned(bus, abandoned);
  if (!abandoned.empty() && !Bus::exists(bus) && forget.empty()) {
    if (json_out) print_json(json{{"bus", bus}, {"reclaimed", json::array()}, {"abandoned_creations", abandoned}});
    return 0;
  }
  // What the producer was waiting for, to say whether it can move on now.
  const Snapshot snap_before = Inspector::open(bus, g_trust).snapshot();
  const ProducerView before = snap_before.producer;
  if (!json_out) {
    // Never reclaimed on a guess: say which could not be judged.
    for (const ReaderView& r : snap_before.readers) {
      if (r.liveness == Liveness::unknown)
        print_out(fmt::format("bus '{}': reader {} '{}' ({}) left alone: its lock cannot be tested\n", bus, r.slot,
                              display_name(r.name), pid_label(r.pid, r.pid_namespace)));
    }
  }
  const std::vector<ReaderView> reclaimed = reclaim_dead_readers(bus, g_trust);
  std::vector<std::string> forgotten;
  for (const std::string& name : forget) {
    if (!forget_reader_name(bus, name, g_trust))
      throw bus_failure(bus, fmt::format("no remembered reader named '{}'", name), "not_found");
    forgotten.push_back(name);
    if (!json_out) print_out(fmt::format("bus '{}': forgot reader name '{}'\n", bus, name));
  }
  bool held_back = false;  // the producer was waiting for a reader gc just freed
  for (const ReaderView& r : reclaimed) {
    held_back |= before.attached && before.waiting_for_space && before.blocked_on_slot == r.slot;
  }
  // Only a live producer can continue; a stopped one does once resumed.
  const ProducerView producer_now = Inspector::open(bus, g_trust).snapshot().producer;
  const Liveness producer_liveness = producer_now.liveness;
  const bool producer_alive = is_alive(producer_liveness);
  const bool producer_stopped = producer_now.stopped;
  const bool unblocked = held_back && producer_alive;
  if (json_out) {
    json list = json::array();
    for (const ReaderView& r : reclaimed) list.push_back(to_json(r));
    print_json(json{{"bus", bus},
                    {"reclaimed", std::move(list)},
                    {"forgotten", forgotten},
                    {"abandoned_creations", abandoned},
                    {"producer_unblocked", unblocked}});
    return 0;
  }
  if (reclaimed.empty() && (!forgotten.empty() || !abandoned.empty())) return 0;
  if (reclaimed.empty()) {
    print_out(fmt::format("bus '{}': no dead readers\n", bus));
    return 0;
  }
  for (const ReaderView& r : reclaimed) {
    print_out(fmt::format("bus '{}': reclaimed reader {} '{}' ({}, {}, cursor {}, delivered {})\n",
                          bus, r.slot, display_name(r.name), pid_label(r.pid, r.pid_namespace),
                          to_string(r.liveness), r.cursor, r.delivered));
  }
  if (unblocked && !producer_stopped) {
    print_out(fmt::format("bus '{}': producer {} was held back by it and can continue\n", bus,
                          pid_label(before.pid, before.pid_namespace)));
  } else if (unblocked) {
    print_out(fmt::format("bus '{}': producer {} was held back by it; it is stopped and "
                          "continues once resumed (SIGCONT)\n",
                          bus, pid_label(before.pid, before.pid_namespace)));
  } else if (held_back) {
    print_out(fmt::format("bus '{}': producer {} that it held back is {}; a new producer can "
                          "take the bus over\n",
                          bus, pid_label(before.pid, before.pid_namespace), to_string(producer_liveness)));
  }
  return 0;
}

int run_rm(const std::string& bus, bool force, bool json_out) {
  std::optional<Snapshot> snap;
  std::string invalid;
  try {
    snap = Inspector::open(bus, g_trust).snapshot();
  } catch (const Error& e) {
    if (e.errc() == Errc::not_found) {
      // No bus, but perhaps what creations of it killed mid-way left.
      const std::vector<std::string> abandoned = remove_abandoned_creations(bus);
      if (abandoned.empty()) throw;
      if (json_out) {
        print_json(json{{"bus", bus},
                        {"removed", false},
                        {"segment", segment_path(bus)},
                        {"in_use_by", json::array()},
                        {"invalid", nullptr},
                        {"abandoned_creations", abandoned}});
      } else {
        print_abandoned(bus, abandoned);
      }
      return 0;
    }
    // --force removes a foreign segment, or a FIFO, device, symlink or
    // hard link planted at the path, unseen (if we may: its owner or root).
    if (is_access_error(e.errc()) && !(force && (e.errc() == Errc::foreign_owner || e.errc() == Errc::unsafe_file)))
      throw;
    invalid = strip_bus_prefix(bus, e.what());
  }

  std::vector<std::string> users;
  if (snap) {
    const ProducerView& p = snap->producer;
    if (is_alive(p.liveness)) users.push_back("producer " + pid_label(p.pid, p.pid_namespace));
    for (const ReaderView& r : snap->readers) {
      if (is_alive(r.liveness)) {
        users.push_back(fmt::format("reader {} '{}' {}", r.slot, display_name(r.name),
                                    pid_label(r.pid, r.pid_namespace)));
      }
    }
  }
  // The role locks say who uses the file even when its header does not
  // validate (or names fewer roles than are held).
  const std::optional<bool> locked = segment_in_use(bus);
  if (users.empty() && locked.value_or(false)) users.push_back("a live process (its role locks are held)");
  if (!locked && snap == std::nullopt && !force) {
    throw bus_failure(bus, "not removed: cannot tell whether a live process uses it (use --force)", "in_use");
  }
  std::string who;
  for (const std::string& u : users) who += (who.empty() ? "" : ", ") + u;
  if (!users.empty() && !force) {
    throw bus_failure(bus, fmt::format("not removed: in use by {} (use --force)", who), "in_use");
  }
  // Users still attached are told once the name is gone (and only if it
  // could be removed): their streams end and the producer stops, instead of
  // running on in an unlinked segment.
  bool removed = false;
  if (!users.empty() && snap) {
    removed = remove_in_use(bus, g_trust);
  } else {
    removed = Bus::remove(bus);
  }
  if (!removed) throw bus_failure(bus, "no such bus", "not_found");
  const std::vector<std::string> abandoned = remove_abandoned_creations(bus);

  if (json_out) {
    json j{{"bus", bus},
           {"removed", true},
           {"segment", segment_path(bus)},
           {"in_use_by", users},
           {"invalid", invalid.empty() ? json(nullptr) : json(invalid)},
           {"abandoned_creations", abandoned}};
    print_json(j);
    return 0;
  }
  std::string msg = fmt::format("bus '{}': removed {}", bus, segment_path(bus));
  if (!users.empty()) {
    msg += fmt::format("; {} told: their streams ended (reason removed)", who);
  }
  if (!invalid.empty()) msg += fmt::format(" (it did not validate: {})", invalid);
  print_out(msg + "\n");
  print_abandoned(bus, abandoned);
  return 0;
}

}  // namespace shmbus::inspect_tool
