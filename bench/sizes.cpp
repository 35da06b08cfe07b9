// shmbus-bench — the size axis (sizes.hpp says what is measured).
//
// The roles are forked from the orchestrator without exec (it runs no other
// thread) and leave their results in one shared anonymous mapping.
#include "sizes.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shmbus/shmbus.hpp"

namespace bench {

namespace {

constexpr std::uint32_t kRecordHeader = 24;  // shmbus's record header (layout.hpp)

// What the children of one run leave for the orchestrator.
struct Shared {
  std::uint64_t start_ns = 0;  // producer: just before its first claim()
  std::uint64_t end_ns = 0;    // consumer: after its last message
  std::uint64_t bytes = 0;     // memcpy: bytes copied
  std::uint64_t elapsed_ns = 0;
  std::uint64_t sink = 0;      // sums, so that no read is optimised away
  char error[256] = {};
  std::uint64_t samples[1];    // ping-pong: one-way ns per round trip (more follow)
};

class SharedBlock {
 public:
  explicit SharedBlock(std::uint64_t samples) {
    size_ = sizeof(Shared) + samples * sizeof(std::uint64_t);
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    s_ = new (p) Shared{};
  }
  ~SharedBlock() { munmap(s_, size_); }
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  Shared* get() const noexcept { return s_; }

 private:
  Shared* s_ = nullptr;
  std::size_t size_ = 0;
};

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu) + ": " + std::strerror(errno));
}

// Runs fn() in a child process; its exception becomes the run's error.
template <class Fn>
pid_t fork_role(Shared* sh, Fn&& fn) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    int rc = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::snprintf(sh->error, sizeof sh->error, "%s", e.what());
      rc = 1;
    }
    _exit(rc);
  }
  return pid;
}

// Waits for every child; past the deadline kills them all. Returns the
// error of the run ("" when every child exited 0).
std::string wait_all(const std::vector<pid_t>& pids, Shared* sh, double timeout_s) {
  const std::uint64_t deadline = mono_ns() + static_cast<std::uint64_t>(timeout_s * 1e9);
  std::vector<bool> done(pids.size(), false);
  std::string err;
  for (std::size_t left = pids.size(); left > 0;) {
    bool reaped = false;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      const pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        done[i] = true;
        --left;
        reaped = true;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && err.empty())
          err = sh->error[0] ? std::string(sh->error) : "a role failed (status " + std::to_string(status) + ")";
      }
    }
    if (left == 0) break;
    if (interrupted() || mono_ns() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) waitpid(pids[i], nullptr, 0);
      return interrupted() ? "interrupted" : "timed out";
    }
    if (!reaped) {
      timespec ts{0, 1'000'000};
      nanosleep(&ts, nullptr);
    }
  }
  return err;
}

// The options of the bus for `size`-byte messages: the library's defaults
// (or --capacity), with a larger ring only where their max message is
// smaller than `size`.
shmbus::BusOptions bus_options(std::uint64_t size, std::uint64_t capacity) {
  shmbus::BusOptions b;
  b.max_readers = 4;
  b.capacity = capacity;
  const std::uint64_t cap = capacity ? capacity : shmbus::default_capacity_for(b.record_size);
  const std::uint64_t records = (size + kRecordHeader + b.record_size - 1) / b.record_size;
  if (cap / 2 < records) b.capacity = std::bit_ceil(2 * records);
  return b;
}

std::uint64_t ring_bytes(const shmbus::BusOptions& b) {
  return (b.capacity ? b.capacity : shmbus::default_capacity_for(b.record_size)) * b.record_size;
}

void remove_bus(const std::string& name) {
  try {
    shmbus::Bus::remove(name);
  } catch (const std::exception&) {
  }
}

// Sums the 8-byte words of p (and the tail): reads every byte.
std::uint64_t sum_words(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t a = 0, b = 0, c = 0, d = 0;
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p + i, 32);
    a += w[0];
    b += w[1];
    c += w[2];
    d += w[3];
  }
  for (; i < n; ++i) a += std::to_integer<std::uint64_t>(p[i]);
  return a + b + c + d;
}

struct Placement {
  int producer = -1;
  int consumer = -1;
};

Placement placement(const Options& o) {
  Placement p;
  if (!o.cpus.empty()) {
    p.producer = o.cpus[0];
    p.consumer = o.cpus.size() > 1 ? o.cpus[1] : o.cpus[0];
  }
  return p;
}

