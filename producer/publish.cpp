#include "producer/publish.hpp"

#include <time.h>

#include <fmt/format.h>

#include <cstring>
#include <exception>

#include "tools/common/duration.hpp"
#include "tools/common/program.hpp"
#include "tools/common/trust.hpp"
#include "tools/common/synthetic.hpp"

namespace shmbus::producer {

using namespace shmbus::tools;

namespace {

// Waits until `deadline` on CLOCK_MONOTONIC: sleeps while far ahead, spins
// with sched_yield for the last stretch. Pacing for --rate only; never called
// when the schedule is already due.
void wait_until(const timespec& deadline) {
  for (;;) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const std::int64_t left = (deadline.tv_sec - now.tv_sec) * 1'000'000'000LL +
                              (deadline.tv_nsec - now.tv_nsec);
    if (left <= 0 || stop_requested()) return;
    if (left > 50'000) {
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    } else {
      sched_yield();
    }
  }
}

timespec add_ns(const timespec& t, std::uint64_t ns) {
  timespec r = t;
  r.tv_sec += static_cast<time_t>(ns / 1'000'000'000u);
  r.tv_nsec += static_cast<long>(ns % 1'000'000'000u);
  if (r.tv_nsec >= 1'000'000'000L) {
    r.tv_nsec -= 1'000'000'000L;
    ++r.tv_sec;
  }
  return r;
}

// The live readers furthest behind: on a full `block` ring, the ones holding
// the producer back. "reader 0 'archiver' (pid 123) is 64 messages behind".
std::string readers_holding_back(const Producer& producer, const Trust& trust) {
  try {
    const Snapshot s = Inspector::open(producer.bus().name(), trust).snapshot();
    std::optional<std::uint64_t> lowest;
    for (const ReaderView& r : s.readers) {
      if (r.liveness != Liveness::alive) continue;
      if (!lowest || r.cursor < *lowest) lowest = r.cursor;
    }
    if (!lowest) return {};
    std::string who;
    std::size_t n = 0;
    for (const ReaderView& r : s.readers) {
      if (r.liveness != Liveness::alive || r.cursor != *lowest) continue;
      std::string name;
      for (char c : r.name) name.push_back(c >= 0x20 && c < 0x7f ? c : '?');
      who += fmt::format("{}reader {} '{}' (pid {})", n++ ? ", " : "", r.slot, name, r.pid);
    }
    const std::uint64_t behind = s.head > *lowest ? s.head - *lowest : 0;
    return fmt::format("{} {} {} behind and not reading", who, n == 1 ? "is" : "are",
                       plural(behind, "message"));
  } catch (const std::exception&) {
    return {};
  }
}

PublishFailure publish_failure(PublishStatus st, std::chrono::nanoseconds timeout,
                        const Producer& producer, const Options& o, const Totals& t) {
  switch (st) {
    case PublishStatus::timeout: {
      std::string who = readers_holding_back(producer, resolve_trust(o.trust));
      if (who.empty()) {
        std::uint32_t readers = 0;
        try {
          readers = producer.live_readers();
        } catch (...) {
        }
        who = fmt::format("{} not reading", plural(readers, "live consumer"));
      }
      return {fmt::format("the ring stayed full for {} (--wait-timeout): {}; gave up after {}",
                          format_duration(timeout), who, plural(t.messages, "message")),
              "timeout"};
    }
    case PublishStatus::too_large:
      return {fmt::format("message {} is longer than the bus's max message of {} bytes",
                          t.messages, producer.bus().info().max_message),
              "too_large"};
    case PublishStatus::closed:
      return {"the producer role was closed", "closed"};
    case PublishStatus::invalid:  // skip_to only, which this program does not use
      return {"sequence already used", "invalid"};
    case PublishStatus::ok:
      break;
  }
  return {"publish failed"};
}

std::string too_long_message(const Options& o, const InputReader& reader, std::uint64_t length,
                             const BusInfo& info) {
  return fmt::format("{} {} of {} is {}{} bytes, longer than the bus's max message of {} bytes "
                     "(capacity {}, record size {}: a message takes at most half the ring); nothing "
                     "from it on was published (--oversize skip or truncate goes on past such {}s)",
                     o.binary ? "frame" : "line", reader.index(), o.file.empty() ? "stdin" : o.file,
                     reader.length_known() ? "" : "at least ", length, info.max_message, info.capacity,
                     info.record_size, o.binary ? "frame" : "line");
}

}  // namespace

void publish_input(Producer& producer, const Options& o, int fd, std::chrono::nanoseconds timeout,
                   Totals& t) {
  const BusInfo& info = producer.bus().info();
  InputReader reader(fd, o.binary, info.max_message, o.oversize);
  struct Count {  // skipped/truncated into the totals however we leave
    Totals& t;
    const InputReader& r;
    ~Count() {
      t.skipped = r.skipped();
      t.truncated = r.truncated();
    }
  } count{t, reader};
  std::span<const std::byte> msg;
  std::uint64_t length = 0;
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const double interval_ns = o.rate > 0 ? 1e9 / o.rate : 0;
  for (;;) {
    const InputReader::Status s = reader.next(msg, length);
    switch (s) {
      case InputReader::Status::message:
        break;
      case InputReader::Status::end:
      case InputReader::Status::interrupted:
        return;
      case InputReader::Status::too_long:
        throw PublishFailure{too_long_message(o, reader, length, info), "too_large"};
      case InputReader::Status::truncated:
        throw PublishFailure{fmt::format("input ends inside frame {} (a u32 length, then the bytes)",
                                  t.messages + 1),
                      "truncated_input"};
      case InputReader::Status::io_error:
        throw PublishFailure{fmt::format("reading {}: {}", o.file.empty() ? "stdin" : o.file,
                                  std::strerror(reader.error())),
                      "io_error"};
    }
    if (interval_ns > 0) {
      // The same absolute schedule as synthetic messages: message i at start + i / rate.
      wait_until(add_ns(start, static_cast<std::uint64_t>(static_cast<double>(t.messages) * interval_ns)));
      if (stop_requested()) return;
    }
    const PublishResult r = producer.publish(msg, timeout);
    if (!r && stop_requested()) return;  // a wait for space cut short by SIGINT/SIGTERM
    if (!r) throw publish_failure(r.status, timeout, producer, o, t);
    if (!t.first_seq) t.first_seq = r.seq;
    t.last_seq = r.seq;
    ++t.messages;
    t.bytes += msg.size();
    if (stop_requested()) return;
  }
}

void publish_synthetic(Producer& producer, const Options& o, std::chrono::nanoseconds timeout,
                       Totals& t) {
  SizeSequence sizes(parse_size_range(o.size));
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  const double interval_ns = o.rate > 0 ? 1e9 / o.rate : 0;
  // A clock read per message would cost more than publishing it at full speed.
  const std::uint64_t stamp_every = o.stamp_every ? o.stamp_every : interval_ns > 0 ? 1 : 64;
  std::uint64_t until_stamp = 0;  // a countdown, not i % stamp_every: no division per message
  for (std::uint64_t i = 0; i < o.count; ++i) {
    if (interval_ns > 0) {
      // Absolute schedule: message i is due at start + i / rate, so a late
      // message does not push back the ones after it.
      const timespec due = add_ns(start, static_cast<std::uint64_t>(static_cast<double>(i) * interval_ns));
      wait_until(due);
    }
    if (stop_requested()) return;
    const std::size_t size = sizes.next();
    const Claim c = producer.claim(size, timeout);
    if (!c && stop_requested()) return;  // a wait for space cut short by SIGINT/SIGTERM
    if (!c) throw publish_failure(c.status, timeout, producer, o, t);
    const std::span<std::byte> out = c.data.first(size);
    synthetic_fill(out, c.seq);
    const bool stamp = until_stamp == 0;
    until_stamp = stamp ? stamp_every - 1 : until_stamp - 1;
    synthetic_stamp(out, c.seq, stamp ? realtime_ns() : 0);
    producer.commit(size);
    if (!t.first_seq) t.first_seq = c.seq;
    t.last_seq = c.seq;
    ++t.messages;
    t.bytes += size;
  }
}

}  // namespace shmbus::producer
