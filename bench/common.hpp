// shmbus-bench — what every role shares: the clock, the latency histogram,
// the message header, and the control block the orchestrator and its child
// processes share (an anonymous memfd mapping inherited across exec).
#pragma once

#include <sys/resource.h>
#include <time.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace bench {

// ---------------------------------------------------------------- the clock
//
// Every timestamp is CLOCK_MONOTONIC nanoseconds. With an invariant TSC
// (constant_tsc + nonstop_tsc) they are computed from rdtsc (~10 ns instead of
// ~25 ns for clock_gettime) using ONE calibration, made by the orchestrator
// and shared by every process, so a producer's and a consumer's stamps are on
// the same scale. Without it (or with --clock monotonic) clock_gettime is read.
struct ClockCalibration {
  std::uint64_t tsc0 = 0;
  std::uint64_t mono0 = 0;
  double ns_per_tick = 0;  // 0: use clock_gettime
};

inline std::uint64_t mono_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
}

class Clock {
 public:
  void use(const ClockCalibration& c) noexcept { cal_ = c; }
  std::uint64_t now() const noexcept {
    if (cal_.ns_per_tick == 0) return mono_ns();
    const auto d = static_cast<std::int64_t>(__rdtsc() - cal_.tsc0);
    return cal_.mono0 + static_cast<std::uint64_t>(static_cast<double>(d) * cal_.ns_per_tick);
  }
  // Measures the TSC against CLOCK_MONOTONIC for `ms` milliseconds.
  static ClockCalibration calibrate(bool want_tsc, int ms = 50);

 private:
  ClockCalibration cal_{};
};

// Seconds of CPU this process used (user, system), from getrusage.
struct CpuTimes {
  std::uint64_t user_ns = 0;
  std::uint64_t sys_ns = 0;
};
inline CpuTimes cpu_times() noexcept {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const timeval& tv) {
    return std::uint64_t(tv.tv_sec) * 1'000'000'000u + std::uint64_t(tv.tv_usec) * 1000u;
  };
  return {ns(ru.ru_utime), ns(ru.ru_stime)};
}

// ------------------------------------------------------- latency histogram
//
// Log-linear buckets in the manner of HdrHistogram: values below 128 ns get a
// bucket each; above, every power-of-two range is split into 64 buckets
// (relative error < 1.6 %). Fixed size, no allocation, trivially copyable so a
// child can copy it into the control block; mergeable across consumers.
class Histogram {
 public:
  static constexpr int kSubBits = 6;
  static constexpr int kSub = 1 << kSubBits;  // 64
  static constexpr int kMaxMsb = 47;           // ~39 hours in ns; larger values clamp
  static constexpr int kBuckets = 2 * kSub + (kMaxMsb - kSubBits) * kSub;

  void record(std::uint64_t v) noexcept {
    ++counts_[index(v)];
    ++total_;
    max_ = std::max(max_, v);
    min_ = total_ == 1 ? v : std::min(min_, v);
  }
  void merge(const Histogram& o) noexcept {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    if (o.total_ != 0) {
      min_ = total_ == 0 ? o.min_ : std::min(min_, o.min_);
      max_ = std::max(max_, o.max_);
    }
    total_ += o.total_;
  }
  void clear() noexcept { *this = Histogram{}; }
  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  std::uint64_t min() const noexcept { return min_; }

  // The value at quantile q (0..1): the middle of the bucket holding the
  // ceil(q * count)-th smallest sample, never above the recorded maximum.
  std::uint64_t quantile(double q) const noexcept {
    if (total_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_) + 0.999999);
    rank = std::clamp<std::uint64_t>(rank, 1, total_);
    std::uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(mid(i), max_);
    }
    return max_;
  }

  static int index(std::uint64_t v) noexcept {
    if (v < 2 * kSub) return static_cast<int>(v);
    int msb = 63 - std::countl_zero(v);
    if (msb > kMaxMsb) return kBuckets - 1;
    const int shift = msb - kSubBits;
    return 2 * kSub + (msb - kSubBits - 1) * kSub + static_cast<int>((v >> shift) & (kSub - 1));
  }
  static std::uint64_t lower(int i) noexcept {
    if (i < 2 * kSub) return static_cast<std::uint64_t>(i);
    const int msb = (i - 2 * kSub) / kSub + kSubBits + 1;
    const std::uint64_t sub = static_cast<std::uint64_t>((i - 2 * kSub) % kSub);
    return (std::uint64_t{1} << msb) | (sub << (msb - kSubBits));
  }
  static std::uint64_t mid(int i) noexcept {
    if (i < 2 * kSub) return static_cast<std::uint64_t>(i);
    const int msb = (i - 2 * kSub) / kSub + kSubBits + 1;
    return lower(i) + (std::uint64_t{1} << (msb - kSubBits)) / 2;
  }

 private:
  std::uint64_t counts_[kBuckets] = {};
  std::uint64_t total_ = 0;
  std::uint64_t min_ = 0;
  std::uint64_t max_ = 0;
};
static_assert(std::is_trivially_copyable_v<Histogram>);

// ----------------------------------------------------------- the message
//
// Every message of every transport starts with this header; the rest of the
// `size` bytes is a fixed filler pattern. `send_ns` is the send time on the
// shared clock — in fixed-rate mode the INTENDED send time, so a stalled
// producer cannot hide the delay it causes (coordinated omission).
struct MsgHeader {
  std::uint64_t seq;
  std::uint64_t send_ns;
};
inline constexpr std::size_t kMinMsgSize = sizeof(MsgHeader);
// Marks a message that is not part of the run (ZeroMQ's join handshake).
inline constexpr std::uint64_t kWarmupSeq = ~std::uint64_t{0};