std::uint64_t messages_for(const Options& o, std::uint64_t size) {
  return std::clamp<std::uint64_t>(o.size_bytes / size, 64, o.count);
}

// One core copying `size`-byte messages between two regions as large as
// the ring: bytes per second.
double run_memcpy(const Options& o, std::uint64_t size, const Placement& pl, std::string& err) {
  SharedBlock block(0);
  Shared* sh = block.get();
  const std::uint64_t region = std::max<std::uint64_t>(ring_bytes(bus_options(size, o.capacity)), 2 * size);
  const std::uint64_t n = messages_for(o, size);
  const pid_t pid = fork_role(sh, [&] {
    pin(pl.consumer);
    const std::uint64_t slots = region / size;
    auto* src = static_cast<std::byte*>(std::aligned_alloc(4096, slots * size));
    auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, slots * size));
    if (!src || !dst) throw std::runtime_error("cannot allocate the memcpy regions");
    for (std::uint64_t i = 0; i < slots * size; ++i) src[i] = std::byte(i * 7 + 1);
    std::memset(dst, 0, slots * size);
    const std::uint64_t t0 = mono_ns();
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t off = (i % slots) * size;
      std::memcpy(dst + off, src + off, size);
      asm volatile("" : : "r"(dst + off) : "memory");  // the copy is used
    }
    sh->elapsed_ns = mono_ns() - t0;
    sh->bytes = n * size;
    sh->sink = std::to_integer<std::uint64_t>(dst[size - 1]);
    std::free(src);
    std::free(dst);
  });
  err = wait_all({pid}, sh, o.timeout_s);
  if (!err.empty() || sh->elapsed_ns == 0) return 0;
  return static_cast<double>(sh->bytes) * 1e9 / static_cast<double>(sh->elapsed_ns);
}

std::string bus_name(const char* what, int serial) {
  return "bench-sizes-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(serial);
}

shmbus::ConsumerOptions reader_options(const char* name) {
  shmbus::ConsumerOptions c;
  c.name = name;
  c.start = shmbus::Start::earliest;
  return c;
}

shmbus::ProducerOptions writer_options(const Options& o) {
  shmbus::ProducerOptions p;
  p.wait_for_readers = 1;
  p.wait_for_readers_timeout = std::chrono::nanoseconds(static_cast<std::int64_t>(o.timeout_s * 1e9));
  return p;
}

const std::chrono::seconds kReadTimeout{10};

[[noreturn]] void unexpected(const shmbus::ReadResult& r, std::uint64_t want) {
  throw std::runtime_error(std::string("expected message ") + std::to_string(want) + ", got " +
                           shmbus::to_string(r.status));
}

// 1 → 1 at full speed: bytes per second.
double run_throughput(const Options& o, std::uint64_t size, const Placement& pl, int serial, std::string& err) {
  SharedBlock block(0);
  Shared* sh = block.get();
  const std::string name = bus_name("full", serial);
  remove_bus(name);
  shmbus::Bus::create(name, bus_options(size, o.capacity));
  const std::uint64_t n = messages_for(o, size);
  const pid_t consumer = fork_role(sh, [&] {
    pin(pl.consumer);
    shmbus::Consumer c(shmbus::Bus::open(name), reader_options("sizes"));
    std::uint64_t sum = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const shmbus::ReadResult r = c.next(kReadTimeout);
      if (r.status != shmbus::ReadStatus::message) unexpected(r, i);
      const auto p = r.message.payload;
      std::uint64_t seq = 0;
      if (p.size() != size) throw std::runtime_error("message " + std::to_string(i) + " has the wrong size");
      std::memcpy(&seq, p.data(), sizeof seq);
      if (seq != i) throw std::runtime_error("message " + std::to_string(i) + " carries " + std::to_string(seq));
      sum += sum_words(p.data(), p.size());
    }
    sh->end_ns = mono_ns();
    sh->sink = sum;
  });
  const pid_t producer = fork_role(sh, [&] {
    pin(pl.producer);
    shmbus::Producer p(shmbus::Bus::open(name), writer_options(o));
    std::vector<std::byte> src(size);
    for (std::size_t i = 0; i < size; ++i) src[i] = std::byte(i * 7 + 1);
    sh->start_ns = mono_ns();
    for (std::uint64_t i = 0; i < n; ++i) {
      const shmbus::Claim cl = p.claim(size);
      if (!cl) throw std::runtime_error(std::string("claim: ") + shmbus::to_string(cl.status));
      std::memcpy(cl.data.data(), src.data(), size);
      std::memcpy(cl.data.data(), &i, sizeof i);
      p.commit();
    }
    p.close();
  });
  err = wait_all({consumer, producer}, sh, o.timeout_s);
  remove_bus(name);
  if (!err.empty() || sh->end_ns <= sh->start_ns) return 0;
  return static_cast<double>(n * size) * 1e9 / static_cast<double>(sh->end_ns - sh->start_ns);
}

