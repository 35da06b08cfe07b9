// shmbus.Inspector: a bus's header, counters and reader table read without
// attaching, as the dict shmbus-inspect show --json reports.
#include "module.hpp"

namespace shmbus_py {
namespace {

py::dict reader_dict(const shmbus::ReaderView& r, std::uint64_t head) {
  py::dict d;
  d["slot"] = r.slot;
  d["pid"] = r.pid;
  d["liveness"] = shmbus::to_string(r.liveness);
  d["name"] = py::bytes(r.name).attr("decode")("utf-8", "replace");
  d["cursor"] = r.cursor;
  d["lag"] = head > r.cursor ? head - r.cursor : 0;
  d["delivered"] = r.delivered;
  d["lost"] = r.lost;
  d["attach_time_ns"] = r.attach_time_ns;
  d["last_active_ns"] = r.last_active_ns;
  d["sleeping"] = r.sleeping;
  d["best_effort"] = r.best_effort;
  d["let_go_ns"] = r.let_go_ns;
  d["evicted"] = r.evicted;
  d["stopped"] = r.stopped;
  return d;
}

// The snapshot as shmbus-inspect show --json reports it: the library's
// diagnose() decides what the producer waits for and what to warn of.
py::dict snapshot_dict(const shmbus::Snapshot& s) {
  const shmbus::Diagnosis diagnosis = shmbus::diagnose(s);
  py::dict d;
  d["name"] = s.info.name;
  d["policy"] = shmbus::to_string(s.info.policy);
  d["capacity"] = s.info.capacity;
  d["record_size"] = s.info.record_size;
  d["max_payload"] = s.info.max_payload;
  d["max_message"] = s.info.max_message;
  d["max_readers"] = s.info.max_readers;
  d["segment_size"] = s.info.segment_size;
  d["creation_time_ns"] = s.info.creation_time_ns;
  d["layout_version"] = s.info.layout_version;
  d["dir"] = s.info.dir;
  d["pages"] = s.info.pages;
  d["page_size"] = s.info.page_size;
  d["head"] = s.head;
  d["oldest"] = s.oldest;
  d["last_publish_ns"] = s.last_publish_ns;
  py::dict c;
  c["published"] = s.counters.published;
  c["producer_waits"] = s.counters.producer_waits;
  c["producer_wait_ns"] = s.counters.producer_wait_ns;
  c["wakeups"] = s.counters.wakeups;
  c["readers_reclaimed"] = s.counters.readers_reclaimed;
  c["readers_let_go"] = s.counters.readers_let_go;
  c["data_sleepers"] = s.counters.data_sleepers;
  d["counters"] = c;
  py::dict p;
  p["attached"] = s.producer.attached;
  p["pid"] = s.producer.pid;
  p["liveness"] = shmbus::to_string(s.producer.liveness);
  p["closed"] = s.producer.closed;
  p["stopped"] = s.producer.stopped;
  // A dead producer's last wait says nothing any more.
  p["waiting_for_space"] = s.producer.waiting_for_space && diagnosis.producer_alive;
  p["blocked_on_slot"] = diagnosis.blocked_on_slot ? py::cast(*diagnosis.blocked_on_slot) : py::none();
  p["takeovers"] = s.producer.takeovers;
  d["producer"] = p;
  py::list readers;
  for (const auto& r : s.readers) readers.append(reader_dict(r, s.head));
  d["readers"] = readers;
  py::list bookmarks;
  for (const auto& b : s.bookmarks) {
    py::dict bd;
    bd["name"] = py::bytes(b.name).attr("decode")("utf-8", "replace");
    bd["cursor"] = b.cursor;
    bd["lag"] = s.head > b.cursor ? s.head - b.cursor : 0;
    bd["gone"] = b.cursor < s.oldest ? s.oldest - b.cursor : 0;
    bd["updated_ns"] = b.updated_ns;
    bd["held"] = b.held;
    bd["holder_pid"] = b.held ? b.holder_pid : 0;
    bookmarks.append(bd);
  }
  d["bookmarks"] = bookmarks;
  d["removed"] = s.removed;
  py::list warnings;
  for (const shmbus::Warning& w : diagnosis.warnings) {
    py::dict wd;
    wd["kind"] = w.kind;
    wd["slot"] = w.slot ? py::cast(*w.slot) : py::none();
    wd["message"] = w.message;
    warnings.append(wd);
  }
  d["warnings"] = warnings;
  return d;
}

}  // namespace

void register_inspector(py::module_& m) {
  py::class_<shmbus::Inspector>(m, "Inspector", "Reads a bus's header, counters and reader table without attaching.")
      .def(py::init([](const std::string& name, const std::optional<std::string>& dir) {
             return shmbus::Inspector::open(name, {}, dir.value_or(""));
           }),
           py::arg("name"), py::kw_only(), py::arg("dir") = py::none())
      .def(
          "snapshot", [](const shmbus::Inspector& i) { return snapshot_dict(i.snapshot()); },
          "The bus as a dict: geometry, head, oldest, counters, producer, readers, bookmarks, warnings (typed in "
          "the stubs; the judgement shmbus-inspect show --json makes).");
}

}  // namespace shmbus_py
