// shmbus — the C API's inspection and administration (shmbus.h): a
// snapshot of a bus, and moving, forgetting and letting go reader names and
// slots, over the C++ Inspector and admin calls.
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "c_api_support.hpp"
#include "shmbus/inspect.hpp"

using namespace shmbus::c_api;

extern "C" {

static shmbus_status inspect_bus(const char* fn, const char* dir, const char* name, shmbus_snapshot** out) noexcept {
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  if (!name) return invalid(fn, "name is NULL");
  return guard(fn, [&] {
    const shmbus::Snapshot s = shmbus::Inspector::open(name, {}, dir ? dir : "").snapshot();
    // Freed whole (its arrays and strings too) if anything below throws.
    std::unique_ptr<shmbus_snapshot, void (*)(shmbus_snapshot*)> snap(new shmbus_snapshot, &shmbus_snapshot_free);
    std::memset(snap.get(), 0, sizeof *snap);
    fill_info(s.info, snap->info);
    snap->head = s.head;
    snap->oldest = s.oldest;
    snap->last_publish_ns = s.last_publish_ns;
    snap->published = s.counters.published;
    snap->producer_waits = s.counters.producer_waits;
    snap->producer_wait_ns = s.counters.producer_wait_ns;
    snap->wakeups = s.counters.wakeups;
    snap->readers_reclaimed = s.counters.readers_reclaimed;
    snap->readers_let_go = s.counters.readers_let_go;
    snap->data_sleepers = s.counters.data_sleepers;
    snap->producer_attached = s.producer.attached ? 1 : 0;
    snap->producer_pid = s.producer.pid;
    snap->producer_liveness = static_cast<std::uint32_t>(s.producer.liveness);
    snap->producer_closed = s.producer.closed ? 1 : 0;
    snap->producer_waiting_for_space = s.producer.waiting_for_space ? 1 : 0;
    snap->producer_blocked_on_slot = s.producer.blocked_on_slot ? *s.producer.blocked_on_slot : -1;
    snap->takeovers = s.producer.takeovers;
    snap->readers = c_array<shmbus_reader_view>(s.readers, snap->reader_count,
                                                [&](const shmbus::ReaderView& r, shmbus_reader_view& v) {
                                                  v.slot = r.slot;
                                                  v.pid = r.pid;
                                                  v.liveness = static_cast<std::uint32_t>(r.liveness);
                                                  v.sleeping = r.sleeping ? 1 : 0;
                                                  copy_name(v.name, r.name);
                                                  v.cursor = r.cursor;
                                                  v.lag = s.head > r.cursor ? s.head - r.cursor : 0;
                                                  v.delivered = r.delivered;
                                                  v.lost = r.lost;
                                                  v.attach_time_ns = r.attach_time_ns;
                                                  v.last_active_ns = r.last_active_ns;
                                                  v.best_effort = r.best_effort ? 1 : 0;
                                                  v.let_go_ns = r.let_go_ns;
                                                });
    snap->bookmarks = c_array<shmbus_bookmark_view>(s.bookmarks, snap->bookmark_count,
                                                    [](const shmbus::BookmarkView& b, shmbus_bookmark_view& v) {
                                                      v.index = b.index;
                                                      v.held = b.held ? 1 : 0;
                                                      v.holder_pid = b.held ? b.holder_pid : 0;
                                                      copy_name(v.name, b.name);
                                                      v.cursor = b.cursor;
                                                      v.updated_ns = b.updated_ns;
                                                    });
    snap->dir = c_string(s.info.dir);
    snap->pages = c_string(s.info.pages);
    snap->page_size = s.info.page_size;
    if (!s.readers.empty()) {
      auto evicted = std::make_unique<int[]>(s.readers.size());
      for (std::size_t i = 0; i < s.readers.size(); ++i) evicted[i] = s.readers[i].evicted ? 1 : 0;
      snap->reader_evicted = evicted.release();
    }
    *out = snap.release();
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_inspect(const char* name, shmbus_snapshot** out) {
  return inspect_bus("shmbus_inspect", nullptr, name, out);
}

shmbus_status shmbus_inspect_in(const char* dir, const char* name, shmbus_snapshot** out) {
  return inspect_bus("shmbus_inspect_in", dir, name, out);
}

static shmbus_status move_name(const char* fn, const char* dir, const char* name, const char* reader,
                               std::uint32_t target, std::uint64_t value, shmbus_name_move* out,
                               int* moved) noexcept {
  if (moved) *moved = 0;
  if (out) std::memset(out, 0, sizeof *out);
  if (!name) return invalid(fn, "name is NULL");
  if (!reader) return invalid(fn, "reader is NULL");
  if (target > SHMBUS_TO_TIME) return invalid(fn, "target is not a shmbus_name_target");
  return guard(fn, [&] {
    shmbus::ReaderNameTarget t;
    t.kind = static_cast<shmbus::ReaderNameTarget::Kind>(target);
    t.value = value;
    const std::optional<shmbus::ReaderNameMove> m = shmbus::move_reader_name(name, reader, t, {}, dir ? dir : "");
    if (!m) return SHMBUS_OK;
    if (out) *out = {m->from, m->to, m->oldest, m->head, m->timestamp_ns, m->unstamped};
    if (moved) *moved = 1;
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_move_reader_name(const char* name, const char* reader, uint32_t target, uint64_t value,
                                      shmbus_name_move* out, int* moved) {
  return move_name("shmbus_move_reader_name", nullptr, name, reader, target, value, out, moved);
}

shmbus_status shmbus_move_reader_name_in(const char* dir, const char* name, const char* reader, uint32_t target,
                                         uint64_t value, shmbus_name_move* out, int* moved) {
  return move_name("shmbus_move_reader_name_in", dir, name, reader, target, value, out, moved);
}

static shmbus_status forget_name(const char* fn, const char* dir, const char* name, const char* reader,
                                 int* forgotten) noexcept {
  if (forgotten) *forgotten = 0;
  if (!name) return invalid(fn, "name is NULL");
  if (!reader) return invalid(fn, "reader is NULL");
  return guard(fn, [&] {
    const bool f = shmbus::forget_reader_name(name, reader, {}, dir ? dir : "");
    if (forgotten) *forgotten = f ? 1 : 0;
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_forget_reader_name(const char* name, const char* reader, int* forgotten) {
  return forget_name("shmbus_forget_reader_name", nullptr, name, reader, forgotten);
}

shmbus_status shmbus_forget_reader_name_in(const char* dir, const char* name, const char* reader, int* forgotten) {
  return forget_name("shmbus_forget_reader_name_in", dir, name, reader, forgotten);
}

static shmbus_status let_go(const char* fn, const char* dir, const char* name, uint32_t slot) noexcept {
  if (!name) return invalid(fn, "name is NULL");
  return guard(fn, [&] {
    shmbus::let_go_reader(name, slot, std::nullopt, {}, dir ? dir : "");
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_let_go_reader(const char* name, uint32_t slot) {
  return let_go("shmbus_let_go_reader", nullptr, name, slot);
}

shmbus_status shmbus_let_go_reader_in(const char* dir, const char* name, uint32_t slot) {
  return let_go("shmbus_let_go_reader_in", dir, name, slot);
}

void shmbus_snapshot_free(shmbus_snapshot* snapshot) {
  if (!snapshot) return;
  delete[] snapshot->readers;
  delete[] snapshot->bookmarks;
  delete[] snapshot->dir;
  delete[] snapshot->pages;
  delete[] snapshot->reader_evicted;
  delete snapshot;
}

}  // extern "C"
