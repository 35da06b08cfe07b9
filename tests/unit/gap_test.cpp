// Producer::skip_to: a bus that starts at a later sequence, and gaps that
// every reader crossing them counts as lost, in both policies, for readers
// already attached, late joiners, a takeover and the inspector.
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "shmbus/inspect.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

BusOptions opts(Policy policy, std::uint64_t capacity = 16) {
  BusOptions o;
  o.capacity = capacity;
  o.policy = policy;
  o.record_size = 64;
  o.max_readers = 4;
  return o;
}

void publish_seq(Producer& p, std::uint64_t seq) {
  const std::string m = "m" + std::to_string(seq);
  const PublishResult r = p.publish(bytes(m));
  ASSERT_EQ(r.status, PublishStatus::ok);
  ASSERT_EQ(r.seq, seq);
}

void expect_message(Consumer& c, std::uint64_t seq) {
  const ReadResult r = c.next(2s);
  ASSERT_EQ(r.status, ReadStatus::message) << "waiting for seq " << seq << ", got " << to_string(r.status);
  EXPECT_EQ(r.message.seq, seq);
  EXPECT_EQ(text(r.message.payload), "m" + std::to_string(seq));
}

void expect_lost(Consumer& c, std::uint64_t n) {
  const ReadResult r = c.next(2s);
  ASSERT_EQ(r.status, ReadStatus::lost) << "expected " << n << " lost, got " << to_string(r.status);
  EXPECT_EQ(r.lost, n);
}

// A reader crossing a gap while it is being written may report it in more
// than one step (a marker not yet committed counts as an overwrite); the
// total is exact. Reads until the message at `seq`.
void expect_lost_then(Consumer& c, std::uint64_t n, std::uint64_t seq) {
  std::uint64_t lost = 0;
  for (;;) {
    const ReadResult r = c.next(2s);
    if (r.status == ReadStatus::lost) {
      lost += r.lost;
      continue;
    }
    ASSERT_EQ(r.status, ReadStatus::message) << "waiting for seq " << seq << ", got " << to_string(r.status);
    EXPECT_EQ(r.message.seq, seq);
    break;
  }
  EXPECT_EQ(lost, n);
}

void expect_clean(const std::string& name) {
  const auto problems = Inspector::open(name).check();
  for (const Problem& p : problems) ADD_FAILURE() << p.where << ": " << p.what;
}

class Gaps : public ::testing::TestWithParam<Policy> {};

