// shmbus — the C API (shmbus.h) over the C++ one: statuses, buses,
// producers, consumers and wait sets (inspection: c_api_inspect.cpp).
//
// Every entry point validates its pointers, catches every exception at the
// boundary (guard()), and records the reason in a thread-local string. The
// handles are plain heap objects wrapping the C++ ones, which keep all the
// state (an open claim is the Producer's: Producer::open_claim()).
#include "shmbus/shmbus.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "c_api_support.hpp"
#include "shmbus/shmbus.hpp"

using namespace shmbus::c_api;

// The setup errors keep the C++ values, so a status converts by value.
static_assert(SHMBUS_INVALID_NAME == static_cast<int>(shmbus::Errc::invalid_name));
static_assert(SHMBUS_NOT_RETAINED == static_cast<int>(shmbus::Errc::not_retained));
static_assert(SHMBUS_TIMEOUT == static_cast<int>(shmbus::Errc::timeout));
static_assert(SHMBUS_NOT_ALLOCATED == static_cast<int>(shmbus::Errc::not_allocated));
static_assert(SHMBUS_BOOKMARKS_FULL == static_cast<int>(shmbus::Errc::bookmarks_full));
static_assert(SHMBUS_UNSAFE_FILE == static_cast<int>(shmbus::Errc::unsafe_file));
static_assert(SHMBUS_BAD_DIRECTORY == static_cast<int>(shmbus::Errc::bad_directory));
static_assert(SHMBUS_OPTIONS_DIFFER == static_cast<int>(shmbus::Errc::options_differ));
static_assert(SHMBUS_START_RESUME == static_cast<int>(shmbus::Start::resume));
static_assert(SHMBUS_END_REMOVED == static_cast<int>(shmbus::EndReason::removed));
static_assert(SHMBUS_DEAD == static_cast<int>(shmbus::Liveness::dead));
static_assert(SHMBUS_LIVENESS_UNKNOWN == static_cast<int>(shmbus::Liveness::unknown));
// best_effort sits in what was padding before `wait`: the struct's size and
// every other offset are those of the options without it.
static_assert(offsetof(shmbus_consumer_options, best_effort) == 28 &&
              offsetof(shmbus_consumer_options, wait) == 32 && sizeof(shmbus_consumer_options) == 56);
static_assert(SHMBUS_START_SEQUENCE == static_cast<int>(shmbus::Start::sequence));
// The offsets shmbus.h documents. On LP64, stale_view sits in what would be
// the tail padding of the fields before it; records and reserved add 8.
static_assert(offsetof(shmbus_message, stale_view) == 44 && offsetof(shmbus_message, records) == 48 &&
              offsetof(shmbus_message, reserved) == 52 && sizeof(shmbus_message) == 56);
static_assert(offsetof(shmbus_bus_info, policy) == 204 && offsetof(shmbus_bus_info, capacity) == 208 &&
              offsetof(shmbus_bus_info, max_payload) == 220 && offsetof(shmbus_bus_info, max_message) == 224 &&
              offsetof(shmbus_bus_info, max_readers) == 228 && offsetof(shmbus_bus_info, layout_version) == 232 &&
              offsetof(shmbus_bus_info, segment_size) == 240 && sizeof(shmbus_bus_info) == 256);
static_assert(SHMBUS_WAIT_ADAPTIVE == static_cast<int>(shmbus::WaitStrategy::adaptive));
static_assert(SHMBUS_TO_EARLIEST == static_cast<int>(shmbus::ReaderNameTarget::Kind::earliest) &&
              SHMBUS_TO_LATEST == static_cast<int>(shmbus::ReaderNameTarget::Kind::latest) &&
              SHMBUS_TO_SEQUENCE == static_cast<int>(shmbus::ReaderNameTarget::Kind::sequence) &&
              SHMBUS_TO_TIME == static_cast<int>(shmbus::ReaderNameTarget::Kind::time));