struct Latency {
  double p50 = 0, p99 = 0;
};

// Ping-pong with claim()/commit() and in-place reads of the header only.
Latency run_handoff(const Options& o, std::uint64_t size, const Placement& pl, int serial, std::string& err) {
  const std::uint64_t count = o.pp_count, warmup = o.pp_warmup;
  SharedBlock block(count);
  Shared* sh = block.get();
  const std::string ping = bus_name("ping", serial), pong = bus_name("pong", serial);
  for (const auto& b : {ping, pong}) {
    remove_bus(b);
    shmbus::Bus::create(b, bus_options(size, o.capacity));
  }
  const pid_t ponger = fork_role(sh, [&] {
    pin(pl.consumer);
    shmbus::Consumer in(shmbus::Bus::open(ping), reader_options("ponger"));
    shmbus::Producer out(shmbus::Bus::open(pong), writer_options(o));
    for (std::uint64_t i = 0; i < warmup + count; ++i) {
      const shmbus::ReadResult r = in.next(kReadTimeout);
      if (r.status != shmbus::ReadStatus::message) unexpected(r, i);
      const shmbus::Claim cl = out.claim(size);
      if (!cl) throw std::runtime_error(std::string("claim: ") + shmbus::to_string(cl.status));
      std::memcpy(cl.data.data(), r.message.payload.data(), 16);
      out.commit();
    }
    out.close();
  });
  const pid_t pinger = fork_role(sh, [&] {
    pin(pl.producer);
    shmbus::Consumer in(shmbus::Bus::open(pong), reader_options("pinger"));
    shmbus::Producer out(shmbus::Bus::open(ping), writer_options(o));
    for (std::uint64_t i = 0; i < warmup + count; ++i) {
      const std::uint64_t t0 = mono_ns();
      const shmbus::Claim cl = out.claim(size);
      if (!cl) throw std::runtime_error(std::string("claim: ") + shmbus::to_string(cl.status));
      const std::uint64_t header[2] = {i, t0};
      std::memcpy(cl.data.data(), header, sizeof header);
      out.commit();
      const shmbus::ReadResult r = in.next(kReadTimeout);
      if (r.status != shmbus::ReadStatus::message) unexpected(r, i);
      std::uint64_t echo[2];
      std::memcpy(echo, r.message.payload.data(), sizeof echo);
      if (echo[0] != i || r.message.payload.size() != size)
        throw std::runtime_error("echo " + std::to_string(i) + " is not the message sent");
      if (i >= warmup) sh->samples[i - warmup] = (mono_ns() - t0) / 2;
    }
    out.close();
  });
  err = wait_all({ponger, pinger}, sh, o.timeout_s);
  remove_bus(ping);
  remove_bus(pong);
  if (!err.empty() || count == 0) return {};
  std::vector<std::uint64_t> v(sh->samples, sh->samples + count);
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return static_cast<double>(v[std::min<std::size_t>(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))]); };
  return {at(0.50), at(0.99)};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

std::string human_size(std::uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

struct SizeRow {
  std::uint64_t size = 0;
  std::vector<double> memcpy_bps, shmbus_bps, ratio, p50, p99;  // ratio: shmbus ÷ memcpy, per round
  std::string error;
};

}  // namespace