// ------------------------------------------------------------ the run
// `ring` is the reference (transport_ring.cpp), not a library: the ceiling
// the others are measured against.
// `bridge` (bus -> shmbus-bridge serve -> TCP subscriber) and `tcp` (a plain
// loopback socket, what the bridge is judged by) are not in the default list.
enum class Transport : std::uint32_t { shmbus, bipc, uds, pipe, zmq, ring, bridge, tcp };
inline constexpr Transport kAllTransports[] = {
    Transport::ring, Transport::shmbus, Transport::bipc,   Transport::uds,
    Transport::pipe, Transport::zmq,    Transport::bridge, Transport::tcp};
const char* name_of(Transport t) noexcept;
const char* label_of(Transport t) noexcept;  // for the table
bool has_broadcast(Transport t) noexcept;

// catchup: a backlog already on the transport (a bus holding every message,
// or the bytes ready to write) read from start to end (bridge and tcp only).
enum class Mode : std::uint32_t { full, rate, pingpong, idle, catchup };
const char* name_of(Mode m) noexcept;

enum class Role : std::uint32_t { producer, consumer };

inline constexpr int kMaxConsumers = 16;
inline constexpr int kMaxFds = 4 * kMaxConsumers;
inline constexpr int kMaxCpus = 1 + kMaxConsumers;  // --cpus: the producer's, then the consumers'
inline constexpr std::uint32_t kBatchMax = 256;     // messages per receive call in batch mode

// Everything a child needs to play its role; the orchestrator fills it in
// before spawning. Plain data only: it lives in the shared control block.
struct RunConfig {
  Transport transport = Transport::shmbus;
  Mode mode = Mode::full;
  std::uint32_t consumers = 1;
  std::uint32_t size = 128;           // bytes per message, header included
  std::uint64_t count = 1'000'000;    // messages (round trips in ping-pong)
  std::uint64_t warmup = 0;           // ping-pong round trips not recorded
  std::uint64_t rate = 0;             // msgs/s offered (Mode::rate)
  std::uint64_t idle_ns = 0;          // Mode::idle: how long the consumer waits
  std::uint64_t timeout_ns = 0;       // a child gives up after this long
  // shmbus
  std::uint32_t policy = 1;           // shmbus::Policy
  std::uint32_t wait_strategy = 2;    // shmbus::WaitStrategy
  std::int64_t spin_ns = -1;          // < 0: library default
  std::int64_t yield_ns = -1;
  std::uint64_t capacity = 0;         // records; 0: the library's default
  std::uint32_t lib_timestamps = 0;   // ProducerOptions::timestamps: 0 off, 1 coarse, 2 precise
  // Full speed: every stamp_every-th message carries its send time (the
  // others 0), and consumers read the clock only for those. A clock read per
  // message costs 10-60 ns inside a store-heavy loop, depending on the CPU:
  // more than the transports being compared.
  std::uint32_t stamp_every = 64;
  // Messages a shmbus or ring consumer takes per receive call: 1 (shmbus:
  // Consumer::next()) or kBatchMax (Consumer::read_batch()).
  std::uint32_t recv_batch = 1;
  // Boost.Interprocess message_queue depth (messages)
  std::uint32_t queue_depth = 0;
  // Placement (--cpus): the producer on cpus[0], consumer i on
  // cpus[1 + i % (ncpus - 1)], or everyone on cpus[0] if ncpus == 1;
  // ncpus == 0: unpinned.
  std::int32_t cpus[kMaxCpus] = {};
  std::uint32_t ncpus = 0;
  // names of shared objects (bus, queues, ipc endpoint prefix)
  char name[96] = {};
  // bridge: the loopback port `shmbus-bridge serve` listens on
  std::uint32_t port = 0;
  // inherited descriptors: fds[2*i] / fds[2*i+1] as the transport defines
  std::int32_t fds[kMaxFds] = {};
  std::uint32_t nfds = 0;
};

struct alignas(64) RoleResult {
  std::atomic<std::uint32_t> done;  // set last, with release
  std::uint32_t ok;
  std::uint64_t received;           // messages received (or sent, producer)
  std::uint64_t bad;                // sequence errors (loss, duplicate, disorder)
  std::uint64_t first_bad_expected;
  std::uint64_t first_bad_got;
  std::uint64_t start_ns;           // producer: first send; consumer: go
  std::uint64_t first_ns;           // first message
  std::uint64_t last_ns;            // last message
  std::uint64_t cpu_user_ns;        // over the measured interval
  std::uint64_t cpu_sys_ns;
  std::uint64_t wall_ns;            // the interval the CPU figures cover
  char error[160];
  Histogram hist;                   // one-way latency, ns
};

struct Control {
  RunConfig cfg;
  ClockCalibration clock;
  std::atomic<std::uint32_t> ready;   // consumers set up and attached
  std::atomic<std::uint32_t> joined;  // ZeroMQ: subscribers that saw the handshake
  std::atomic<std::uint32_t> abort;   // the orchestrator gave up
  std::atomic<std::uint64_t> go_ns;   // producer's start, 0 until it starts
  RoleResult producer;
  RoleResult consumer[kMaxConsumers];
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// What the bus's own counters (in the segment) said after a shmbus run.
struct ShmbusCounters {
  bool valid = false;
  std::uint64_t published = 0;
  std::uint64_t producer_waits = 0;    // times the producer found the ring full
  std::uint64_t producer_wait_ns = 0;
  std::uint64_t wakeups = 0;           // futex wake calls (data and space)
};

// Copies a message-style error into a result (truncating).
inline void set_error(RoleResult& r, const char* what) noexcept {
  const std::size_t n = std::min(std::strlen(what), sizeof r.error - 1);
  std::memcpy(r.error, what, n);
  r.error[n] = '\0';
}

}  // namespace bench
