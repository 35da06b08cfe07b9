// shmbus-micro — Google Benchmark micro-benchmarks of shmbus's hot paths.
//
//   BM_Publish/RECORD          publish() copying a full record's payload, no reader
//   BM_Publish128/TS           publish() of a 128-byte message, ProducerOptions::timestamps
//                              off (0, the default) / coarse (1) / precise (2)
//   BM_ClaimCommit/RECORD      claim(), fill the payload in place, commit()
//   BM_ClaimCommitOverwrite/RECORD
//                              the same on an `overwrite` bus (also in place: see
//                              Producer::claim() on the race with a lapped reader)
//   BM_ConsumerNext/RECORD     Consumer::next() of messages already published
//   BM_PublishOverwrite/RECORD, BM_ConsumerNextOverwrite/RECORD
//                              the same on an `overwrite` bus: the producer stores
//                              and the consumer copies (then re-checks) the payload
//                              word by word, the seqlock's cost
//   BM_ConsumerPoll/BATCH      Consumer::poll() with a batch size of BATCH
//   BM_PublishWake/SLEEPER     publish() of 128 bytes with no reader (0) or with a
//                              reader thread asleep on the bus's futex (1): the
//                              second pays for the futex wake-up system call
//   BM_PublishBurstToSleeper/N/SAME_CPU  N publishes that find a reader asleep (default
//                              adaptive wait): time per message, and the futex
//                              wake calls per burst (counter wakes/burst; 1 is ideal)
//   BM_ConsumerAttachDetach    a Consumer attached and detached (its own open file
//                              description and slot lock, bus of 16 reader slots)
//   BM_ProducerAttachDetach    the producer role taken and let go (its lock)
//   BM_LiveReaders/N           Producer::live_readers() with N readers attached: one
//                              lock test (F_OFD_GETLK) per active slot, what a blocked
//                              producer pays per reader every 50 ms
//
// Every bus is a real segment in /dev/shm (removed at exit), `block` policy
// unless the name says `Overwrite`.
// RECORD is the record size in bytes (64 .. 4096); the payload fills it.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shmbus/shmbus.hpp"

namespace {

using namespace std::chrono_literals;

std::string bus_name(const char* what) {
  static std::atomic<int> serial{0};
  return "shmbus-micro-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(serial++);
}

// A bus that removes its segment when the benchmark ends.
struct TempBus {
  TempBus(const char* what, std::uint32_t record_size, std::uint64_t capacity = 65536,
          shmbus::Policy policy = shmbus::Policy::block)
      : name(bus_name(what)) {
    shmbus::BusOptions o;
    o.record_size = record_size;
    o.capacity = capacity;
    o.policy = policy;
    bus = shmbus::Bus::create(name, o);
  }
  ~TempBus() { shmbus::Bus::remove(name); }
  TempBus(const TempBus&) = delete;
  TempBus& operator=(const TempBus&) = delete;
  std::string name;
  std::optional<shmbus::Bus> bus;
};

std::uint32_t record_for_payload(std::uint32_t payload) { return shmbus::record_size_for(payload); }

void record_sizes(benchmark::internal::Benchmark* b) {
  for (int r = 64; r <= 4096; r *= 2) b->Arg(r);
}

void publish_full_records(benchmark::State& state, shmbus::Policy policy) {
  const auto record = static_cast<std::uint32_t>(state.range(0));
  TempBus tb("publish", record, 65536, policy);
  shmbus::Producer p(*tb.bus);
  std::vector<std::byte> msg(shmbus::max_payload_for(record), std::byte{0x5a});
  for (auto _ : state) {
    auto r = p.publish(msg);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(msg.size()));
}
void BM_Publish(benchmark::State& state) { publish_full_records(state, shmbus::Policy::block); }
BENCHMARK(BM_Publish)->Apply(record_sizes);
void BM_PublishOverwrite(benchmark::State& state) { publish_full_records(state, shmbus::Policy::overwrite); }
BENCHMARK(BM_PublishOverwrite)->Apply(record_sizes);

void BM_Publish128(benchmark::State& state) {
  TempBus tb("publish128", record_for_payload(128));
  shmbus::ProducerOptions po;
  po.timestamps = static_cast<shmbus::Timestamps>(state.range(0));
  shmbus::Producer p(*tb.bus, po);
  std::vector<std::byte> msg(128, std::byte{0x5a});
  for (auto _ : state) {
    auto r = p.publish(msg);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations());
  static constexpr const char* kLabels[] = {"timestamps off (default)", "timestamps coarse",
                                            "timestamps precise"};
  state.SetLabel(kLabels[state.range(0)]);
}
BENCHMARK(BM_Publish128)->Arg(0)->Arg(1)->Arg(2);

void claim_commit(benchmark::State& state, shmbus::Policy policy) {
  const auto record = static_cast<std::uint32_t>(state.range(0));
  TempBus tb("claim", record, 65536, policy);
  shmbus::Producer p(*tb.bus);
  const std::size_t size = shmbus::max_payload_for(record);
  std::vector<std::byte> src(size, std::byte{0x3c});
  for (auto _ : state) {
    shmbus::Claim c = p.claim(size);
    std::memcpy(c.data.data(), src.data(), size);
    p.commit();
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size));
}
void BM_ClaimCommit(benchmark::State& state) { claim_commit(state, shmbus::Policy::block); }
BENCHMARK(BM_ClaimCommit)->Apply(record_sizes);
void BM_ClaimCommitOverwrite(benchmark::State& state) { claim_commit(state, shmbus::Policy::overwrite); }
BENCHMARK(BM_ClaimCommitOverwrite)->Apply(record_sizes);