nlohmann::json run_sizes(const Options& o) {
  for (auto s : o.size_axis)
    if (s < 16 || s > (std::uint64_t{1} << 30)) throw Usage("--size-axis: sizes must be 16 B .. 1 GiB");
  if (o.pp_count < 1) throw Usage("--pp-count must be >= 1");
  const Placement pl = placement(o);
  std::vector<SizeRow> rows;
  for (auto s : o.size_axis) rows.push_back(SizeRow{s, {}, {}, {}, {}, {}, {}});
  const std::size_t total = rows.size() * static_cast<std::size_t>(o.runs);
  std::size_t done = 0;
  int serial = 0;
  for (int k = 0; k < o.runs; ++k) {
    for (auto& row : rows) {
      std::fprintf(stderr, "[sizes %zu/%zu] %s, round %d\n", ++done, total, human_size(row.size).c_str(), k + 1);
      std::string err;
      const double mc = run_memcpy(o, row.size, pl, err);
      if (err.empty()) row.memcpy_bps.push_back(mc);
      const double tp = err.empty() ? run_throughput(o, row.size, pl, serial++, err) : 0;
      if (err.empty()) {
        row.shmbus_bps.push_back(tp);
        row.ratio.push_back(mc > 0 ? tp / mc : 0);
      }
      const Latency lat = err.empty() ? run_handoff(o, row.size, pl, serial++, err) : Latency{};
      if (err.empty()) {
        row.p50.push_back(lat.p50);
        row.p99.push_back(lat.p99);
      }
      if (interrupted()) throw std::runtime_error("interrupted");
      if (!err.empty() && row.error.empty()) row.error = err;
      if (!err.empty()) std::fprintf(stderr, "  FAILED: %s\n", err.c_str());
    }
  }

  // The hand-off reference: 128 B if measured, else the smallest size.
  const SizeRow* ref = &rows.front();
  for (const auto& r : rows)
    if (r.size == 128 || (ref->size != 128 && r.size < ref->size)) ref = &r;
  const double ref_p50 = median(ref->p50);

  shmbus::BusOptions defaults;
  defaults.capacity = o.capacity;
  std::printf("\n### By message size (1 → 1, `block`, %s bus: %u-byte records, %s ring)\n\n",
              o.capacity ? "a" : "the library's default", defaults.record_size,
              human_size(ring_bytes(defaults)).c_str());
  std::printf("Medians of %d runs (÷ memcpy: of the ratios within each round). memcpy: one core copying the same messages between two regions as large as "
              "the ring. shmbus: claim(), write every byte, commit(); next() in place, read every byte. "
              "Hand-off: ping-pong with claim()/commit() and in-place reads of a 16-byte header, one-way.\n\n",
              o.runs);
  std::printf("| size | records | ring | memcpy GB/s | shmbus GB/s | shmbus msgs/s | ÷ memcpy | hand-off p50 ns | "
              "p99 ns | p50 ÷ %s |\n",
              human_size(ref->size).c_str());
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    const shmbus::BusOptions b = bus_options(r.size, o.capacity);
    const std::uint64_t records = (r.size + kRecordHeader + b.record_size - 1) / b.record_size;
    const double mc = median(r.memcpy_bps), tp = median(r.shmbus_bps), ratio = median(r.ratio);
    const double p50 = median(r.p50), p99 = median(r.p99);
    if (!r.error.empty()) {
      std::printf("| %s | %" PRIu64 " | %s | FAILED: %s |||||||\n", human_size(r.size).c_str(), records,
                  human_size(ring_bytes(b)).c_str(), r.error.c_str());
    } else {
      std::printf("| %s | %" PRIu64 " | %s | %.2f | %.2f | %.3g | %.2f | %.0f | %.0f | %.2f |\n",
                  human_size(r.size).c_str(), records, human_size(ring_bytes(b)).c_str(), mc / 1e9, tp / 1e9,
                  tp / static_cast<double>(r.size), ratio, p50, p99, ref_p50 > 0 ? p50 / ref_p50 : 0);
    }
    out.push_back({{"size", r.size},
                   {"records", records},
                   {"record_size", b.record_size},
                   {"ring_bytes", ring_bytes(b)},
                   {"memcpy_bytes_per_s", r.memcpy_bps},
                   {"shmbus_bytes_per_s", r.shmbus_bps},
                   {"handoff_p50_ns", r.p50},
                   {"handoff_p99_ns", r.p99},
                   {"shmbus_per_memcpy", r.ratio},
                   {"median", {{"memcpy_bytes_per_s", mc},
                               {"shmbus_per_memcpy", ratio},
                               {"shmbus_bytes_per_s", tp},
                               {"handoff_p50_ns", p50},
                               {"handoff_p99_ns", p99}}},
                   {"error", r.error}});
  }
  return out;
}

}  // namespace bench
