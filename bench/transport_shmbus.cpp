// shmbus-bench — shmbus itself.
//
// The orchestrator creates the bus (NAME, or NAME.ping and NAME.pong for
// ping-pong) with a record size that fits the message; the producer copies
// each message in with one Producer::publish() per message; a consumer reads
// with one Consumer::next() per message (`--shmbus-read next`, the default)
// or in batches of up to 256 with
// Consumer::read_batch() (`--shmbus-read batch`; what Consumer::poll() is made
// of), in place (`block`) or copied (`overwrite`). One bus carries every
// consumer: broadcast, no per-consumer copy by the producer.
#include <array>
#include <chrono>
#include <string>

#include "roles.hpp"
#include "shmbus/shmbus.hpp"

namespace bench {

namespace {

shmbus::WaitOptions wait_options(const RunConfig& cfg) {
  shmbus::WaitOptions w;
  w.strategy = static_cast<shmbus::WaitStrategy>(cfg.wait_strategy);
  if (cfg.spin_ns >= 0) w.spin_time = std::chrono::nanoseconds(cfg.spin_ns);
  if (cfg.yield_ns >= 0) w.yield_time = std::chrono::nanoseconds(cfg.yield_ns);
  return w;
}

std::string bus_name(const RunConfig& cfg, const char* suffix) {
  std::string n = cfg.name;
  if (suffix) n += std::string(".") + suffix;
  return n;
}

}  // namespace

std::uint32_t shmbus_record_size(std::uint32_t msg_size) { return shmbus::record_size_for(msg_size); }

void shmbus_create(const RunConfig& cfg) {
  shmbus::BusOptions o;
  if (cfg.capacity) o.capacity = cfg.capacity;
  o.record_size = shmbus_record_size(cfg.size);
  o.policy = static_cast<shmbus::Policy>(cfg.policy);
  o.max_readers = cfg.consumers + 2;
  if (cfg.mode == Mode::pingpong) {
    for (const char* s : {"ping", "pong"}) {
      shmbus::Bus::remove(bus_name(cfg, s));
      shmbus::Bus::create(bus_name(cfg, s), o);
    }
  } else {
    shmbus::Bus::remove(bus_name(cfg, nullptr));
    shmbus::Bus::create(bus_name(cfg, nullptr), o);
  }
}

ShmbusCounters shmbus_counters(const RunConfig& cfg) {
  ShmbusCounters out;
  try {
    const auto snap = shmbus::Inspector::open(bus_name(cfg, cfg.mode == Mode::pingpong ? "ping" : nullptr)).snapshot();
    out.valid = true;
    out.published = snap.counters.published;
    out.producer_waits = snap.counters.producer_waits;
    out.producer_wait_ns = snap.counters.producer_wait_ns;
    out.wakeups = snap.counters.wakeups;
  } catch (const std::exception&) {
  }
  return out;
}

void shmbus_remove(const RunConfig& cfg) {
  shmbus::Bus::remove(bus_name(cfg, nullptr));
  shmbus::Bus::remove(bus_name(cfg, "ping"));
  shmbus::Bus::remove(bus_name(cfg, "pong"));
}

namespace {

class ShmbusSender {
 public:
  ShmbusSender(const std::string& name, const RunConfig& cfg, std::uint32_t readers)
      : producer_(shmbus::Bus::open(name), options(cfg, readers)) {}
  bool send(const std::byte* p, std::size_t n) noexcept {
    const auto r = producer_.publish(std::span<const std::byte>(p, n));
    status_ = r.status;
    return r.status == shmbus::PublishStatus::ok;
  }
  void finish() noexcept { producer_.close(); }
  const char* error() const noexcept { return shmbus::to_string(status_); }

