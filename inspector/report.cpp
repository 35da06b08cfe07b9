#include "inspector/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "inspector/text.hpp"
#include "tools/common/message_format.hpp"
#include "tools/common/program.hpp"

namespace shmbus::inspect_tool {

namespace {

using json = nlohmann::ordered_json;

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

double percent_of(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

bool same_reader(const ReaderView& a, const ReaderView& b) {
  return a.slot == b.slot && a.pid == b.pid && a.start_ticks == b.start_ticks &&
         a.attach_time_ns == b.attach_time_ns;
}

// Rows of cells; columns sized to fit. Cells in `right` columns are right
// aligned (numbers). The last cell of a row is never padded, so a short row
// can carry a long message.
std::string render_table(const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right, std::string_view indent) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c + 1 < row.size(); ++c) {
      if (width.size() <= c) width.resize(c + 1, 0);
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (std::size_t c = 0; c < row.size(); ++c) {
      const bool last = c + 1 == row.size();
      if (c) line += "  ";
      if (last) {
        // Right-aligned columns still line up when they end a row.
        if (c < right.size() && right[c] && c < width.size()) {
          line += fmt::format("{:>{}}", row[c], width[c]);
        } else {
          line += row[c];
        }
      } else if (c < right.size() && right[c]) {
        line += fmt::format("{:>{}}", row[c], width[c]);
      } else {
        line += fmt::format("{:<{}}", row[c], width[c]);
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string producer_text(const BusReport& r) {
  const ProducerView& p = r.snap.producer;
  std::string s;
  if (p.attached) {
    s = fmt::format("{} {}", pid_label(p.pid, p.pid_namespace), r.producer_stopped ? "stopped" : to_string(p.liveness));
    // A dead producer's last wait says nothing any more.
    if (p.waiting_for_space && r.producer_alive) {
      s += ", waiting for space";
      if (r.waiting_ns != 0) s += " for " + human_duration(static_cast<double>(r.waiting_ns) / 1e9);
      if (r.blocked_on_slot) {
        s += fmt::format(" (held back by reader {}", *r.blocked_on_slot);
        for (const ReaderReport& rr : r.readers) {
          if (rr.view.slot == *r.blocked_on_slot && !rr.view.name.empty())
            s += fmt::format(" '{}'", display_name(rr.view.name));
        }
        s += ")";
      }
    }
  } else if (p.pid != 0) {
    s = fmt::format("none (last: {})", pid_label(p.pid, p.pid_namespace));
  } else {
    s = "none";
  }
  if (p.closed) s += ", end-of-stream marked";
  if (p.attached && p.max_hold_ns != 0)
    s += fmt::format(", hold limit {}", human_duration(static_cast<double>(p.max_hold_ns) / 1e9));
  if (p.takeovers) s += fmt::format(", {} takeover{}", p.takeovers, p.takeovers == 1 ? "" : "s");
  return s;
}

}  // namespace

bool is_alive(Liveness l) noexcept { return l == Liveness::alive; }

std::string reader_state(const ReaderReport& r) {
  std::string s = r.stopped ? std::string("stopped")
                            : std::string(to_string(r.view.liveness)) + (r.view.sleeping && r.alive ? ",asleep" : "");
  if (r.view.evicted) return s + ",evicted";
  if (r.view.let_go_ns != 0) return s + ",let-go@" + utc_hms(r.view.let_go_ns);
  return s + (r.view.best_effort ? ",best-effort" : "");
}

std::string strip_bus_prefix(const std::string& bus, const std::string& message) {
  const std::string lead = fmt::format("bus '{}': ", bus);
  return message.starts_with(lead) ? message.substr(lead.size()) : message;
}

std::string dump_json(const nlohmann::ordered_json& j, bool pretty) {
  return j.dump(pretty ? 2 : -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

BusReport make_report(const Snapshot& snap, std::uint64_t now_ns) {
  BusReport r;
  r.snap = snap;
  r.now_ns = now_ns;
  const std::uint64_t cap = snap.info.capacity;
  r.retained = snap.head >= snap.oldest ? snap.head - snap.oldest : 0;
  r.publish_age_s = age_seconds(snap.last_publish_ns, now_ns);
  Diagnosis d = diagnose(snap);
  r.producer_alive = d.producer_alive;
  r.producer_stopped = snap.producer.stopped;
  r.blocked_on_slot = d.blocked_on_slot;
  r.warnings = std::move(d.warnings);

  std::vector<ReaderView> readers = snap.readers;
  std::sort(readers.begin(), readers.end(),
            [](const ReaderView& a, const ReaderView& b) { return a.slot < b.slot; });
  for (const ReaderView& v : readers) {
    ReaderReport rr;
    rr.view = v;
    rr.alive = is_alive(v.liveness);
    rr.stopped = v.stopped;
    rr.lag = snap.head > v.cursor ? snap.head - v.cursor : 0;
    rr.lag_percent = percent_of(rr.lag, cap);
    rr.idle_s = age_seconds(v.last_active_ns, now_ns);
    if (snap.info.policy == Policy::overwrite || (!v.best_effort && !v.evicted)) {
      r.unread = std::max(r.unread, std::min(rr.lag, cap));
      ++r.fill_readers;
    }
    r.readers.push_back(std::move(rr));
  }
  r.fill_percent = percent_of(r.unread, cap);
  const ProducerView& p = snap.producer;
  if (p.waiting_for_space && r.producer_alive && p.waiting_since_ns != 0 && now_ns > p.waiting_since_ns)
    r.waiting_ns = now_ns - p.waiting_since_ns;
  return r;
}

BusReport make_report(const Snapshot& before, const Snapshot& after, double seconds,
                      std::uint64_t now_ns) {
  BusReport r = make_report(after, now_ns);
  if (seconds <= 0) return r;
  r.sample_s = seconds;
  const std::uint64_t published =
      after.head >= before.head ? after.head - before.head : 0;  // a new bus restarts at 0
  r.publish_rate = static_cast<double>(published) / seconds;
  for (ReaderReport& rr : r.readers) {
    for (const ReaderView& old : before.readers) {
      if (!same_reader(old, rr.view) || rr.view.delivered < old.delivered) continue;
      rr.rate = static_cast<double>(rr.view.delivered - old.delivered) / seconds;
    }
  }
  return r;
}

nlohmann::ordered_json to_json(const ReaderView& v) {
  return json{
      {"slot", v.slot},
      {"name", v.name},
      {"pid", v.pid},
      {"start_ticks", v.start_ticks},
      {"liveness", to_string(v.liveness)},
      {"alive", is_alive(v.liveness)},
      {"stopped", v.stopped},
      {"pid_namespace", v.pid_namespace == 0 ? json(nullptr) : json(v.pid_namespace)},
      {"other_pid_namespace", in_other_pid_namespace(v.pid_namespace)},
      {"cursor", v.cursor},
      {"delivered", v.delivered},
      {"lost", v.lost},
      {"attach_time_ns", v.attach_time_ns},
      {"last_active_ns", v.last_active_ns},
      {"sleeping", v.sleeping},
      {"best_effort", v.best_effort},
      {"let_go_ns", v.let_go_ns == 0 ? json(nullptr) : json(v.let_go_ns)},
      {"evicted", v.evicted},
  };
}

// Remembered durable reader names: where each would resume, and how far behind.
json bookmarks_json(const Snapshot& s) {
  json out = json::array();
  for (const BookmarkView& b : s.bookmarks) {
    out.push_back({{"name", b.name},
                   {"cursor", b.cursor},
                   {"lag", s.head > b.cursor ? s.head - b.cursor : 0},
                   {"gone", b.cursor < s.oldest ? s.oldest - b.cursor : 0},
                   {"held", b.held},
                   {"holder_pid", b.held ? json(b.holder_pid) : json(nullptr)},
                   {"updated_ns", b.updated_ns}});
  }
  return out;
}

nlohmann::ordered_json to_json(const BusReport& r) {
  const Snapshot& s = r.snap;
  const ProducerView& p = s.producer;
  json readers = json::array();
  for (const ReaderReport& rr : r.readers) {
    json j = to_json(rr.view);
    j["lag"] = rr.lag;
    j["lag_percent"] = rr.lag_percent;
    j["rate"] = opt(rr.rate);
    j["last_active_age_s"] = opt(rr.idle_s);
    readers.push_back(std::move(j));
  }
  json warnings = json::array();
  for (const Warning& w : r.warnings) {
    warnings.push_back({{"kind", w.kind},
                        {"slot", w.slot ? json(*w.slot) : json(nullptr)},
                        {"message", w.message}});
  }
  return json{
      {"bus", s.info.name},
      {"segment", s.info.path},
      {"dir", s.info.dir},
      {"pages", s.info.pages},
      {"page_size", s.info.page_size},
      {"time_ns", r.now_ns},
      {"layout_version", s.info.layout_version},
      {"policy", to_string(s.info.policy)},
      {"capacity", s.info.capacity},
      {"record_size", s.info.record_size},
      {"max_payload", s.info.max_payload},
      {"max_message", s.info.max_message},
      {"max_readers", s.info.max_readers},
      {"segment_size", s.info.segment_size},
      {"creation_time_ns", s.info.creation_time_ns},
      {"head", s.head},
      {"oldest", s.oldest},
      {"retained", r.retained},
      {"ring_use", r.ring_use ? json{{"messages", r.ring_use->messages},
                                     {"message_records", r.ring_use->message_records},
                                     {"spans", r.ring_use->spans},
                                     {"span_records", r.ring_use->span_records},
                                     {"largest_span", r.ring_use->largest_span},
                                     {"padding", r.ring_use->padding},
                                     {"gaps", r.ring_use->gaps},
                                     {"partial", r.ring_use->partial},
                                     {"unreadable", r.ring_use->unreadable}}
                              : json(nullptr)},
      {"unread", r.unread},
      {"fill_percent", r.fill_percent},
      {"fill_readers", r.fill_readers},
      {"last_publish_ns", s.last_publish_ns == 0 ? json(nullptr) : json(s.last_publish_ns)},
      {"last_publish_age_s", opt(r.publish_age_s)},
      {"sample_s", opt(r.sample_s)},
      {"publish_rate", opt(r.publish_rate)},
      {"producer",
       {{"attached", p.attached},
        {"pid", p.pid},
        {"pid_namespace", p.pid_namespace == 0 ? json(nullptr) : json(p.pid_namespace)},
        {"other_pid_namespace", in_other_pid_namespace(p.pid_namespace)},
        {"start_ticks", p.start_ticks},
        {"liveness", to_string(p.liveness)},
        {"alive", r.producer_alive},
        {"stopped", r.producer_stopped},
        {"closed", p.closed},
        {"waiting_for_space", p.waiting_for_space && r.producer_alive},
        {"waiting_since_ns", r.waiting_ns != 0 ? json(p.waiting_since_ns) : json(nullptr)},
        {"waiting_ns", r.waiting_ns},
        {"blocked_on_slot", r.blocked_on_slot ? json(*r.blocked_on_slot) : json(nullptr)},
        {"takeovers", p.takeovers},
        {"max_hold_ns", p.attached && p.max_hold_ns != 0 ? json(p.max_hold_ns) : json(nullptr)}}},
      {"counters",
       {{"published", s.counters.published},
        {"producer_waits", s.counters.producer_waits},
        {"producer_wait_ns", s.counters.producer_wait_ns},
        {"wakeups", s.counters.wakeups},
        {"readers_reclaimed", s.counters.readers_reclaimed},
        {"readers_let_go", s.counters.readers_let_go},
        {"data_sleepers", s.counters.data_sleepers}}},
      {"readers", std::move(readers)},
      {"bookmarks", bookmarks_json(s)},
      {"removed", s.removed},
      {"warnings", std::move(warnings)},
  };
}

nlohmann::ordered_json to_json(const ListEntry& e, std::uint64_t now_ns) {
  json j{{"name", e.name},
         {"segment", segment_path(e.name)},
         {"file_size", e.file_size},
         {"valid", e.snapshot.has_value()},
         {"error", e.snapshot ? json(nullptr) : json(e.error)}};
  if (!e.snapshot) return j;
  const BusReport r = make_report(*e.snapshot, now_ns);
  std::uint32_t live = 0;
  for (const ReaderReport& rr : r.readers) live += rr.alive ? 1 : 0;
  const ProducerView& p = r.snap.producer;
  j.update(json{
      {"policy", to_string(r.snap.info.policy)},
      {"capacity", r.snap.info.capacity},
      {"record_size", r.snap.info.record_size},
      {"segment_size", r.snap.info.segment_size},
      {"head", r.snap.head},
      {"oldest", r.snap.oldest},
      {"readers_live", live},
      {"readers_dead", r.readers.size() - live},
      {"producer",
       {{"attached", p.attached},
        {"pid", p.pid},
        {"liveness", to_string(p.liveness)},
        {"alive", r.producer_alive},
        {"closed", p.closed}}},
      {"last_publish_ns",
       r.snap.last_publish_ns == 0 ? json(nullptr) : json(r.snap.last_publish_ns)},
      {"last_publish_age_s", opt(r.publish_age_s)},
      {"warnings", r.warnings.size()},
  });
  return j;
}

nlohmann::ordered_json to_json(const CreationFile& f) {
  return json{{"name", f.name},
              {"path", f.path},
              {"file_size", f.file_size},
              {"creator", to_string(f.creator)},
              {"abandoned", f.creator == Liveness::dead}};
}

std::string render_show(const BusReport& r) {
  const Snapshot& s = r.snap;
  const BusInfo& i = s.info;
  std::string out = fmt::format("bus '{}'  {}  {}  layout v{}\n", i.name, i.path,
                                human_bytes(i.segment_size), i.layout_version);
  const auto row = [&out](std::string_view key, const std::string& value) {
    out += fmt::format("  {:<10} {}\n", key, value);
  };
  row("policy", to_string(i.policy));
  row("pages", i.pages);
  row("ring", fmt::format("{} records x {} B (max payload {} B, max message {} B), {} ({} in use)",
                          i.capacity, i.record_size, i.max_payload, i.max_message,
                          tools::plural(i.max_readers, "reader slot"), s.readers.size()));
  row("created", fmt::format("{} ({})", utc_time(i.creation_time_ns),
                             human_age(age_seconds(i.creation_time_ns, r.now_ns))));
  row("head", fmt::format("{}", s.head));
  row("oldest", fmt::format("{} ({} retained)", s.oldest, r.retained));
  if (r.ring_use) {
    const RingUse& u = *r.ring_use;
    std::string held = fmt::format("{} in {}", tools::plural(u.messages, "message"),
                                   tools::plural(u.message_records, "record"));
    if (u.spans > 0) {
      held += fmt::format("; {} of them span records ({} records, {:.1f}% of the retained; the largest {})",
                          u.spans, u.span_records,
                          r.retained ? 100.0 * static_cast<double>(u.span_records) / static_cast<double>(r.retained) : 0.0,
                          u.largest_span);
    } else {
      held += "; none spans records";
    }
    if (u.padding > 0) held += fmt::format("; {} of padding", tools::plural(u.padding, "record"));
    if (u.gaps > 0) held += fmt::format("; {} skipped by gaps", tools::plural(u.gaps, "sequence"));
    if (u.partial > 0) held += fmt::format("; {} of a message partly overwritten", tools::plural(u.partial, "record"));
    if (u.unreadable > 0) held += fmt::format("; {} not readable", tools::plural(u.unreadable, "record"));
    row("messages", held);
  }
  const bool block = i.policy == Policy::block;
  row("fill", s.readers.empty() ? std::string("no readers attached")
              : r.fill_readers == 0
                  ? fmt::format("no reader holds the producer ({} best-effort, let go or evicted)", s.readers.size())
                  : fmt::format("{} of {} unread by the slowest reader{} ({:.1f}%){}", r.unread, i.capacity,
                                block ? " that holds the producer" : "", r.fill_percent,
                                block && r.fill_readers < s.readers.size()
                                    ? fmt::format("; {} more that hold nothing back",
                                                  s.readers.size() - r.fill_readers)
                                    : std::string()));
  std::string publish =
      r.sample_s ? fmt::format("{} over {}", human_rate(r.publish_rate), human_duration(*r.sample_s))
                 : std::string("rate not sampled");
  // Records carry a publish time only when the producer stamps them.
  publish += s.head == 0 || r.publish_age_s ? fmt::format(", last {}", human_age(r.publish_age_s))
                                            : std::string(", last: records not timestamped");
  row("publish", publish);
  row("producer", producer_text(r));
  const Counters& c = s.counters;
  // producer_wait_ns adds a wait's time when it ends: the one under way is told apart.
  row("counters",
      fmt::format("published {}, producer waits {} ({}{}), wake-ups {}, readers reclaimed {}, "
                  "readers let go {}, consumers asleep {}",
                  c.published, c.producer_waits,
                  human_duration(static_cast<double>(c.producer_wait_ns) / 1e9),
                  r.waiting_ns != 0
                      ? fmt::format(" ended, {} so far in the one under way",
                                    human_duration(static_cast<double>(r.waiting_ns) / 1e9))
                      : std::string(),
                  c.wakeups, c.readers_reclaimed, c.readers_let_go, c.data_sleepers));

  out += '\n';
  if (r.readers.empty()) {
    out += "  no readers\n";
  } else {
    bool any_elsewhere = false;
    std::vector<std::vector<std::string>> rows{{"SLOT", "NAME", "PID", "STATE", "CURSOR", "LAG",
                                                "LAG%", "DELIVERED", "LOST", "RATE",
                                                "LAST-READ"}};
    for (const ReaderReport& rr : r.readers) {
      const ReaderView& v = rr.view;
      const bool elsewhere = in_other_pid_namespace(v.pid_namespace);
      any_elsewhere |= elsewhere;
      rows.push_back({fmt::format("{}", v.slot), display_name(v.name), fmt::format("{}{}", v.pid, elsewhere ? "*" : ""),
                      reader_state(rr),
                      fmt::format("{}", v.cursor), fmt::format("{}", rr.lag),
                      // More than a ring behind: lapped (best-effort, let go, overwrite).
                      rr.lag > s.info.capacity ? std::string("lapped") : fmt::format("{:.1f}%", rr.lag_percent), fmt::format("{}", v.delivered),
                      fmt::format("{}", v.lost), human_rate(rr.rate), human_age(rr.idle_s)});
    }
    out += render_table(rows, {true, false, true, false, true, true, true, true, true, true, false},
                        "  ");
    if (any_elsewhere)
      out += fmt::format("  * pid in another PID namespace (a container): `fuser -v {}` lists host pids\n",
                         segment_path(s.info.name));
  }
  if (!s.bookmarks.empty()) {
    out += '\n';
    std::vector<std::vector<std::string>> rows{{"REMEMBERED", "CURSOR", "LAG", "HELD-BY", "UPDATED"}};
    for (const BookmarkView& b : s.bookmarks) {
      std::string lag = fmt::format("{}", s.head > b.cursor ? s.head - b.cursor : 0);
      if (b.cursor < s.oldest) lag += fmt::format(" ({} gone)", s.oldest - b.cursor);
      rows.push_back({display_name(b.name), fmt::format("{}", b.cursor), lag,
                      b.held ? pid_label(b.holder_pid, b.holder_pid_namespace) : std::string("-"),
                      human_age(age_seconds(b.updated_ns, r.now_ns))});
    }
    out += render_table(rows, {false, true, true, false, false}, "  ");
  }
  if (s.removed) out += "\nremoved by force: every stream has ended; the segment lives until its last user unmaps it\n";
  if (!r.warnings.empty()) out += '\n';
  for (const Warning& w : r.warnings) out += fmt::format("warning: {}\n", w.message);
  return out;
}

std::string render_watch_line(const BusReport& r) {
  const Snapshot& s = r.snap;
  std::string line = fmt::format("{} {} head {} publish {} fill {:.1f}% producer ", utc_hms(r.now_ns),
                                 s.info.name, s.head, human_rate(r.publish_rate), r.fill_percent);
  const ProducerView& p = s.producer;
  if (p.attached) {
    line += fmt::format("{}{} {}{}", p.pid, in_other_pid_namespace(p.pid_namespace) ? "*" : "",
                        r.producer_stopped ? "stopped" : to_string(p.liveness),
                        p.waiting_for_space && r.producer_alive
                            ? fmt::format(" blocked{}{}",
                                          r.waiting_ns != 0
                                              ? " " + human_duration(static_cast<double>(r.waiting_ns) / 1e9)
                                              : std::string(),
                                          r.blocked_on_slot ? fmt::format(" on {}", *r.blocked_on_slot) : "")
                            : std::string());
  } else {
    line += "none";
  }
  for (const ReaderReport& rr : r.readers) {
    line += fmt::format(" | {} {} {}{} lag {} {}", rr.view.slot, display_name(rr.view.name),
                        rr.stopped ? "stopped" : to_string(rr.view.liveness),
                        rr.view.evicted          ? std::string(",evicted")
                        : rr.view.let_go_ns != 0 ? fmt::format(",let-go@{}", utc_hms(rr.view.let_go_ns))
                        : rr.view.best_effort && s.info.policy == Policy::block ? std::string(",best-effort")
                                                                                : std::string(),
                        rr.lag,
                        human_rate(rr.rate));
  }
  return line;
}

std::string render_list(const std::vector<ListEntry>& entries, const std::vector<CreationFile>& creations,
                        std::uint64_t now_ns) {
  std::vector<std::vector<std::string>> rows{{"NAME", "SIZE", "POLICY", "RING", "HEAD", "READERS",
                                              "PRODUCER", "LAST-PUBLISH"}};
  for (const ListEntry& e : entries) {
    if (!e.snapshot) {
      rows.push_back({tools::escape_ascii(e.name), human_bytes(e.file_size),
                      "invalid: " + strip_bus_prefix(e.name, e.error)});
      continue;
    }
    const BusReport r = make_report(*e.snapshot, now_ns);
    std::size_t live = 0;
    for (const ReaderReport& rr : r.readers) live += rr.alive ? 1 : 0;
    const ProducerView& p = r.snap.producer;
    std::string producer = "none";
    if (p.attached) producer = fmt::format("{} {}", p.pid, to_string(p.liveness));
    if (p.closed) producer += " (closed)";
    rows.push_back({e.name, human_bytes(e.file_size), to_string(r.snap.info.policy),
                    fmt::format("{} x {} B", r.snap.info.capacity, r.snap.info.record_size),
                    fmt::format("{}", r.snap.head),
                    fmt::format("{} live, {} dead", live, r.readers.size() - live), producer,
                    r.snap.head == 0 || r.publish_age_s ? human_age(r.publish_age_s) : std::string("-")});
  }
  // Under their own file names (hidden by the leading '.'): no bus goes by them.
  for (const CreationFile& f : creations) {
    const std::string file = f.path.substr(f.path.rfind('/') + 1);
    std::string what;
    switch (f.creator) {
      case Liveness::dead:
        what = fmt::format("left by a creation of '{}' killed mid-way (`shmbus-inspect gc {}` removes it)", f.name,
                           f.name);
        break;
      case Liveness::alive: what = fmt::format("bus '{}' being created", f.name); break;
      case Liveness::unknown:
        what = fmt::format("a creation of '{}', alive or not: its lock cannot be tested", f.name);
        break;
    }
    rows.push_back({tools::escape_ascii(file), human_bytes(f.file_size), std::move(what)});
  }
  return render_table(rows, {false, true, false, true, true, false, false, false}, "");
}

}  // namespace shmbus::inspect_tool