// Consumer cost per message: publish a batch (untimed), read it (timed).
constexpr int kBatch = 4096;

void consumer_next(benchmark::State& state, shmbus::Policy policy) {
  const auto record = static_cast<std::uint32_t>(state.range(0));
  TempBus tb("next", record, 2 * kBatch, policy);
  shmbus::Consumer c(*tb.bus);
  shmbus::Producer p(*tb.bus);
  std::vector<std::byte> msg(shmbus::max_payload_for(record), std::byte{0x11});
  std::uint64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) (void)p.publish(msg);
    state.ResumeTiming();
    for (int i = 0; i < kBatch; ++i) {
      const auto r = c.next(0ns);
      sum += static_cast<std::uint64_t>(r.message.payload[0]);
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns/msg"] = benchmark::Counter(static_cast<double>(state.iterations() * kBatch),
                                                benchmark::Counter::kIsRate |
                                                    benchmark::Counter::kInvert);
}
void BM_ConsumerNext(benchmark::State& state) { consumer_next(state, shmbus::Policy::block); }
BENCHMARK(BM_ConsumerNext)->Apply(record_sizes);
void BM_ConsumerNextOverwrite(benchmark::State& state) { consumer_next(state, shmbus::Policy::overwrite); }
BENCHMARK(BM_ConsumerNextOverwrite)->Apply(record_sizes);

void BM_ConsumerPoll(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  TempBus tb("poll", record_for_payload(128), 2 * kBatch);
  shmbus::Consumer c(*tb.bus);
  shmbus::Producer p(*tb.bus);
  std::vector<std::byte> msg(128, std::byte{0x22});
  std::uint64_t sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (int i = 0; i < kBatch; ++i) (void)p.publish(msg);
    state.ResumeTiming();
    std::size_t got = 0;
    while (got < kBatch) {
      got += c.poll([&](const shmbus::Message& m) { sum += static_cast<std::uint64_t>(m.payload[1]); },
                    batch)
                 .count;
    }
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns/msg"] = benchmark::Counter(static_cast<double>(state.iterations() * kBatch),
                                                benchmark::Counter::kIsRate |
                                                    benchmark::Counter::kInvert);
}
BENCHMARK(BM_ConsumerPoll)->Arg(1)->Arg(16)->Arg(64)->Arg(256);

// publish() with a reader asleep on the data futex (arg 1) or no reader (arg
// 0). Timed manually around the publish alone; between iterations the loop
// waits, untimed, until the reader has drained the message and is asleep
// again, so every timed publish finds a sleeper and must wake it.
void BM_PublishWake(benchmark::State& state) {
  const bool sleeper = state.range(0) != 0;
  TempBus tb("wake", record_for_payload(128), 1024);
  shmbus::Producer p(*tb.bus);
  std::vector<std::byte> msg(128, std::byte{0x33});
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seen{0};
  std::thread reader;
  std::optional<shmbus::Inspector> insp;
  if (sleeper) {
    insp.emplace(shmbus::Inspector::open(tb.name));
    shmbus::ConsumerOptions co;
    co.wait.strategy = shmbus::WaitStrategy::adaptive;
    co.wait.spin_time = 0ns;  // straight to the futex
    co.wait.yield_time = 0ns;
    auto c = std::make_shared<shmbus::Consumer>(*tb.bus, co);
    reader = std::thread([c, &stop, &seen] {
      while (!stop.load(std::memory_order_relaxed)) {
        const auto r = c->next(50ms);
        if (r.status == shmbus::ReadStatus::message) seen.fetch_add(1, std::memory_order_release);
      }
    });
  }
  auto asleep = [&] {
    for (;;) {
      const auto s = insp->snapshot();
      if (s.counters.data_sleepers > 0) return;
      std::this_thread::yield();
    }
  };
  std::uint64_t published = 0;
  for (auto _ : state) {
    if (sleeper) {
      while (seen.load(std::memory_order_acquire) < published) std::this_thread::yield();
      asleep();
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = p.publish(msg);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(r);
    ++published;
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  stop = true;
  if (reader.joinable()) {
    p.close();
    reader.join();
  }
  state.SetLabel(sleeper ? "reader asleep on the futex" : "no reader");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PublishWake)->Arg(0)->Arg(1)->UseManualTime()->Iterations(20000);

// A burst of BURST publishes that finds a reader asleep: the first publish
// must wake it; the rest should not have to. Reports the futex wake calls the
// bus counted per burst (ideal: 1) and the producer's time per message.
// SAME_CPU=1 pins the producer and the reader to one CPU, as happens when
// there are more runnable processes than cores: the woken reader cannot run
// until the producer is preempted, and the producer keeps finding it "asleep".
void pin_to_cpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof set, &set);
}