static_assert(offsetof(shmbus_name_move, from) == 0 && offsetof(shmbus_name_move, to) == 8 &&
              offsetof(shmbus_name_move, oldest) == 16 && offsetof(shmbus_name_move, head) == 24 &&
              offsetof(shmbus_name_move, timestamp_ns) == 32 && offsetof(shmbus_name_move, unstamped) == 40 &&
              sizeof(shmbus_name_move) == 48);

namespace {

std::chrono::nanoseconds to_timeout(std::int64_t ns) noexcept {
  return ns < 0 ? shmbus::forever : std::chrono::nanoseconds(ns);
}

// Checks a C wait-options struct and converts it.
std::optional<shmbus::WaitOptions> to_wait(const shmbus_wait_options& w) noexcept {
  if (w.strategy > SHMBUS_WAIT_ADAPTIVE || w.spin_time_ns < 0 || w.yield_time_ns < 0) return {};
  shmbus::WaitOptions o;
  o.strategy = static_cast<shmbus::WaitStrategy>(w.strategy);
  o.spin_time = std::chrono::nanoseconds(w.spin_time_ns);
  o.yield_time = std::chrono::nanoseconds(w.yield_time_ns);
  return o;
}

shmbus_wait_options default_wait() noexcept {
  const shmbus::WaitOptions d;
  shmbus_wait_options w;
  w.strategy = static_cast<std::uint32_t>(d.strategy);
  w.spin_time_ns = d.spin_time.count();
  w.yield_time_ns = d.yield_time.count();
  return w;
}

bool to_bus_options(const shmbus_bus_options* in, shmbus::BusOptions& out) noexcept {
  if (!in) return true;
  if (in->policy != SHMBUS_POLICY_BLOCK && in->policy != SHMBUS_POLICY_OVERWRITE) return false;
  if (in->mode > 07777) return false;
  out.capacity = in->capacity;
  out.record_size = in->record_size;
  out.policy = static_cast<shmbus::Policy>(in->policy);
  out.max_readers = in->max_readers;
  out.mode = static_cast<mode_t>(in->mode);
  return true;
}

shmbus_status publish_failure(const shmbus_producer* p, shmbus::PublishStatus s,
                              std::size_t size) noexcept {
  const std::string bus = "bus '" + p->producer.bus().name() + "': ";
  switch (s) {
    case shmbus::PublishStatus::too_large:
      return fail(SHMBUS_TOO_LARGE, bus + "message of " + std::to_string(size) + " bytes, max " +
                                        std::to_string(p->max_message));
    case shmbus::PublishStatus::timeout:
      return fail(SHMBUS_TIMEOUT, bus + "ring still full when the timeout ran out");
    case shmbus::PublishStatus::closed:
      return fail(SHMBUS_CLOSED, bus + "the producer was closed");
    case shmbus::PublishStatus::invalid:
      return fail(SHMBUS_INVALID_ARGUMENT, bus + "sequence already used");
    case shmbus::PublishStatus::ok: break;
  }
  return SHMBUS_OK;
}

shmbus_read_status read_status(shmbus::ReadStatus s) noexcept {
  switch (s) {
    case shmbus::ReadStatus::message: return SHMBUS_READ_MESSAGE;
    case shmbus::ReadStatus::timeout: return SHMBUS_READ_TIMEOUT;
    case shmbus::ReadStatus::end_of_stream: return SHMBUS_READ_END_OF_STREAM;
    case shmbus::ReadStatus::lost: return SHMBUS_READ_LOST;
    case shmbus::ReadStatus::corrupt: return SHMBUS_READ_CORRUPT;
    case shmbus::ReadStatus::evicted: return SHMBUS_READ_EVICTED;
    case shmbus::ReadStatus::let_go: return SHMBUS_READ_LET_GO;
  }
  return SHMBUS_READ_ERROR;
}

void fill_message(const shmbus::Message& m, shmbus_message& out) noexcept {
  out.seq = m.seq;
  out.timestamp_ns = m.timestamp_ns;
  out.data = m.payload.data();
  out.size = m.payload.size();
  out.lost = 0;
  out.end_reason = SHMBUS_END_NONE;
  out.stale_view = 0;
  out.records = m.records;
  out.reserved = 0;
}

}  // namespace

