// Placement (shmbus/placement.hpp) on plain numbers: which records a
// message takes, where it starts (padding the rest of a lap it would
// cross), what a jump between two messages means, and the size rule; then
// the same rule checked against what a producer really does on a bus.
#include <gtest/gtest.h>
#include <shmbus/placement.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;

TEST(Placement, RecordsForCountsTheHeaderOnce) {
  EXPECT_EQ(records_for(0, 64), 1u);
  EXPECT_EQ(records_for(40, 64), 1u);  // 64 - 24
  EXPECT_EQ(records_for(41, 64), 2u);
  EXPECT_EQ(records_for(104, 64), 2u);  // 2 * 64 - 24
  EXPECT_EQ(records_for(105, 64), 3u);
  EXPECT_EQ(records_for(1000, 128), 8u);  // 1024 - 24
  EXPECT_EQ(records_for(1001, 128), 9u);
}

TEST(Placement, AMessageThatWouldCrossTheEndOfTheRingStartsTheNextLap) {
  constexpr std::uint64_t cap = 8;
  EXPECT_EQ(place(0, 1, cap), 0u);
  EXPECT_EQ(place(5, 3, cap), 5u);   // 5, 6, 7: ends the lap exactly
  EXPECT_EQ(place(6, 3, cap), 8u);   // would take 6, 7, 8: padding at 6..7
  EXPECT_EQ(place(7, 2, cap), 8u);
  EXPECT_EQ(place(7, 1, cap), 7u);
  EXPECT_EQ(place(8, 4, cap), 8u);   // a lap's first record
  // Laps far on, and a jump of a whole lap less one.
  EXPECT_EQ(place(8 * 1000 + 7, 4, cap), 8u * 1001);
  EXPECT_EQ(place(8 * 1000 + 1, 4, cap), 8u * 1000 + 1);
  EXPECT_EQ(place(8 * 1000 + 5, 4, cap), 8u * 1001);
}

TEST(Placement, PaddingIsExactlyTheRestOfTheLapBeforeAMessageThatDidNotFit) {
  constexpr std::uint64_t cap = 8;
  EXPECT_TRUE(is_padding(6, 8, 3, cap));
  EXPECT_TRUE(is_padding(7, 8, 2, cap));
  EXPECT_FALSE(is_padding(6, 8, 2, cap)) << "two records fit at 6: the jump is a loss";
  EXPECT_FALSE(is_padding(5, 8, 3, cap)) << "three fit at 5";
  EXPECT_FALSE(is_padding(6, 9, 3, cap)) << "one sequence too many";
  EXPECT_FALSE(is_padding(6, 16, 3, cap)) << "a lap too many";
  EXPECT_FALSE(is_padding(8, 8, 1, cap)) << "no jump";
  EXPECT_FALSE(is_padding(6, 8, 3, 0)) << "no ring";
}

TEST(Placement, TheLongestMessageAndTheRingForIt) {
  EXPECT_EQ(max_message_for(2, 64), 40u);   // a span of one record
  EXPECT_EQ(max_message_for(8, 64), 232u);  // four records less a header
  EXPECT_EQ(max_message_for(16384, 128), (1u << 20) - 24);
  EXPECT_EQ(capacity_for(1u << 20, 128), 32768u);
  EXPECT_EQ(capacity_for((1u << 20) - 24, 128), 16384u);
  EXPECT_EQ(capacity_for(40, 64), 2u);
  EXPECT_EQ(capacity_for(41, 64), 4u);
  EXPECT_EQ(capacity_for(10, 64, 1024), 1024u) << "at least what was asked";
  EXPECT_EQ(capacity_for(max_message_limit + 1, 64), 0u);
  for (std::uint64_t cap = 2; cap <= (1u << 16); cap *= 2)
    EXPECT_LE(records_for(max_message_for(cap, 64), 64), cap / 2) << cap;
}

// A stream of messages from 1 byte to half the ring, placed by the rule:
// every message lies within one lap, and each jump between two is nothing
// or exactly the padding the rule predicts. Then the producer on a real bus
// gives every message the sequence the rule says.
TEST(Placement, TheRuleIsWhereTheProducerPutsEveryMessage) {
  constexpr std::uint64_t cap = 64;
  constexpr std::uint32_t rs = 64;
  std::mt19937_64 rng(20261129);
  std::vector<std::uint32_t> sizes;
  std::uniform_int_distribution<std::uint32_t> len(1, max_message_for(cap, rs));
  for (int i = 0; i < 2000; ++i) sizes.push_back(i % 3 == 0 ? 1 + i % 40 : len(rng));

  std::vector<std::uint64_t> expected;
  std::uint64_t next = 0;
  for (const std::uint32_t n : sizes) {
    const std::uint64_t k = records_for(n, rs);
    const std::uint64_t at = place(next, k, cap);
    ASSERT_EQ(at / cap, (at + k - 1) / cap) << "a message crosses the end of the ring";
    if (at != next) {
      ASSERT_TRUE(is_padding(next, at, k, cap));
    }
    expected.push_back(at);
    next = at + k;
  }

  ScopedName name("placement");
  BusOptions o;
  o.capacity = cap;
  o.record_size = rs;
  o.policy = Policy::overwrite;
  Bus bus = Bus::create(name, o);
  Producer p(bus);
  std::vector<std::byte> payload(max_message_for(cap, rs));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const PublishResult r = p.publish(std::span<const std::byte>(payload.data(), sizes[i]), 0ns);
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r.seq, expected[i]) << "message " << i << " of " << sizes[i] << " bytes";
  }
  EXPECT_EQ(p.next_seq(), next);
}

}  // namespace
}  // namespace shmbus::test