INSTANTIATE_TEST_SUITE_P(BothPolicies, Gaps, ::testing::Values(Policy::block, Policy::overwrite),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST_P(Gaps, AFreshBusStartsAtTheSequenceWithNothingLost) {
  for (const std::uint64_t start : {std::uint64_t{5}, std::uint64_t{1000}}) {  // within a ring, and far past it
    SCOPED_TRACE("start " + std::to_string(start));
    ScopedName name("gapstart");
    Bus bus = Bus::create(name, opts(GetParam()));
    Consumer early(bus);  // waiting at 0 before the bus starts
    Producer p(bus);
    // In `block` the producer waits for `early` to cross the start markers,
    // so it runs on its own thread, as it would in its own process.
    std::thread producer([&] {
      const PublishResult r = p.skip_to(start);
      EXPECT_EQ(r.status, PublishStatus::ok);
      EXPECT_EQ(r.seq, start);
      EXPECT_EQ(p.next_seq(), start);
      for (std::uint64_t s = start; s < start + 3; ++s) publish_seq(p, s);
    });
    for (std::uint64_t s = start; s < start + 3; ++s) expect_message(early, s);
    producer.join();
    Consumer late(bus);  // earliest: the first message, not a marker
    for (std::uint64_t s = start; s < start + 3; ++s) expect_message(late, s);
    EXPECT_EQ(early.lost(), 0u);
    EXPECT_EQ(late.lost(), 0u);
    expect_clean(name.str());
  }
}

TEST_P(Gaps, AGapWithinTheRingIsReportedAsExactlyTheMissingSequences) {
  ScopedName name("gapsmall");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer c(bus);
  Producer p(bus);
  for (std::uint64_t s = 0; s < 5; ++s) publish_seq(p, s);
  ASSERT_EQ(p.skip_to(12).status, PublishStatus::ok);
  publish_seq(p, 12);
  publish_seq(p, 13);
  for (std::uint64_t s = 0; s < 5; ++s) expect_message(c, s);
  expect_lost(c, 7);
  expect_message(c, 12);
  expect_message(c, 13);
  EXPECT_EQ(c.lost(), 7u);
  EXPECT_EQ(c.delivered(), 7u);
  expect_clean(name.str());
}

TEST_P(Gaps, AGapLongerThanTheRingIsReportedExactlyByEveryReader) {
  ScopedName name("gapbig");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer before(bus);
  Producer p(bus);
  for (std::uint64_t s = 0; s < 3; ++s) publish_seq(p, s);
  Consumer middle(bus, ConsumerOptions{.start = Start::latest});  // at 3, the gap's first sequence
  for (std::uint64_t s = 0; s < 3; ++s) expect_message(before, s);
  EXPECT_EQ(before.next(1ms).status, ReadStatus::timeout);  // publishes its cursor: a block skip needs it
  std::thread producer([&] {
    EXPECT_EQ(p.skip_to(100).status, PublishStatus::ok);
    publish_seq(p, 100);
  });
  if (GetParam() == Policy::block) {
    expect_lost(before, 97);
    expect_lost(middle, 97);  // in `block` both must cross before 100 can be written
    expect_message(before, 100);
    expect_message(middle, 100);
  } else {
    // In `overwrite` the producer does not wait: a reader may meet the
    // markers half-written and report the gap in two steps.
    expect_lost_then(before, 97, 100);
    expect_lost_then(middle, 97, 100);
  }
  producer.join();
  // Joining now: the oldest retained record is a marker or the message.
  Consumer late(bus);
  const ReadResult r = late.next(2s);
  if (r.status == ReadStatus::lost) expect_message(late, 100);
  else EXPECT_EQ(r.message.seq, 100u);
  expect_clean(name.str());
}

// A gap longer than the ring over slots that earlier laps' spans marked as
// their inside: every marker there is a real record of a later sequence
// (head is more than a ring past the reader), not a span's payload left in
// the tag word. The reader crosses the gap at once, counting it lost, and
// skips nothing as corrupt.
TEST_P(Gaps, AGapLongerThanTheRingOverSlotsSpansHadMarkedIsCrossedAtOnce) {
  ScopedName name("gapspans");
  Bus bus = Bus::create(name, opts(GetParam()));  // 16 x 64 B: 40 bytes a record
  Consumer c(bus);
  Producer p(bus);
  // Spans of 3 records from seq 0: the inside of each is marked.
  const std::string big(150, 'x');
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes(big)));
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(p.publish(bytes("s"), 1s));  // 15 and 16: slots 15 and 0
  for (int i = 0; i < 2; ++i) ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  const std::uint64_t from = p.next_seq();
  ASSERT_EQ(from, 17u);  // slot 1: inside the first span, a lap ago
  EXPECT_EQ(c.next(1ms).status, ReadStatus::timeout);  // publishes its cursor: a block skip needs it
  std::thread producer([&] {
    EXPECT_EQ(p.skip_to(from + 70).status, PublishStatus::ok);
    publish_seq(p, from + 70);
  });
  const auto t0 = std::chrono::steady_clock::now();
  expect_lost_then(c, 70, from + 70);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "the reader crept across the gap";
  producer.join();
  expect_clean(name.str());
}

TEST_P(Gaps, AReaderStartingInsideAGapMovesToItsEnd) {
  ScopedName name("gapinside");
  Bus bus = Bus::create(name, opts(GetParam()));
  Producer p(bus);
  publish_seq(p, 0);
  ASSERT_EQ(p.skip_to(10).status, PublishStatus::ok);
  publish_seq(p, 10);
  Consumer c(bus, ConsumerOptions{.start = Start::sequence, .start_seq = 4});
  expect_lost(c, 6);
  expect_message(c, 10);
}