 private:
  static shmbus::ProducerOptions options(const RunConfig& cfg, std::uint32_t readers) {
    shmbus::ProducerOptions o;
    o.wait = wait_options(cfg);
    static_assert(static_cast<int>(shmbus::Timestamps::off) == 0 &&
                  static_cast<int>(shmbus::Timestamps::coarse) == 1 &&
                  static_cast<int>(shmbus::Timestamps::precise) == 2, "RunConfig::lib_timestamps");
    o.timestamps = static_cast<shmbus::Timestamps>(cfg.lib_timestamps);
    o.wait_for_readers = readers;
    o.wait_for_readers_timeout = std::chrono::nanoseconds(cfg.timeout_ns);
    return o;
  }
  shmbus::Producer producer_;
  shmbus::PublishStatus status_ = shmbus::PublishStatus::ok;
};

shmbus::ConsumerOptions consumer_options(const RunConfig& cfg, int id) {
  shmbus::ConsumerOptions o;
  o.name = "bench-" + std::to_string(id);
  o.start = shmbus::Start::earliest;
  o.wait = wait_options(cfg);
  return o;
}

std::chrono::nanoseconds timeout_of(std::uint64_t timeout_ns) noexcept {
  return timeout_ns == kForever ? shmbus::forever : std::chrono::nanoseconds(timeout_ns);
}

// One Consumer::next() per call, so one message per call: the consumer loop
// reads the clock for a stamped message after next() has handed it over.
class ShmbusNextReceiver {
 public:
  ShmbusNextReceiver(const std::string& name, const RunConfig& cfg, int id)
      : consumer_(shmbus::Bus::open(name), consumer_options(cfg, id)) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    const shmbus::ReadResult r = consumer_.next(timeout_of(timeout_ns));
    switch (r.status) {
      case shmbus::ReadStatus::message:
        on_message(r.message.payload.data(), r.message.payload.size());
        return 1;
      case shmbus::ReadStatus::end_of_stream:
        err_ = "end of stream";
        return -1;
      case shmbus::ReadStatus::timeout:
      case shmbus::ReadStatus::lost:     // a loss or a corrupt record shows up as a
      case shmbus::ReadStatus::corrupt:  // gap in the sequence numbers messages carry
      case shmbus::ReadStatus::evicted:
      case shmbus::ReadStatus::let_go:
        return 0;
    }
    return 0;
  }
  const char* error() const noexcept { return err_; }

 private:
  shmbus::Consumer consumer_;
  const char* err_ = "";
};

// One read_batch() per call: every message handed over was already read
// when the consumer loop takes its receive timestamp (Consumer::poll()
// would chain several batches behind one timestamp).
class ShmbusBatchReceiver {
 public:
  ShmbusBatchReceiver(const std::string& name, const RunConfig& cfg, int id)
      : consumer_(shmbus::Bus::open(name), consumer_options(cfg, id)) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    shmbus::PollResult r;
    const auto got = consumer_.read_batch(batch_, r, timeout_of(timeout_ns));
    for (const shmbus::Message& m : got) on_message(m.payload.data(), m.payload.size());
    // A loss or a corrupt record shows up as a gap in the sequence numbers the
    // messages carry, which the consumer loop counts.
    if (got.empty() && r.end_of_stream) {
      err_ = "end of stream";
      return -1;
    }
    return static_cast<long>(got.size());
  }
  const char* error() const noexcept { return err_; }

 private:
  shmbus::Consumer consumer_;
  std::array<shmbus::Message, kBatchMax> batch_{};
  const char* err_ = "";
};

// Calls fn(receiver) with the receiver --shmbus-read asked for.
template <class Fn>
void with_receiver(const std::string& name, const RunConfig& cfg, int id, Fn&& fn) {
  if (cfg.recv_batch > 1) {
    ShmbusBatchReceiver r(name, cfg, id);
    fn(r);
  } else {
    ShmbusNextReceiver r(name, cfg, id);
    fn(r);
  }
}

}  // namespace

void run_shmbus(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  if (cfg.mode == Mode::pingpong) {
    // Attach the reader before waiting for the peer's: neither producer
    // starts before its reader is there, and neither waits on the other.
    if (role == Role::producer) {
      with_receiver(bus_name(cfg, "pong"), cfg, 0, [&](auto& r) {
        ShmbusSender s(bus_name(cfg, "ping"), cfg, 1);
        ping_loop(c, s, r);
      });
    } else {
      with_receiver(bus_name(cfg, "ping"), cfg, 1, [&](auto& r) {
        ShmbusSender s(bus_name(cfg, "pong"), cfg, 0);
        pong_loop(c, s, r);
      });
    }
    return;
  }
  const auto name = bus_name(cfg, nullptr);
  if (role == Role::producer) {
    ShmbusSender s(name, cfg, cfg.mode == Mode::idle ? 0 : cfg.consumers);
    if (cfg.mode == Mode::idle)
      idle_producer_loop(c, s);
    else
      producer_loop(c, s);
  } else {
    with_receiver(name, cfg, id, [&](auto& r) {
      if (cfg.mode == Mode::idle)
        idle_consumer_loop(c, id, r);
      else
        consumer_loop(c, id, r);
    });
  }
}

}  // namespace bench