extern "C" {

const char* shmbus_status_str(int status) {
  switch (status) {
    case SHMBUS_OK: return "ok";
    case SHMBUS_INVALID_ARGUMENT: return "invalid argument";
    case SHMBUS_OUT_OF_MEMORY: return "out of memory";
    case SHMBUS_INTERNAL: return "internal error";
    case SHMBUS_TOO_LARGE: return "payload too large";
    case SHMBUS_CLOSED: return "producer closed";
    case SHMBUS_CLAIM_PENDING: return "a claim is open";
    case SHMBUS_NO_CLAIM: return "no open claim";
    default: break;
  }
  if (status >= SHMBUS_INVALID_NAME && status <= SHMBUS_OPTIONS_DIFFER) {
    // The C++ category's messages are string literals' copies; keep static ones here.
    static const char* const names[] = {
        "invalid name", "invalid options", "already exists", "not found", "permission denied",
        "no space", "not a bus", "version mismatch", "truncated", "corrupt", "not ready",
        "producer active", "reader table full", "not retained", "system error", "timeout",
        "foreign owner", "insecure mode", "not allocated", "name in use", "bookmarks full",
        "unsafe file", "bad directory", "options differ"};
    return names[status - 1];
  }
  return "unknown status";
}

const char* shmbus_last_error(void) { return last_error.c_str(); }

const char* shmbus_version(void) { return SHMBUS_VERSION; }

uint64_t shmbus_default_capacity(uint32_t record_size) { return shmbus::default_capacity_for(record_size); }

void shmbus_bus_options_init(shmbus_bus_options* options) {
  if (!options) return;
  const shmbus::BusOptions d;
  options->capacity = d.capacity;
  options->record_size = d.record_size;
  options->policy = static_cast<std::uint32_t>(d.policy);
  options->max_readers = d.max_readers;
  options->mode = static_cast<std::uint32_t>(d.mode);
}

// How make_bus() treats a bus that exists.
enum class IfExists { refuse, same_options, as_is };

static shmbus_status make_bus(const char* fn, const char* dir, const char* name, const shmbus_bus_options* options,
                              shmbus_bus** out, IfExists if_exists) noexcept {
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  if (!name) return invalid(fn, "name is NULL");
  shmbus::BusOptions o;
  if (!to_bus_options(options, o)) return invalid(fn, "policy or mode out of range");
  if (dir) o.dir = dir;
  return guard(fn, [&] {
    o.existing = if_exists == IfExists::as_is ? shmbus::Existing::as_is : shmbus::Existing::same;
    auto b = if_exists != IfExists::refuse ? shmbus::Bus::open_or_create(name, o) : shmbus::Bus::create(name, o);
    *out = new shmbus_bus{std::move(b)};
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_bus_create(const char* name, const shmbus_bus_options* options,
                                shmbus_bus** out) {
  return make_bus("shmbus_bus_create", nullptr, name, options, out, IfExists::refuse);
}

shmbus_status shmbus_bus_create_in(const char* dir, const char* name, const shmbus_bus_options* options,
                                   shmbus_bus** out) {
  return make_bus("shmbus_bus_create_in", dir, name, options, out, IfExists::refuse);
}

shmbus_status shmbus_bus_open_or_create(const char* name, const shmbus_bus_options* options,
                                        shmbus_bus** out) {
  return make_bus("shmbus_bus_open_or_create", nullptr, name, options, out, IfExists::same_options);
}

shmbus_status shmbus_bus_open_or_create_in(const char* dir, const char* name, const shmbus_bus_options* options,
                                           shmbus_bus** out) {
  return make_bus("shmbus_bus_open_or_create_in", dir, name, options, out, IfExists::same_options);
}

shmbus_status shmbus_bus_open_or_create_as_is(const char* name, const shmbus_bus_options* options,
                                              shmbus_bus** out) {
  return make_bus("shmbus_bus_open_or_create_as_is", nullptr, name, options, out, IfExists::as_is);
}

shmbus_status shmbus_bus_open_or_create_as_is_in(const char* dir, const char* name,
                                                 const shmbus_bus_options* options, shmbus_bus** out) {
  return make_bus("shmbus_bus_open_or_create_as_is_in", dir, name, options, out, IfExists::as_is);
}

static shmbus_status open_bus(const char* fn, const char* dir, const char* name, int64_t ready_timeout_ns,
                              shmbus_bus** out) noexcept {
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  if (!name) return invalid(fn, "name is NULL");
  return guard(fn, [&] {
    shmbus::OpenOptions o;
    if (ready_timeout_ns >= 0) {
      o.ready_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::nanoseconds(ready_timeout_ns));
    }
    if (dir) o.dir = dir;
    *out = new shmbus_bus{shmbus::Bus::open(name, o)};
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_bus_open(const char* name, int64_t ready_timeout_ns, shmbus_bus** out) {
  return open_bus("shmbus_bus_open", nullptr, name, ready_timeout_ns, out);
}

shmbus_status shmbus_bus_open_in(const char* dir, const char* name, shmbus_bus** out) {
  return open_bus("shmbus_bus_open_in", dir, name, 0, out);
}

void shmbus_bus_close(shmbus_bus* bus) { delete bus; }

static shmbus_status remove_bus(const char* fn, const char* dir, const char* name, int* removed) noexcept {
  if (removed) *removed = 0;
  if (!name) return invalid(fn, "name is NULL");
  return guard(fn, [&] {
    const bool r = shmbus::Bus::remove(name, dir ? dir : "");
    if (removed) *removed = r ? 1 : 0;
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_bus_remove(const char* name, int* removed) {
  return remove_bus("shmbus_bus_remove", nullptr, name, removed);
}

shmbus_status shmbus_bus_remove_in(const char* dir, const char* name, int* removed) {
  return remove_bus("shmbus_bus_remove_in", dir, name, removed);
}

int shmbus_bus_exists_in(const char* dir, const char* name) {
  if (!name) return 0;
  try {
    return shmbus::Bus::exists(name, dir ? dir : "") ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int shmbus_bus_exists(const char* name) { return shmbus_bus_exists_in(nullptr, name); }

shmbus_status shmbus_set_dir(const char* dir) {
  return guard("shmbus_set_dir", [&] {
    shmbus::set_bus_dir(dir ? dir : "");
    return SHMBUS_OK;
  });
}

const char* shmbus_dir(void) {
  static thread_local std::string dir;
  try {
    dir = shmbus::bus_dir();
  } catch (...) {
    dir = shmbus::system_bus_dir;
  }
  return dir.c_str();
}

shmbus_status shmbus_bus_get_info(const shmbus_bus* bus, shmbus_bus_info* out) {
  if (!bus || !out) return invalid("shmbus_bus_get_info", "bus or out is NULL");
  fill_info(bus->bus.info(), *out);
  return SHMBUS_OK;
}

uint64_t shmbus_bus_head(const shmbus_bus* bus) { return bus ? bus->bus.head() : 0; }
uint64_t shmbus_bus_oldest(const shmbus_bus* bus) { return bus ? bus->bus.oldest() : 0; }

// ---- Producer

void shmbus_producer_options_init(shmbus_producer_options* options) {
  if (!options) return;
  options->wait = default_wait();
  options->timestamps = SHMBUS_TIMESTAMPS_OFF;
  options->wait_for_readers = 0;
  options->wait_for_readers_timeout_ns = SHMBUS_FOREVER;
  options->max_hold_ns = SHMBUS_FOREVER;
}

shmbus_status shmbus_producer_open(shmbus_bus* bus, const shmbus_producer_options* options,
                                   shmbus_producer** out) {
  constexpr const char* fn = "shmbus_producer_open";
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  if (!bus) return invalid(fn, "bus is NULL");
  shmbus::ProducerOptions o;
  if (options) {
    auto w = to_wait(options->wait);
    if (!w || options->timestamps > SHMBUS_TIMESTAMPS_PRECISE) {
      return invalid(fn, "wait strategy, wait times or timestamps out of range");
    }
    o.wait = *w;
    o.timestamps = static_cast<shmbus::Timestamps>(options->timestamps);
    o.wait_for_readers = options->wait_for_readers;
    o.wait_for_readers_timeout = to_timeout(options->wait_for_readers_timeout_ns);
    o.max_hold = to_timeout(options->max_hold_ns);
  }
  return guard(fn, [&] {
    shmbus::Producer p(bus->bus, o);
    *out = new shmbus_producer{std::move(p), bus->bus.info().max_message};
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_producer_publish(shmbus_producer* producer, const void* data, size_t size,
                                      int64_t timeout_ns, uint64_t* seq) {
  constexpr const char* fn = "shmbus_producer_publish";
  if (!producer) return invalid(fn, "producer is NULL");
  if (!data && size) return invalid(fn, "data is NULL with a non-zero size");
  if (producer->producer.open_claim())
    return fail(SHMBUS_CLAIM_PENDING, std::string(fn) + ": commit the open claim first");
  const auto r = producer->producer.publish(
      std::span<const std::byte>(static_cast<const std::byte*>(data), size), to_timeout(timeout_ns));
  if (r.status != shmbus::PublishStatus::ok) return publish_failure(producer, r.status, size);
  if (seq) *seq = r.seq;
  return SHMBUS_OK;
}

shmbus_status shmbus_producer_claim(shmbus_producer* producer, size_t size, int64_t timeout_ns,
                                    void** data, uint64_t* seq) {
  constexpr const char* fn = "shmbus_producer_claim";
  if (!producer || !data) return invalid(fn, "producer or data is NULL");
  *data = nullptr;
  if (producer->producer.open_claim())
    return fail(SHMBUS_CLAIM_PENDING, std::string(fn) + ": commit the open claim first");
  const shmbus::Claim c = producer->producer.claim(size, to_timeout(timeout_ns));
  if (c.status != shmbus::PublishStatus::ok) return publish_failure(producer, c.status, size);
  *data = c.data.data();
  if (seq) *seq = c.seq;
  return SHMBUS_OK;
}

shmbus_status shmbus_producer_commit(shmbus_producer* producer, size_t size) {
  constexpr const char* fn = "shmbus_producer_commit";
  if (!producer) return invalid(fn, "producer is NULL");
  const shmbus::Claim open = producer->producer.open_claim();
  if (!open) return fail(SHMBUS_NO_CLAIM, std::string(fn) + ": nothing is claimed");
  if (size > open.data.size()) {
    return fail(SHMBUS_NO_CLAIM, std::string(fn) + ": " + std::to_string(size) + " bytes committed, " +
                                     std::to_string(open.data.size()) + " claimed");
  }
  producer->producer.commit(size);
  return SHMBUS_OK;
}

shmbus_status shmbus_producer_publish_batch(shmbus_producer* producer, const void* const* data,
                                            const size_t* sizes, size_t count, int64_t timeout_ns,
                                            size_t* published) {
  constexpr const char* fn = "shmbus_producer_publish_batch";
  if (!producer || !published) return invalid(fn, "producer or published is NULL");
  *published = 0;
  if (count == 0) return SHMBUS_OK;
  if (!data || !sizes) return invalid(fn, "data or sizes is NULL");
  for (size_t i = 0; i < count; ++i) {
    if (!data[i] && sizes[i]) return invalid(fn, "a data pointer is NULL with a non-zero size");
  }
  if (producer->producer.open_claim())
    return fail(SHMBUS_CLAIM_PENDING, std::string(fn) + ": commit the open claim first");
  if (producer->closed) return publish_failure(producer, shmbus::PublishStatus::closed, 0);
  return guard(fn, [&] {
    std::vector<std::span<const std::byte>> spans(count);
    for (size_t i = 0; i < count; ++i) {
      spans[i] = std::span<const std::byte>(static_cast<const std::byte*>(data[i]), sizes[i]);
    }
    const std::size_t n = producer->producer.publish_batch(spans, to_timeout(timeout_ns));
    *published = n;
    if (n == count) return SHMBUS_OK;
    if (sizes[n] > producer->max_message) {
      return publish_failure(producer, shmbus::PublishStatus::too_large, sizes[n]);
    }
    return publish_failure(producer, shmbus::PublishStatus::timeout, 0);
  });
}

shmbus_status shmbus_producer_close(shmbus_producer* producer) {
  if (!producer) return invalid("shmbus_producer_close", "producer is NULL");
  producer->producer.close();
  producer->closed = true;
  return SHMBUS_OK;
}

shmbus_status shmbus_producer_detach(shmbus_producer* producer) {
  if (!producer) return invalid("shmbus_producer_detach", "producer is NULL");
  producer->producer.detach();
  producer->closed = true;
  return SHMBUS_OK;
}

uint64_t shmbus_producer_next_seq(const shmbus_producer* producer) {
  return producer ? producer->producer.next_seq() : 0;
}

void shmbus_producer_destroy(shmbus_producer* producer) { delete producer; }

// ---- Consumer

void shmbus_consumer_options_init(shmbus_consumer_options* options) {
  if (!options) return;
  options->name = nullptr;
  options->start = SHMBUS_START_EARLIEST;
  options->start_seq = 0;
  options->durable = 0;
  options->best_effort = 0;
  options->wait = default_wait();
}

shmbus_status shmbus_consumer_open(shmbus_bus* bus, const shmbus_consumer_options* options,
                                   shmbus_consumer** out) {
  constexpr const char* fn = "shmbus_consumer_open";
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  if (!bus) return invalid(fn, "bus is NULL");
  return guard(fn, [&] {
    shmbus::ConsumerOptions o;
    if (options) {
      auto w = to_wait(options->wait);
      if (!w || options->start > SHMBUS_START_RESUME || options->durable > 1 || options->best_effort > 1) {
        return invalid(fn, "start, durable, best_effort, wait strategy or wait times out of range");
      }
      o.durable = options->durable == 1;
      o.hold_producer = options->best_effort == 0;
      if (options->name) o.name = options->name;
      o.start = static_cast<shmbus::Start>(options->start);
      o.start_seq = options->start_seq;
      o.wait = *w;
    }
    shmbus::Consumer c(bus->bus, o);
    *out = new shmbus_consumer{std::move(c), {}};
    return SHMBUS_OK;
  });
}

shmbus_read_status shmbus_consumer_next(shmbus_consumer* consumer, int64_t timeout_ns,
                                        shmbus_message* out) {
  if (!consumer || !out) {
    invalid("shmbus_consumer_next", "consumer or out is NULL");
    return SHMBUS_READ_ERROR;
  }
  const shmbus::ReadResult r = consumer->consumer.next(to_timeout(timeout_ns));
  fill_message(r.message, *out);
  if (r.status != shmbus::ReadStatus::message) {
    out->data = nullptr;
    out->size = 0;
    out->records = 0;
  }
  out->lost = r.lost;
  out->end_reason = static_cast<std::uint32_t>(r.end_reason);
  out->stale_view = r.stale_view ? 1 : 0;
  return read_status(r.status);
}

int64_t shmbus_consumer_read_batch(shmbus_consumer* consumer, shmbus_message* out, size_t max,
                                   int64_t timeout_ns, shmbus_batch_result* result) {
  constexpr const char* fn = "shmbus_consumer_read_batch";
  if (result) *result = shmbus_batch_result{0, 0, 0, SHMBUS_END_NONE, 0, 0, 0};
  if (!consumer || (!out && max)) {
    invalid(fn, "consumer or out is NULL");
    return -1;
  }
  // Bounded so the scratch buffer stays small; callers loop for more.
  max = std::min<size_t>(max, 4096);
  try {
    if (consumer->batch.size() < max) consumer->batch.resize(max);
  } catch (...) {
    fail(SHMBUS_OUT_OF_MEMORY, std::string(fn) + ": out of memory");
    return -1;
  }
  shmbus::PollResult pr;
  const auto got = consumer->consumer.read_batch(
      std::span<shmbus::Message>(consumer->batch.data(), max), pr, to_timeout(timeout_ns));
  for (size_t i = 0; i < got.size(); ++i) fill_message(got[i], out[i]);
  if (result) {
    *result = shmbus_batch_result{pr.lost, pr.corrupt, pr.end_of_stream ? 1 : 0,
                                  static_cast<std::uint32_t>(pr.end_reason), pr.evicted ? 1 : 0,
                                  pr.stale_view ? 1 : 0, pr.let_go ? 1 : 0};
  }
  return static_cast<int64_t>(got.size());
}

uint64_t shmbus_consumer_cursor(const shmbus_consumer* c) { return c ? c->consumer.cursor() : 0; }
uint64_t shmbus_consumer_delivered(const shmbus_consumer* c) {
  return c ? c->consumer.delivered() : 0;
}
uint64_t shmbus_consumer_lost(const shmbus_consumer* c) { return c ? c->consumer.lost() : 0; }
uint32_t shmbus_consumer_slot(const shmbus_consumer* c) { return c ? c->consumer.slot() : 0; }
int shmbus_consumer_resumed(const shmbus_consumer* c) { return c && c->consumer.resumed() ? 1 : 0; }
uint64_t shmbus_consumer_resume_gap(const shmbus_consumer* c) {
  return c ? c->consumer.resume_gap() : 0;
}

void shmbus_consumer_destroy(shmbus_consumer* consumer) { delete consumer; }

// ---- Wait sets

shmbus_status shmbus_wait_set_new(const shmbus_wait_options* wait, shmbus_wait_set** out) {
  constexpr const char* fn = "shmbus_wait_set_new";
  if (!out) return invalid(fn, "out is NULL");
  *out = nullptr;
  shmbus::WaitOptions w;
  if (wait) {
    const std::optional<shmbus::WaitOptions> o = to_wait(*wait);
    if (!o) return invalid(fn, "wait options out of range");
    w = *o;
  }
  return guard(fn, [&] {
    *out = new shmbus_wait_set(w);
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_wait_set_add(shmbus_wait_set* set, shmbus_consumer* consumer) {
  constexpr const char* fn = "shmbus_wait_set_add";
  if (!set || !consumer) return invalid(fn, "set or consumer is NULL");
  return guard(fn, [&] {
    set->handles.reserve(set->handles.size() + 1);  // no failure after add()
    set->set.add(consumer->consumer);
    set->handles.emplace_back(&consumer->consumer, consumer);
    return SHMBUS_OK;
  });
}

shmbus_status shmbus_wait_set_remove(shmbus_wait_set* set, shmbus_consumer* consumer) {
  if (!set || !consumer) return invalid("shmbus_wait_set_remove", "set or consumer is NULL");
  set->set.remove(consumer->consumer);
  std::erase_if(set->handles, [&](const auto& h) { return h.second == consumer; });
  return SHMBUS_OK;
}

int64_t shmbus_wait_set_wait(shmbus_wait_set* set, int64_t timeout_ns, shmbus_consumer** ready, size_t max) {
  constexpr const char* fn = "shmbus_wait_set_wait";
  if (!set || (!ready && max)) {
    invalid(fn, "set or ready is NULL");
    return -1;
  }
  std::int64_t n = -1;
  guard(fn, [&] {
    const auto got = set->set.wait(to_timeout(timeout_ns));
    n = 0;
    for (shmbus::Consumer* c : got) {
      if (static_cast<std::size_t>(n) == max) break;
      for (const auto& [cpp, handle] : set->handles)
        if (cpp == c) ready[n++] = handle;
    }
    return SHMBUS_OK;
  });
  return n;
}

int shmbus_wait_set_fd(shmbus_wait_set* set) {
  constexpr const char* fn = "shmbus_wait_set_fd";
  if (!set) {
    invalid(fn, "set is NULL");
    return -1;
  }
  int fd = -1;
  guard(fn, [&] {
    fd = set->set.fd();
    return SHMBUS_OK;
  });
  return fd;
}

void shmbus_wait_set_destroy(shmbus_wait_set* set) { delete set; }

}  // extern "C"
