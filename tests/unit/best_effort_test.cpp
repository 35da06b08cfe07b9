// Readers of different importance on one `block` bus: one that holds the
// producer (lossless) and a best-effort one (ConsumerOptions::hold_producer
// = false) that the producer never waits for, and that learns exactly what
// it missed.
#include <string>

#include <gtest/gtest.h>

#include "shmbus/inspect.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;

ConsumerOptions best_effort(std::string name) {
  ConsumerOptions o;
  o.name = std::move(name);
  o.hold_producer = false;
  return o;
}

TEST(BestEffort, TheProducerNeverWaitsForABestEffortReaderWhichLearnsItsExactLoss) {
  constexpr std::uint64_t kCap = 64, kTotal = 5 * kCap + 7;
  ScopedName name("best-effort");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer dashboard(bus, best_effort("dashboard"));
  Producer p(bus);
  // Nobody holds the producer: it never waits, however far the dashboard is behind.
  for (std::uint64_t i = 0; i < kTotal; ++i)
    ASSERT_TRUE(p.publish(bytes("m" + std::to_string(i)), 0ns)) << "the producer waited at " << i;
  const Snapshot s = Inspector::open(name).snapshot();
  ASSERT_EQ(s.readers.size(), 1u);
  EXPECT_TRUE(s.readers[0].best_effort);
  EXPECT_TRUE(Inspector::open(name).check().empty());

  ReadResult r = dashboard.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::lost);
  EXPECT_EQ(r.lost, kTotal - kCap) << "lapped: everything but the last ring is gone";
  for (std::uint64_t seq = kTotal - kCap; seq < kTotal; ++seq) {
    r = dashboard.next(0ns);
    ASSERT_EQ(r.status, ReadStatus::message) << "at " << seq;
    EXPECT_EQ(r.message.seq, seq);
    EXPECT_EQ(text(r.message.payload), "m" + std::to_string(seq));
  }
  EXPECT_EQ(dashboard.next(0ns).status, ReadStatus::timeout);
  EXPECT_EQ(dashboard.lost(), kTotal - kCap);
  EXPECT_EQ(dashboard.delivered(), kCap);
}

TEST(BestEffort, AReaderThatHoldsTheProducerStillHoldsItBesideABestEffortOne) {
  constexpr std::uint64_t kCap = 64;
  ScopedName name("best-effort-mixed");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer logger(bus);
  Consumer dashboard(bus, best_effort("dashboard"));
  Producer p(bus);
  std::uint64_t sent = 0;
  while (p.publish(bytes("m" + std::to_string(sent)), 0ns)) ++sent;
  EXPECT_EQ(sent, kCap) << "the logger holds the producer to one ring";
  // The logger reads everything, in order; the dashboard, never waited for,
  // is lapped as the producer goes on.
  std::uint64_t logged = 0;
  for (int round = 0; round < 4; ++round) {
    for (ReadResult r = logger.next(0ns); r.status == ReadStatus::message; r = logger.next(0ns)) {
      ASSERT_EQ(r.message.seq, logged);
      ASSERT_EQ(text(r.message.payload), "m" + std::to_string(logged));
      ++logged;
    }
    while (p.publish(bytes("m" + std::to_string(sent)), 0ns)) ++sent;
  }
  EXPECT_EQ(logged + kCap, sent);
  std::uint64_t seen = 0, lost = 0, next = 0;
  for (ReadResult r = dashboard.next(0ns); r.status != ReadStatus::timeout; r = dashboard.next(0ns)) {
    if (r.status == ReadStatus::lost) {
      lost += r.lost;
      next += r.lost;
      continue;
    }
    ASSERT_EQ(r.status, ReadStatus::message);
    ASSERT_EQ(r.message.seq, next) << "a gap the dashboard was not told of";
    ASSERT_EQ(text(r.message.payload), "m" + std::to_string(next));
    ++next;
    ++seen;
  }
  EXPECT_EQ(seen + lost, sent);
  EXPECT_GT(lost, 0u);
  EXPECT_EQ(logger.lost(), 0u);
}

TEST(BestEffort, OnAnOverwriteBusEveryReaderIsBestEffortAlready) {
  ScopedName name("best-effort-ow");
  BusOptions o = small_block(64);
  o.policy = Policy::overwrite;
  Bus bus = Bus::create(name, o);
  Consumer a(bus);
  Consumer b(bus, best_effort("b"));
  const Snapshot s = Inspector::open(name).snapshot();
  ASSERT_EQ(s.readers.size(), 2u);
  for (const ReaderView& r : s.readers) EXPECT_FALSE(r.best_effort) << "only a block bus tells them apart";
}

}  // namespace
}  // namespace shmbus::test