TEST_P(Gaps, ReadBatchCountsTheGapInItsResult) {
  ScopedName name("gapbatch");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer c(bus);
  Producer p(bus);
  publish_seq(p, 0);
  ASSERT_EQ(p.skip_to(9).status, PublishStatus::ok);
  publish_seq(p, 9);
  Message out[8];
  PollResult pr;
  std::uint64_t got = 0, lost = 0;
  std::vector<std::uint64_t> seqs;
  while (got < 2) {
    const auto batch = c.read_batch(out, pr, 2s);
    ASSERT_FALSE(pr.end_of_stream);
    ASSERT_TRUE(!batch.empty() || pr.lost != 0) << "timed out";
    lost += pr.lost;
    for (const Message& m : batch) seqs.push_back(m.seq);
    got += batch.size();
  }
  EXPECT_EQ(lost, 8u);
  EXPECT_THAT(seqs, ::testing::ElementsAre(0u, 9u));
}

TEST_P(Gaps, ASequenceAlreadyUsedOrImpossibleIsRefusedAndTheSameOneIsANoOp) {
  ScopedName name("gapbad");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer c(bus);
  Producer p(bus);
  publish_seq(p, 0);
  publish_seq(p, 1);
  EXPECT_EQ(p.skip_to(1).status, PublishStatus::invalid);
  EXPECT_EQ(p.skip_to(0).status, PublishStatus::invalid);
  // No bus gets to 2^62: consumers would refuse such a head as corrupt.
  EXPECT_EQ(p.skip_to(std::uint64_t{1} << 62).status, PublishStatus::invalid);
  EXPECT_EQ(p.skip_to(~std::uint64_t{0}).status, PublishStatus::invalid);
  const PublishResult same = p.skip_to(2);
  EXPECT_EQ(same.status, PublishStatus::ok);
  EXPECT_EQ(same.seq, 2u);
  publish_seq(p, 2);
  for (std::uint64_t s = 0; s < 3; ++s) expect_message(c, s);
  EXPECT_EQ(c.lost(), 0u);
}

TEST_P(Gaps, ATakeoverContinuesAfterTheGap) {
  ScopedName name("gaptake");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer c(bus);
  {
    Producer p(bus);
    publish_seq(p, 0);
    expect_message(c, 0);
    EXPECT_EQ(c.next(1ms).status, ReadStatus::timeout);  // publishes the cursor: a block skip needs it
    ASSERT_EQ(p.skip_to(40).status, PublishStatus::ok);
    p.detach();
  }
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 40u);
  expect_lost(c, 39);  // before 40 is written: in `block` the reader must cross first
  publish_seq(q, 40);
  expect_message(c, 40);
}

TEST_P(Gaps, ATakeoverContinuesAfterAGapLongerThanTheRingCutShortBeforeHead) {
  // A producer dies inside skip_to(seq) of a gap longer than the ring: every
  // marker, the lowest (written last) included, is committed, but head still
  // says `from`. The slot of `from` then holds a marker for a later
  // sequence; the next producer must still go on at seq, where readers that
  // crossed the markers wait, not publish from..seq-1 behind them.
  constexpr std::uint64_t kCap = 16;
  ScopedName name("gaplong");
  Bus bus = Bus::create(name, opts(GetParam(), kCap));
  Consumer c(bus);
  const std::uint64_t target = 1 + 3 * kCap + 5;
  {
    Producer p(bus);
    publish_seq(p, 0);
    expect_message(c, 0);
    EXPECT_EQ(c.next(1ms).status, ReadStatus::timeout);  // publishes the cursor: a block skip needs it
    ASSERT_EQ(p.skip_to(target).status, PublishStatus::ok);
    RawSegment raw(name.path());
    raw.header().head.store(1);  // as if killed before skip_to stored head
    p.detach();
  }
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), target);
  expect_lost(c, target - 1);
  publish_seq(q, target);
  expect_message(c, target);
}