void BM_PublishBurstToSleeper(benchmark::State& state) {
  const auto burst = static_cast<std::uint64_t>(state.range(0));
  const bool same_cpu = state.range(1) != 0;
  cpu_set_t saved;
  sched_getaffinity(0, sizeof saved, &saved);
  if (same_cpu) pin_to_cpu0();
  TempBus tb("burst", record_for_payload(128), 65536);
  shmbus::Producer p(*tb.bus);
  auto insp = shmbus::Inspector::open(tb.name);
  std::vector<std::byte> msg(128, std::byte{0x44});
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> seen{0};
  shmbus::ConsumerOptions co;  // the default adaptive wait
  auto c = std::make_shared<shmbus::Consumer>(*tb.bus, co);
  std::thread reader([c, &stop, &seen, same_cpu] {
    if (same_cpu) pin_to_cpu0();
    while (!stop.load(std::memory_order_relaxed)) {
      const auto r = c->poll([&](const shmbus::Message&) { seen.fetch_add(1, std::memory_order_release); },
                             256, 50ms);
      (void)r;
    }
  });
  std::uint64_t published = 0;
  std::uint64_t wakes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    while (seen.load(std::memory_order_acquire) < published) std::this_thread::yield();
    while (insp.snapshot().counters.data_sleepers == 0) std::this_thread::yield();
    const std::uint64_t w0 = insp.snapshot().counters.wakeups;
    state.ResumeTiming();
    for (std::uint64_t i = 0; i < burst; ++i) (void)p.publish(msg);
    state.PauseTiming();
    published += burst;
    wakes += insp.snapshot().counters.wakeups - w0;
    state.ResumeTiming();
  }
  stop = true;
  p.close();
  reader.join();
  sched_setaffinity(0, sizeof saved, &saved);
  state.SetLabel(same_cpu ? "producer and reader on one CPU" : "free CPU for the reader");
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(burst));
  state.counters["wakes/burst"] =
      static_cast<double>(wakes) / static_cast<double>(std::max<std::int64_t>(1, state.iterations()));
}
BENCHMARK(BM_PublishBurstToSleeper)->Args({1000, 0})->Args({1000, 1})->Iterations(200);

}  // namespace

void BM_ConsumerAttachDetach(benchmark::State& state) {
  TempBus tb("attach", 192, 1024);
  for (auto _ : state) {
    shmbus::Consumer c(*tb.bus);
    benchmark::DoNotOptimize(c.slot());
  }
}
BENCHMARK(BM_ConsumerAttachDetach);

void BM_ProducerAttachDetach(benchmark::State& state) {
  TempBus tb("role", 192, 1024);
  for (auto _ : state) {
    shmbus::Producer p(*tb.bus);
    p.detach();
  }
}
BENCHMARK(BM_ProducerAttachDetach);

void BM_LiveReaders(benchmark::State& state) {
  TempBus tb("live", 192, 1024);
  std::vector<std::unique_ptr<shmbus::Consumer>> readers;
  for (int i = 0; i < state.range(0); ++i) readers.push_back(std::make_unique<shmbus::Consumer>(*tb.bus));
  shmbus::Producer p(*tb.bus);
  for (auto _ : state) benchmark::DoNotOptimize(p.live_readers());
  state.counters["per_reader_ns"] = benchmark::Counter(
      static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_LiveReaders)->Arg(1)->Arg(16);

BENCHMARK_MAIN();
