// Threaded stress in one process: a producer thread and consumer threads on
// one bus, every message checked. Cross-process runs are in tests/multiprocess.
#include <atomic>
#include <cstdio>
#include <thread>

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace shmbus::test {
namespace {

// Every byte of message `seq`'s payload is (seq & 0xff); the length varies.
std::size_t fill(std::uint64_t seq, std::byte* out, std::size_t max) {
  const std::size_t len = 8 + static_cast<std::size_t>(seq % (max - 7));
  std::memset(out, static_cast<int>(seq & 0xff), len);
  std::memcpy(out, &seq, 8);
  return len;
}

bool intact(const Message& m, std::size_t max) {
  if (m.payload.size() != 8 + m.seq % (max - 7)) return false;
  std::uint64_t s = 0;
  std::memcpy(&s, m.payload.data(), 8);
  if (s != m.seq) return false;
  for (std::size_t i = 8; i < m.payload.size(); ++i)
    if (m.payload[i] != static_cast<std::byte>(m.seq & 0xff)) return false;
  return true;
}

struct Tally {
  std::uint64_t delivered = 0, lost = 0, torn = 0, misordered = 0, last = 0;
};

Tally consume(Consumer& c, std::size_t max, std::atomic<std::uint64_t>& progress) {
  Tally t;
  std::uint64_t expected = 0;
  for (;;) {
    ReadResult r = c.next(10s);
    if (r.status == ReadStatus::end_of_stream || r.status == ReadStatus::timeout) break;
    if (r.status == ReadStatus::lost) {
      t.lost += r.lost;
      expected += r.lost;
      continue;
    }
    if (r.status != ReadStatus::message) {
      ++t.torn;
      continue;
    }
    if (r.message.seq != expected) ++t.misordered;
    if (!intact(r.message, max)) ++t.torn;
    expected = r.message.seq + 1;
    t.last = r.message.seq;
    ++t.delivered;
    progress.store(t.delivered, std::memory_order_relaxed);
  }
  return t;
}

class ThreadedStress : public ::testing::TestWithParam<std::tuple<Policy, WaitStrategy>> {};

TEST_P(ThreadedStress, EveryMessageArrivesIntactInOrderOrIsCountedLost) {
  const auto [policy, strategy] = GetParam();
  constexpr std::uint64_t kTotal = 200000;
  ScopedName name("stress");
  BusOptions o;
  o.capacity = 16;  // tiny: the producer laps or waits constantly
  o.record_size = 128;
  o.policy = policy;
  Bus bus = Bus::create(name, o);
  const std::size_t max = bus.info().max_payload;
  ConsumerOptions co;
  co.wait.strategy = strategy;
  Consumer c1(bus, co), c2(bus, co);
  Tally t1, t2;
  std::atomic<std::uint64_t> d1{0}, d2{0};
  std::thread r1([&] { t1 = consume(c1, max, d1); });
  std::thread r2([&] { t2 = consume(c2, max, d2); });
  ProducerOptions po;
  po.wait.strategy = strategy;
  Producer p(bus, po);
  std::byte buf[256];
  // `block`: exactly kTotal. `overwrite` never waits, so keep publishing
  // until both readers have read kTotal/10 messages while being lapped (or
  // 20 s pass) to exercise torn-read detection.
  std::uint64_t published = 0;
  std::uint64_t total = kTotal;
  const auto deadline = Clock::now() + 20s;
  for (; published < total; ++published) {
    const std::size_t n = fill(published, buf, max);
    if (!p.publish(std::span<const std::byte>(buf, n), 10s)) break;
    if (policy == Policy::overwrite) {
      // Let the readers run now and then (2 cores, 3 threads), so they are
      // lapped in the middle of reads rather than starved.
      if (published % 64 == 0) std::this_thread::yield();
      if (published + 1 == total && (d1.load() < kTotal / 10 || d2.load() < kTotal / 10) &&
          Clock::now() < deadline)
        total += kTotal;
    }
  }
  p.close();  // also ends the readers' loops if publishing failed
  r1.join();
  r2.join();
  ASSERT_EQ(published, total) << "publish failed";
  std::printf("[ info     ] published %llu; readers delivered %llu and %llu, lost %llu and %llu\n",
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(t1.delivered),
              static_cast<unsigned long long>(t2.delivered), static_cast<unsigned long long>(t1.lost),
              static_cast<unsigned long long>(t2.lost));
  for (const Tally& t : {t1, t2}) {
    EXPECT_EQ(t.torn, 0u) << "torn or corrupt messages were delivered";
    EXPECT_EQ(t.misordered, 0u) << "a gap without a lost report, or a repeat";
    EXPECT_EQ(t.delivered + t.lost, total);
    EXPECT_EQ(t.last, total - 1);
    if (policy == Policy::block) {
      EXPECT_EQ(t.lost, 0u);
    }
  }
  EXPECT_EQ(c1.lost(), t1.lost);
  EXPECT_EQ(c2.delivered(), t2.delivered);
}

INSTANTIATE_TEST_SUITE_P(
    , ThreadedStress,
    ::testing::Combine(::testing::Values(Policy::block, Policy::overwrite),
                       ::testing::Values(WaitStrategy::adaptive, WaitStrategy::spin_yield)),
    [](const auto& p) {
      return std::string(to_string(std::get<0>(p.param))) + "_" +
             (std::get<1>(p.param) == WaitStrategy::adaptive ? "adaptive" : "spin_yield");
    });

}  // namespace
}  // namespace shmbus::test