TEST_P(Gaps, ATakeoverGoesOnBeforeALongGapWhoseLowestMarkerIsNotCommitted) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("gaplonghalf");
  Bus bus = Bus::create(name, opts(GetParam(), kCap));
  const std::uint64_t target = 1 + 3 * kCap + 5;
  {
    Producer p(bus);
    publish_seq(p, 0);
    ASSERT_EQ(p.skip_to(target).status, PublishStatus::ok);
    RawSegment raw(name.path());
    raw.header().head.store(1);
    // The lowest marker (target - capacity) half-written: BUSY.
    raw.record_header(target - kCap).tag.store((target - kCap + 1) | layout::kBusyBit);
    p.detach();
  }
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 1u);
}

TEST_P(Gaps, ATakeoverFinishesAGapWhoseHigherMarkersAreCommitted) {
  // Killed inside skip_to(10) after markers 9..3 were committed (highest
  // first) but before 2 and 1: a reader may have crossed those, so the next
  // producer finishes the gap instead of publishing 1..9 behind it.
  ScopedName name("gapfinish");
  Bus bus = Bus::create(name, opts(GetParam()));
  Consumer c(bus);
  {
    Producer p(bus);
    publish_seq(p, 0);
    expect_message(c, 0);
    EXPECT_EQ(c.next(1ms).status, ReadStatus::timeout);  // publishes the cursor: a block skip needs it
    ASSERT_EQ(p.skip_to(10).status, PublishStatus::ok);
    RawSegment raw(name.path());
    raw.header().head.store(1);
    raw.record_header(1).tag.store(2 | layout::kBusyBit);
    raw.record_header(2).tag.store(3 | layout::kBusyBit);
    p.detach();
  }
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 10u);
  const Inspector insp = Inspector::open(name.str());
  for (std::uint64_t m = 1; m < 10; ++m) {
    const auto marker = insp.record(m);
    ASSERT_TRUE(marker.has_value()) << m;
    EXPECT_EQ(marker->gap_to, 10u) << m;
    EXPECT_TRUE(marker->gap_lost) << m;
  }
  expect_lost(c, 9);
  publish_seq(q, 10);
  expect_message(c, 10);
}

TEST_P(Gaps, TheInspectorShowsAMarkerAsAGap) {
  ScopedName name("gapinspect");
  Bus bus = Bus::create(name, opts(GetParam()));
  Producer p(bus);
  publish_seq(p, 0);
  ASSERT_EQ(p.skip_to(6).status, PublishStatus::ok);
  publish_seq(p, 6);
  const Inspector insp = Inspector::open(name.str());
  const auto marker = insp.record(1);
  ASSERT_TRUE(marker.has_value());
  EXPECT_EQ(marker->gap_to, 6u);
  EXPECT_TRUE(marker->gap_lost);
  EXPECT_TRUE(marker->payload.empty());
  const auto message = insp.record(6);
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(message->gap_to, 0u);
  EXPECT_EQ(text(message->payload), "m6");
}

TEST(GapsBlock, ASkipWaitsForReadersLikeAPublish) {
  ScopedName name("gapwait");
  Bus bus = Bus::create(name, opts(Policy::block, 4));
  Consumer c(bus);
  Producer p(bus);
  for (std::uint64_t s = 0; s < 4; ++s) publish_seq(p, s);  // full
  EXPECT_EQ(p.skip_to(6, 20ms).status, PublishStatus::timeout);
  EXPECT_EQ(p.next_seq(), 4u);
  for (std::uint64_t s = 0; s < 4; ++s) expect_message(c, s);
  EXPECT_EQ(c.next(1ms).status, ReadStatus::timeout);  // a reader that waits publishes its cursor
  ASSERT_EQ(p.skip_to(6, 2s).status, PublishStatus::ok);
  publish_seq(p, 6);
  expect_lost(c, 2);
  expect_message(c, 6);
}

}  // namespace
}  // namespace shmbus::test
