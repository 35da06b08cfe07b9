// One process, one bus: publish/next round trips, claim/commit, batches,
// timeouts, start positions, overwrite losses, the producer role, end-of-stream.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace shmbus::test {
namespace {

using ::testing::HasSubstr;

BusOptions opts(std::uint64_t capacity, Policy policy = Policy::block, std::uint32_t record_size = 128) {
  BusOptions o;
  o.capacity = capacity;
  o.policy = policy;
  o.record_size = record_size;
  o.max_readers = 4;
  return o;
}

std::string payload_for(std::uint64_t seq, std::size_t max) {
  std::string s = "m" + std::to_string(seq) + ":";
  const std::size_t len = (seq * 7) % (max + 1);
  while (s.size() < len) s += static_cast<char>('a' + (s.size() + seq) % 26);
  s.resize(len);
  return s;
}

ReadResult expect_message(Consumer& c, std::uint64_t seq, std::chrono::nanoseconds timeout = 2s) {
  ReadResult r = c.next(timeout);
  EXPECT_EQ(r.status, ReadStatus::message) << "waiting for seq " << seq << ", got " << to_string(r.status);
  EXPECT_EQ(r.message.seq, seq);
  return r;
}

// ---------------------------------------------------------------- round trips

TEST(RoundTrip, PublishedMessageArrivesByteExactWithSequenceAndTimestamp) {
  ScopedName name("rt");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  ProducerOptions po;
  po.timestamps = Timestamps::precise;
  Producer p(bus, po);
  const auto before = std::chrono::system_clock::now();
  PublishResult pr = p.publish(bytes("hello, bus"));
  ASSERT_EQ(pr.status, PublishStatus::ok);
  EXPECT_EQ(pr.seq, 0u);
  EXPECT_EQ(p.next_seq(), 1u);
  EXPECT_EQ(bus.head(), 1u);
  ReadResult r = expect_message(c, 0);
  EXPECT_EQ(text(r.message.payload), "hello, bus");
  const auto ts = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::nanoseconds(r.message.timestamp_ns)));
  EXPECT_GE(ts, before - 1s);
  EXPECT_LE(ts, std::chrono::system_clock::now() + 1s);
  EXPECT_EQ(c.cursor(), 1u);
  EXPECT_EQ(c.delivered(), 1u);
  EXPECT_EQ(c.lost(), 0u);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
}

TEST(RoundTrip, ManyMessagesOfEverySizeArriveInOrderThroughAWrappingRing) {
  for (Policy policy : {Policy::block, Policy::overwrite}) {
    SCOPED_TRACE(to_string(policy));
    ScopedName name("rt-many");
    Bus bus = Bus::create(name, opts(8, policy, 192));
    const std::size_t max = bus.info().max_payload;
    Consumer c(bus);
    Producer p(bus);
    std::uint64_t seq = 0;
    for (int round = 0; round < 50; ++round) {
      const std::uint64_t first = seq;
      for (int i = 0; i < 8; ++i, ++seq) {  // fill the ring exactly
        const std::string m = payload_for(seq, max);
        PublishResult pr = p.publish(bytes(m), 0ns);
        ASSERT_EQ(pr.status, PublishStatus::ok) << seq;
        ASSERT_EQ(pr.seq, seq);
      }
      for (std::uint64_t s = first; s < seq; ++s) {
        ReadResult r = expect_message(c, s);
        ASSERT_EQ(text(r.message.payload), payload_for(s, max)) << s;
      }
      // Also releases the last message's record (in `block` it is a view
      // into the ring, valid until the next call).
      ASSERT_EQ(c.next(0ns).status, ReadStatus::timeout);
    }
    EXPECT_EQ(c.delivered(), seq);
    EXPECT_EQ(c.lost(), 0u);
  }
}

TEST(RoundTrip, EmptyAndMaximumPayloadsRoundTrip) {
  ScopedName name("rt-edge");
  Bus bus = Bus::create(name, opts(4, Policy::block, 64));
  ASSERT_EQ(bus.info().max_payload, 40u);
  Consumer c(bus);
  Producer p(bus);
  const std::string full(40, '\xab');
  ASSERT_TRUE(p.publish({}));
  ASSERT_TRUE(p.publish(bytes(full)));
  EXPECT_EQ(expect_message(c, 0).message.payload.size(), 0u);
  EXPECT_EQ(text(expect_message(c, 1).message.payload), full);
}

TEST(RoundTrip, TooLargePayloadIsRefusedAndConsumesNoSequence) {
  ScopedName name("too-large");
  Bus bus = Bus::create(name, opts(4, Policy::block, 64));
  Consumer c(bus);
  Producer p(bus);
  // Four 64-byte records: a message may span two (2 x 64 - 24 = 104 bytes).
  ASSERT_EQ(bus.info().max_message, 104u);
  EXPECT_EQ(p.publish(bytes(std::string(105, 'x'))).status, PublishStatus::too_large);
  EXPECT_EQ(p.claim(105).status, PublishStatus::too_large);
  EXPECT_EQ(p.claim(1u << 30).status, PublishStatus::too_large);
  EXPECT_EQ(p.next_seq(), 0u);
  EXPECT_EQ(bus.head(), 0u);
  ASSERT_TRUE(p.publish(bytes("ok")));
  EXPECT_EQ(expect_message(c, 0).message.payload.size(), 2u);
}

TEST(RoundTrip, TimestampsAreOffByDefault) {
  ScopedName name("no-ts");
  Bus bus = Bus::create(name, opts(4));
  Consumer c(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("x")));
  EXPECT_EQ(expect_message(c, 0).message.timestamp_ns, 0u);
}

// Each timestamp mode stamps within its documented resolution of the
// CLOCK_REALTIME bracket around the publish.
TEST(RoundTrip, TimestampsHaveTheirDocumentedResolution) {
  auto realtime = [] {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return std::uint64_t(ts.tv_sec) * 1'000'000'000u + std::uint64_t(ts.tv_nsec);
  };
  timespec res{};
  clock_getres(CLOCK_REALTIME_COARSE, &res);
  const std::uint64_t coarse_res = std::uint64_t(res.tv_sec) * 1'000'000'000u + std::uint64_t(res.tv_nsec);
  ASSERT_LE(coarse_res, 10'000'000u) << "CLOCK_REALTIME_COARSE resolution";
  for (Timestamps mode : {Timestamps::coarse, Timestamps::precise}) {
    SCOPED_TRACE(static_cast<int>(mode));
    ScopedName name("ts-res");
    Bus bus = Bus::create(name, opts(16));
    Consumer c(bus);
    ProducerOptions po;
    po.timestamps = mode;
    Producer p(bus, po);
    const std::uint64_t before = realtime();
    ASSERT_TRUE(p.publish(bytes("t")));
    const std::uint64_t after = realtime();
    const std::uint64_t ts = expect_message(c, 0).message.timestamp_ns;
    // coarse: the last tick, which may itself be a tick late (a VM's timer jitter);
    // precise: the TSC's scale error is far below a millisecond.
    const std::uint64_t slack = mode == Timestamps::coarse ? 2 * coarse_res + 2'000'000 : 1'000'000;
    EXPECT_GE(ts + slack, before);
    EXPECT_LE(ts, after + 1'000'000);
  }
}

TEST(RoundTrip, EveryConsumerReceivesEveryMessage) {
  ScopedName name("fanout");
  Bus bus = Bus::create(name, opts(32));
  Consumer a(bus), b(bus), d(bus);
  EXPECT_NE(a.slot(), b.slot());
  EXPECT_NE(b.slot(), d.slot());
  Producer p(bus);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  for (Consumer* c : {&a, &b, &d}) {
    for (std::uint64_t s = 0; s < 20; ++s) EXPECT_EQ(text(expect_message(*c, s).message.payload), std::to_string(s));
  }
}

// ---------------------------------------------------------------- claim / commit

TEST(ClaimCommit, ClaimedRecordIsWrittenInPlaceAndPublishedByCommit) {
  ScopedName name("claim");
  Bus bus = Bus::create(name, opts(8));
  Consumer c(bus);
  Producer p(bus);
  Claim cl = p.claim(10);
  ASSERT_EQ(cl.status, PublishStatus::ok);
  EXPECT_EQ(cl.seq, 0u);
  ASSERT_GE(cl.data.size(), 10u);
  std::memcpy(cl.data.data(), "0123456789", 10);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout) << "nothing is visible before commit";
  p.commit(4);
  ReadResult r = expect_message(c, 0);
  EXPECT_EQ(text(r.message.payload), "0123");

  Claim whole = p.claim(6);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole.seq, 1u);
  std::memcpy(whole.data.data(), "abcdef", 6);
  p.commit();
  EXPECT_EQ(text(expect_message(c, 1).message.payload), "abcdef");

  // Claims and publishes share one sequence.
  ASSERT_EQ(p.publish(bytes("p")).seq, 2u);
  Claim third = p.claim(0);
  ASSERT_TRUE(third);
  EXPECT_EQ(third.seq, 3u);
  p.commit();
  EXPECT_EQ(expect_message(c, 2).message.payload.size(), 1u);
  EXPECT_EQ(expect_message(c, 3).message.payload.size(), 0u);
}

TEST(ClaimCommit, TheOpenClaimIsTheProducers) {
  ScopedName name("claim-open");
  Bus bus = Bus::create(name, opts(8));
  Producer p(bus);
  EXPECT_FALSE(p.open_claim()) << "nothing is claimed yet";
  ASSERT_TRUE(p.publish(bytes("x")));
  // A span: the claim's sequence and its whole size, as claim() gave them.
  const std::size_t big = bus.info().max_message;
  Claim cl = p.claim(big);
  ASSERT_TRUE(cl);
  const Claim open = p.open_claim();
  ASSERT_TRUE(open);
  EXPECT_EQ(open.seq, cl.seq);
  EXPECT_EQ(open.data.data(), cl.data.data());
  EXPECT_EQ(open.data.size(), big);
  EXPECT_EQ(p.publish(bytes("y")).status, PublishStatus::closed) << "no publish while a claim is open";
  p.commit(3);
  EXPECT_FALSE(p.open_claim());
  ASSERT_TRUE(p.claim(1));
  p.close();
  EXPECT_FALSE(p.open_claim()) << "an open claim is abandoned with the role";
}

TEST(ClaimCommit, ClaimTimesOutOnAFullBlockingRing) {
  ScopedName name("claim-full");
  Bus bus = Bus::create(name, opts(4));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  const auto start = Clock::now();
  EXPECT_EQ(p.claim(1, 20ms).status, PublishStatus::timeout);
  EXPECT_GE(Clock::now() - start, 19ms);
  expect_message(c, 0);
  (void)c.next(0ns);  // publishes the cursor
  Claim cl = p.claim(1, 2s);
  ASSERT_EQ(cl.status, PublishStatus::ok);
  EXPECT_EQ(cl.seq, 4u);
  p.commit();
}

// ---------------------------------------------------------------- batches

TEST(Batches, PublishBatchPublishesInOrderWithOneTimestamp) {
  ScopedName name("batch");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  ProducerOptions po;
  po.timestamps = Timestamps::coarse;
  Producer p(bus, po);
  const std::string m[] = {"one", "two", "three", "", "five"};
  std::vector<std::span<const std::byte>> spans;
  for (const auto& s : m) spans.push_back(bytes(s));
  EXPECT_EQ(p.publish_batch(spans), 5u);
  EXPECT_EQ(p.next_seq(), 5u);
  std::uint64_t ts = 0;
  for (std::uint64_t s = 0; s < 5; ++s) {
    ReadResult r = expect_message(c, s);
    EXPECT_EQ(text(r.message.payload), m[s]);
    if (s == 0) ts = r.message.timestamp_ns;
    EXPECT_EQ(r.message.timestamp_ns, ts);
  }
}

TEST(Batches, PublishBatchAcceptsEmptyPayloads) {
  // Default-constructed spans (data() == nullptr) are valid empty payloads.
  ScopedName name("batch-empty");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  const std::vector<std::span<const std::byte>> spans = {{}, bytes("x"), {}};
  EXPECT_EQ(p.publish_batch(spans), 3u);
  EXPECT_EQ(expect_message(c, 0).message.payload.size(), 0u);
  EXPECT_EQ(expect_message(c, 1).message.payload.size(), 1u);
  EXPECT_EQ(expect_message(c, 2).message.payload.size(), 0u);
}

TEST(Batches, PublishBatchStopsAtATooLargeMessage) {
  ScopedName name("batch-large");
  Bus bus = Bus::create(name, opts(16, Policy::block, 64));
  Consumer c(bus);
  Producer p(bus);
  const std::string big(bus.info().max_message + 1, 'x');
  std::vector<std::span<const std::byte>> spans = {bytes("a"), bytes("b"), bytes(big), bytes("d")};
  EXPECT_EQ(p.publish_batch(spans), 2u);
  EXPECT_EQ(p.next_seq(), 2u);
  expect_message(c, 0);
  expect_message(c, 1);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
}

TEST(Batches, PublishBatchStopsWhenTheRingStaysFull) {
  ScopedName name("batch-full");
  Bus bus = Bus::create(name, opts(8));
  Consumer c(bus);
  Producer p(bus);
  std::vector<std::string> m;
  for (int i = 0; i < 12; ++i) m.push_back(std::to_string(i));
  std::vector<std::span<const std::byte>> spans;
  for (const auto& s : m) spans.push_back(bytes(s));
  EXPECT_EQ(p.publish_batch(spans, 20ms), 8u);
  EXPECT_EQ(p.next_seq(), 8u);
  for (std::uint64_t s = 0; s < 8; ++s) EXPECT_EQ(text(expect_message(c, s).message.payload), m[s]);
}

TEST(Batches, PollHandsOverAtMostMaxMessagesInOrder) {
  ScopedName name("poll");
  Bus bus = Bus::create(name, opts(256));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  std::vector<std::uint64_t> seen;
  auto handler = [&](const Message& m) {
    EXPECT_EQ(text(m.payload), std::to_string(m.seq));
    seen.push_back(m.seq);
  };
  PollResult r = c.poll(handler, 5);
  EXPECT_EQ(r.count, 5u);
  EXPECT_EQ(r.lost, 0u);
  EXPECT_FALSE(r.end_of_stream);
  r = c.poll(handler, 1000);  // more than one internal batch of 64
  EXPECT_EQ(r.count, 195u);
  r = c.poll(handler);
  EXPECT_EQ(r.count, 0u);
  ASSERT_EQ(seen.size(), 200u);
  for (std::uint64_t i = 0; i < 200; ++i) ASSERT_EQ(seen[i], i);
  EXPECT_EQ(c.delivered(), 200u);
  EXPECT_EQ(c.cursor(), 200u);
}

TEST(Batches, PollWaitsUpToItsTimeoutForTheFirstMessage) {
  ScopedName name("poll-wait");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  const auto start = Clock::now();
  PollResult r = c.poll([](const Message&) {}, 10, 30ms);
  EXPECT_EQ(r.count, 0u);
  EXPECT_GE(Clock::now() - start, 29ms);
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    (void)p.publish(bytes("late"));
  });
  std::string got;
  r = c.poll([&](const Message& m) { got = text(m.payload); }, 10, 10s);
  t.join();
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(got, "late");
}

TEST(Batches, ReadBatchViewsStayValidUntilTheNextCall) {
  ScopedName name("read-batch");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(p.publish(bytes("msg" + std::to_string(i))));
  std::array<Message, 8> out;
  PollResult pr;
  auto got = c.read_batch(out, pr, 0ns);
  ASSERT_EQ(got.size(), 8u);
  for (std::uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(got[i].seq, i);
    EXPECT_EQ(text(got[i].payload), "msg" + std::to_string(i));
  }
  // The producer cannot reuse those 8 records (block) while the views are out:
  // with 12 of 16 used it may publish 4 more but not a 5th.
  for (int i = 12; i < 16; ++i) ASSERT_TRUE(p.publish(bytes("msg" + std::to_string(i)), 0ns));
  EXPECT_EQ(p.publish(bytes("overflow"), 10ms).status, PublishStatus::timeout);
  for (std::uint64_t i = 0; i < 8; ++i) EXPECT_EQ(text(got[i].payload), "msg" + std::to_string(i));
  auto rest = c.read_batch(out, pr, 0ns);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(rest[0].seq, 8u);
  EXPECT_EQ(rest[7].seq, 15u);
  EXPECT_EQ(pr.lost, 0u);
}

// ---------------------------------------------------------------- timeouts

TEST(Timeouts, NextOnAnEmptyBusTimesOutAfterTheTimeout) {
  ScopedName name("to-next");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
  for (auto timeout : {1ms, 25ms}) {
    const auto start = Clock::now();
    EXPECT_EQ(c.next(timeout).status, ReadStatus::timeout);
    const auto took = Clock::now() - start;
    EXPECT_GE(took, timeout - 1ms);
    EXPECT_LT(took, timeout + 2s);
  }
  for (WaitStrategy w : {WaitStrategy::busy_spin, WaitStrategy::spin_yield, WaitStrategy::adaptive}) {
    ConsumerOptions co;
    co.wait.strategy = w;
    Consumer cw(bus, co);
    const auto start = Clock::now();
    EXPECT_EQ(cw.next(10ms).status, ReadStatus::timeout);
    EXPECT_GE(Clock::now() - start, 9ms);
  }
}

TEST(Timeouts, WaitingConsumerWakesForANewMessageWithEveryWaitStrategy) {
  for (WaitStrategy w : {WaitStrategy::busy_spin, WaitStrategy::spin_yield, WaitStrategy::adaptive}) {
    ScopedName name("wake");
    Bus bus = Bus::create(name, opts(16));
    ConsumerOptions co;
    co.wait.strategy = w;
    Consumer c(bus, co);
    Producer p(bus);
    std::thread t([&] {
      std::this_thread::sleep_for(30ms);  // long enough for the adaptive waiter to sleep
      (void)p.publish(bytes("wake up"));
    });
    ReadResult r = c.next(10s);
    t.join();
    ASSERT_EQ(r.status, ReadStatus::message) << static_cast<int>(w);
    EXPECT_EQ(text(r.message.payload), "wake up");
  }
}

TEST(Timeouts, PublishOnAFullBlockingRingTimesOutThenSucceedsOnceSpaceFrees) {
  ScopedName name("to-pub");
  Bus bus = Bus::create(name, opts(4));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  EXPECT_EQ(p.publish(bytes("y"), 0ns).status, PublishStatus::timeout);
  const auto start = Clock::now();
  EXPECT_EQ(p.publish(bytes("y"), 25ms).status, PublishStatus::timeout);
  EXPECT_GE(Clock::now() - start, 24ms);
  EXPECT_EQ(p.next_seq(), 4u) << "a timed-out publish consumes no sequence";
  // A producer blocked in publish() is woken when the consumer reads.
  std::thread reader([&] {
    std::this_thread::sleep_for(30ms);
    for (std::uint64_t s = 0; s < 5; ++s) (void)c.next(5s);
  });
  PublishResult pr = p.publish(bytes("y"), 10s);
  reader.join();
  EXPECT_EQ(pr.status, PublishStatus::ok);
  EXPECT_EQ(pr.seq, 4u);
}

TEST(Timeouts, AProducerRetryingAfterTimeoutsShowsOneWaitNamingTheReaderThatHoldsIt) {
  ScopedName name("to-holder");
  Bus bus = Bus::create(name, opts(4));
  Consumer other(bus);
  ConsumerOptions co;
  co.name = "holder";
  Consumer holder(bus, co);
  Producer p(bus);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  for (std::uint64_t s = 0; s < 4; ++s) expect_message(other, s);
  (void)other.next(0ns);  // publishes its cursor: only `holder` holds the ring
  Inspector ins = Inspector::open(name);
  // Calls that time out at once (no liveness look) and in the middle of a
  // retry loop: the inspector sees one wait, held back by `holder`.
  EXPECT_EQ(p.publish(bytes("y"), 0ns).status, PublishStatus::timeout);
  Snapshot s = ins.snapshot();
  EXPECT_TRUE(s.producer.waiting_for_space);
  EXPECT_EQ(s.producer.blocked_on_slot, holder.slot());
  const std::uint64_t since = s.producer.waiting_since_ns;
  EXPECT_NE(since, 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p.publish(bytes("y"), 2ms).status, PublishStatus::timeout);
    s = ins.snapshot();
    EXPECT_TRUE(s.producer.waiting_for_space) << i;
    EXPECT_EQ(s.producer.blocked_on_slot, holder.slot()) << i;
    EXPECT_EQ(s.producer.waiting_since_ns, since) << i;
  }
  EXPECT_EQ(s.counters.producer_waits, 1u);
  // Room again: the next publish ends the wait.
  for (std::uint64_t q = 0; q < 4; ++q) expect_message(holder, q);
  (void)holder.next(0ns);
  ASSERT_EQ(p.publish(bytes("y"), 1s).status, PublishStatus::ok);
  s = ins.snapshot();
  EXPECT_FALSE(s.producer.waiting_for_space);
  EXPECT_FALSE(s.producer.blocked_on_slot.has_value());
  EXPECT_EQ(s.producer.waiting_since_ns, 0u);
}

TEST(Timeouts, BlockingBusWithoutReadersKeepsTheNewestRecordsAndNeverWaits) {
  ScopedName name("no-readers");
  Bus bus = Bus::create(name, opts(8));
  Producer p(bus);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(p.publish(bytes(std::to_string(i)), 0ns).status, PublishStatus::ok);
  EXPECT_EQ(bus.head(), 100u);
  // The newest records stay retained for late joiners (a `block` producer
  // may protect them in chunks of up to capacity/16 records).
  EXPECT_GE(bus.oldest(), 92u);
  EXPECT_LE(bus.oldest(), 92u + 8u / 16u);
}

// ---------------------------------------------------------------- start positions

TEST(StartPositions, LateJoinerStartsAtEarliestLatestOrAGivenSequence) {
  ScopedName name("start");
  BusOptions o = opts(8);
  o.max_readers = 8;
  Bus bus = Bus::create(name, o);
  Producer p(bus);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  ASSERT_EQ(bus.oldest(), 12u);

  ConsumerOptions earliest;
  earliest.start = Start::earliest;
  Consumer e(bus, earliest);
  EXPECT_EQ(e.cursor(), 12u);

  ConsumerOptions latest;
  latest.start = Start::latest;
  Consumer l(bus, latest);
  EXPECT_EQ(l.cursor(), 20u);

  ConsumerOptions at;
  at.start = Start::sequence;
  at.start_seq = 15;
  Consumer s(bus, at);
  EXPECT_EQ(s.cursor(), 15u);

  at.start_seq = 12;  // the oldest retained
  Consumer s_oldest(bus, at);
  at.start_seq = 20;  // the next to be published
  Consumer s_next(bus, at);

  EXPECT_EQ(l.next(0ns).status, ReadStatus::timeout);
  EXPECT_EQ(s_next.next(0ns).status, ReadStatus::timeout);
  EXPECT_EQ(text(expect_message(e, 12).message.payload), "12");
  EXPECT_EQ(text(expect_message(s, 15).message.payload), "15");
  EXPECT_EQ(text(expect_message(s_oldest, 12).message.payload), "12");

  // Drain the early readers so the producer may continue.
  for (std::uint64_t q = 13; q < 20; ++q) expect_message(e, q);
  for (std::uint64_t q = 16; q < 20; ++q) expect_message(s, q);
  for (std::uint64_t q = 13; q < 20; ++q) expect_message(s_oldest, q);
  ASSERT_TRUE(p.publish(bytes("20"), 2s));
  for (Consumer* c : {&e, &l, &s, &s_oldest, &s_next}) EXPECT_EQ(text(expect_message(*c, 20).message.payload), "20");
}

TEST(StartPositions, SequenceNoLongerOrNotYetRetainedIsRefused) {
  ScopedName name("start-gone");
  Bus bus = Bus::create(name, opts(8));
  Producer p(bus);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.publish(bytes("x")));
  ConsumerOptions at;
  at.start = Start::sequence;
  for (std::uint64_t seq : {std::uint64_t{0}, std::uint64_t{11}, std::uint64_t{21}, std::uint64_t{1000}}) {
    SCOPED_TRACE(seq);
    at.start_seq = seq;
    try {
      Consumer c(bus, at);
      ADD_FAILURE() << "attached at a sequence that is not retained";
    } catch (const Error& e) {
      EXPECT_EQ(e.errc(), Errc::not_retained) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(name.str()));
      EXPECT_THAT(e.what(), HasSubstr(std::to_string(seq)));
    }
  }
}

TEST(StartPositions, EarliestOnAFreshBusStartsAtZero) {
  ScopedName name("start-fresh");
  Bus bus = Bus::create(name, opts(8));
  Consumer c(bus);
  EXPECT_EQ(c.cursor(), 0u);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("first")));
  expect_message(c, 0);
}

// ---------------------------------------------------------------- overwrite

TEST(Overwrite, LappedConsumerIsToldExactlyHowManyItLostAndResumesAtTheOldest) {
  constexpr std::uint64_t kCap = 8;
  for (std::uint64_t extra : {std::uint64_t{1}, std::uint64_t{5}, kCap, 3 * kCap + 3}) {
    SCOPED_TRACE(extra);
    ScopedName name("ow-lost");
    Bus bus = Bus::create(name, opts(kCap, Policy::overwrite));
    Consumer c(bus);
    Producer p(bus);
    const std::uint64_t total = kCap + extra;
    for (std::uint64_t i = 0; i < total; ++i)
      ASSERT_EQ(p.publish(bytes(std::to_string(i)), 0ns).status, PublishStatus::ok) << "overwrite never waits";
    EXPECT_EQ(bus.oldest(), extra);
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::lost);
    EXPECT_EQ(r.lost, extra) << "records " << extra << ".." << total - 1 << " are still in the ring";
    for (std::uint64_t s = extra; s < total; ++s) {
      r = c.next(1s);
      ASSERT_EQ(r.status, ReadStatus::message) << "waiting for seq " << s;
      ASSERT_EQ(r.message.seq, s) << "did not resume at the oldest retained record";
      ASSERT_EQ(text(r.message.payload), std::to_string(s));
    }
    EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
    EXPECT_EQ(c.lost(), extra);
    EXPECT_EQ(c.delivered(), kCap);
  }
}

TEST(Overwrite, RingExactlyFullLosesNothing) {
  ScopedName name("ow-full");
  Bus bus = Bus::create(name, opts(8, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i)), 0ns));
  for (std::uint64_t s = 0; s < 8; ++s) expect_message(c, s);
  EXPECT_EQ(c.lost(), 0u);
}

TEST(Overwrite, PollReportsLossesAndThenTheRetainedMessages) {
  ScopedName name("ow-poll");
  Bus bus = Bus::create(name, opts(16, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 16 + 7; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i)), 0ns));
  std::vector<std::uint64_t> seen;
  std::uint64_t lost = 0;
  for (int i = 0; i < 4 && seen.size() < 16; ++i) {
    PollResult r = c.poll([&](const Message& m) {
      EXPECT_EQ(text(m.payload), std::to_string(m.seq));
      seen.push_back(m.seq);
    }, 100);
    lost += r.lost;
  }
  EXPECT_EQ(lost, 7u);
  ASSERT_EQ(seen.size(), 16u);
  for (std::uint64_t i = 0; i < 16; ++i) EXPECT_EQ(seen[i], 7 + i);
}

TEST(Overwrite, RepeatedLapsAreEachCountedExactly) {
  ScopedName name("ow-laps");
  Bus bus = Bus::create(name, opts(4, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  std::uint64_t published = 0, delivered = 0, lost = 0;
  for (int round = 0; round < 20; ++round) {
    const std::uint64_t n = 1 + (round * 5) % 11;  // 1..11 messages, sometimes lapping
    for (std::uint64_t i = 0; i < n; ++i, ++published) ASSERT_TRUE(p.publish(bytes(std::to_string(published)), 0ns));
    const std::uint64_t expect_lost = n > 4 ? n - 4 : 0;
    if (expect_lost) {
      ReadResult r = c.next(1s);
      ASSERT_EQ(r.status, ReadStatus::lost) << round;
      EXPECT_EQ(r.lost, expect_lost) << round;
      lost += r.lost;
    }
    for (std::uint64_t s = published - std::min<std::uint64_t>(n, 4); s < published; ++s, ++delivered) {
      ReadResult r = c.next(1s);
      ASSERT_EQ(r.status, ReadStatus::message) << "round " << round << ", waiting for seq " << s;
      ASSERT_EQ(r.message.seq, s) << "round " << round;
      ASSERT_EQ(text(r.message.payload), std::to_string(s));
    }
  }
  EXPECT_EQ(delivered + lost, published);
  EXPECT_EQ(c.lost(), lost);
  EXPECT_EQ(c.delivered(), delivered);
}

// ---------------------------------------------------------------- consumers

TEST(Consumers, ReaderTableFullIsAnErrorUntilASlotIsReleased) {
  ScopedName name("table-full");
  BusOptions o = opts(8);
  o.max_readers = 2;
  Bus bus = Bus::create(name, o);
  std::optional<Consumer> a(std::in_place, bus);
  Consumer b(bus);
  try {
    Consumer c(bus);
    ADD_FAILURE() << "a third consumer attached to a 2-slot table";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::reader_table_full) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
  a.reset();
  Consumer c(bus);  // the released slot is reusable
  EXPECT_LT(c.slot(), 2u);
}

TEST(Consumers, DetachedConsumerNoLongerHoldsTheProducerBack) {
  ScopedName name("detach");
  Bus bus = Bus::create(name, opts(4));
  Producer p(bus);
  {
    Consumer c(bus);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
    EXPECT_EQ(p.publish(bytes("x"), 0ns).status, PublishStatus::timeout);
    EXPECT_EQ(p.live_readers(), 1u);
  }
  EXPECT_EQ(p.live_readers(), 0u);
  EXPECT_EQ(p.publish(bytes("x"), 0ns).status, PublishStatus::ok);
}

TEST(Consumers, MovedConsumerKeepsItsSlotAndCursor) {
  ScopedName name("move");
  Bus bus = Bus::create(name, opts(8));
  Consumer a(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("0")));
  ASSERT_TRUE(p.publish(bytes("1")));
  expect_message(a, 0);
  const auto slot = a.slot();
  Consumer b(std::move(a));
  EXPECT_EQ(b.slot(), slot);
  expect_message(b, 1);
  Consumer c(bus);
  c = std::move(b);
  EXPECT_EQ(c.slot(), slot);
  EXPECT_EQ(c.cursor(), 2u);
}

TEST(Consumers, DeadConsumerInAnotherProcessIsReclaimed) {
  ScopedName name("dead-reader");
  BusOptions o = opts(4);
  o.max_readers = 1;
  Bus bus = Bus::create(name, o);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      Bus b = Bus::open(name);
      new Consumer(b);  // attached; never detached
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // The only slot belongs to a dead process: it is reclaimed, not "full".
  Producer p(bus);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(p.publish(bytes("x"), 2s).status, PublishStatus::ok) << i;
  Consumer c(bus);
  EXPECT_EQ(c.slot(), 0u);
}

// ---------------------------------------------------------------- producer role

TEST(ProducerRole, SecondProducerFailsNamingTheHoldersPid) {
  ScopedName name("two-producers");
  Bus bus = Bus::create(name, opts(8));
  Producer first(bus);
  try {
    Producer second(bus);
    ADD_FAILURE() << "two producers on one bus";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::producer_active) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(std::to_string(::getpid())));
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
  // The failed attempt did not disturb the holder.
  Consumer c(bus);
  ASSERT_TRUE(first.publish(bytes("still mine")));
  expect_message(c, 0);
}

TEST(ProducerRole, SecondProducerInAnotherProcessFailsNamingTheHoldersPid) {
  ScopedName name("two-producers-proc");
  Bus bus = Bus::create(name, opts(8));
  Producer first(bus);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 1;
    try {
      Producer second(Bus::open(name));
      code = 2;
    } catch (const Error& e) {
      code = e.errc() == Errc::producer_active &&
                     std::string(e.what()).find(std::to_string(::getppid())) != std::string::npos
                 ? 0
                 : 3;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: second producer was allowed, 3: wrong error or no pid";
}

TEST(ProducerRole, ReleasedRoleCanBeTakenAndTheSequenceContinues) {
  ScopedName name("handover");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  {
    Producer p(bus);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  }
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 5u);
  ASSERT_EQ(q.publish(bytes("5")).seq, 5u);
  for (std::uint64_t s = 0; s < 6; ++s) EXPECT_EQ(text(expect_message(c, s).message.payload), std::to_string(s));
}

TEST(ProducerRole, DeadProducerProcessIsTakenOverAndTheSequenceContinues) {
  ScopedName name("takeover");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto* p = new Producer(Bus::open(name));  // dies holding the role
      for (int i = 0; i < 3; ++i)
        if (!p->publish(bytes(std::to_string(i)))) ::_exit(2);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (std::uint64_t s = 0; s < 3; ++s) expect_message(c, s);
  EXPECT_EQ(c.next(5s).status, ReadStatus::end_of_stream) << "a dead producer is end-of-stream";
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 3u);
  ASSERT_TRUE(q.publish(bytes("3")));
  EXPECT_EQ(text(expect_message(c, 3).message.payload), "3");
}

TEST(ProducerRole, CloseLetsConsumersDrainThenReportsEndOfStream) {
  ScopedName name("close");
  Bus bus = Bus::create(name, opts(16));
  Consumer a(bus), b(bus);
  Producer p(bus);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  p.close();
  EXPECT_EQ(p.publish(bytes("after close")).status, PublishStatus::closed);
  EXPECT_EQ(p.claim(1).status, PublishStatus::closed);
  for (Consumer* c : {&a, &b}) {
    for (std::uint64_t s = 0; s < 5; ++s) expect_message(*c, s);
    EXPECT_EQ(c->next(2s).status, ReadStatus::end_of_stream);
  }
  // A new producer may take the closed bus and continue the sequence.
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 5u);
  ASSERT_TRUE(q.publish(bytes("5")));
  EXPECT_EQ(text(expect_message(a, 5).message.payload), "5");
}

TEST(ProducerRole, DestroyingTheProducerEndsTheStream) {
  ScopedName name("dtor-eos");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  {
    Producer p(bus);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  }
  for (std::uint64_t s = 0; s < 3; ++s) expect_message(c, s);
  EXPECT_EQ(c.next(2s).status, ReadStatus::end_of_stream);
}

TEST(ProducerRole, DetachedProducerLeavesTheStreamOpenForATakeover) {
  ScopedName name("detach-open");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  {
    Producer p(bus);
    ASSERT_TRUE(p.publish(bytes("0")));
    p.detach();
    EXPECT_EQ(p.publish(bytes("after detach")).status, PublishStatus::closed);
  }
  expect_message(c, 0);
  EXPECT_EQ(c.next(30ms).status, ReadStatus::timeout) << "detach() must not end the stream";
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 1u);
  ASSERT_TRUE(q.publish(bytes("1")));
  EXPECT_EQ(text(expect_message(c, 1).message.payload), "1");
}

TEST(ProducerRole, AfterEndOfStreamNextWaitsForANewProducer) {
  ScopedName name("eos-again");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  std::optional<Producer> p(std::in_place, bus);
  ASSERT_TRUE(p->publish(bytes("0")));
  p->close();
  p.reset();
  expect_message(c, 0);
  auto start = Clock::now();
  EXPECT_EQ(c.next(10s).status, ReadStatus::end_of_stream);
  EXPECT_LT(Clock::now() - start, 5s) << "the first end_of_stream is reported at once";
  // Later calls sleep up to their timeout for a new producer...
  start = Clock::now();
  EXPECT_EQ(c.next(40ms).status, ReadStatus::end_of_stream);
  EXPECT_GE(Clock::now() - start, 39ms);
  // ...and wake for one that takes over.
  std::thread takeover([&] {
    std::this_thread::sleep_for(30ms);
    Producer q(bus);
    (void)q.publish(bytes("1"));
  });
  ReadResult r = c.next(10s);
  takeover.join();
  ASSERT_EQ(r.status, ReadStatus::message) << to_string(r.status);
  EXPECT_EQ(r.message.seq, 1u);
}

TEST(ProducerRole, CloseWakesAConsumerSleepingInNext) {
  ScopedName name("close-wake");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  std::thread closer([&] {
    std::this_thread::sleep_for(30ms);
    p.close();
  });
  const auto start = Clock::now();
  ReadResult r = c.next(20s);
  closer.join();
  EXPECT_EQ(r.status, ReadStatus::end_of_stream);
  EXPECT_LT(Clock::now() - start, 10s);
}

TEST(ProducerRole, CloseWakesAConsumerInPoll) {
  ScopedName name("close-poll");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("only")));
  p.close();
  std::size_t count = 0;
  bool eos = false;
  for (int i = 0; i < 3 && !eos; ++i) {
    PollResult r = c.poll([&](const Message&) { ++count; }, 100, 2s);
    eos = r.end_of_stream;
  }
  EXPECT_EQ(count, 1u);
  EXPECT_TRUE(eos);
}

TEST(ProducerRole, WaitForReadersHoldsTheProducerUntilThatManyAreAttached) {
  ScopedName name("wait-readers");
  Bus bus = Bus::create(name, opts(16));
  ProducerOptions po;
  po.wait_for_readers = 1;
  po.wait_for_readers_timeout = 20ms;
  const auto start = Clock::now();
  try {
    Producer p(bus, po);
    ADD_FAILURE() << "started without its reader";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::timeout) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
  EXPECT_GE(Clock::now() - start, 19ms);
  std::promise<void> producer_done;
  std::thread attach([&, done = producer_done.get_future()] {
    std::this_thread::sleep_for(20ms);  // let the producer start waiting first
    Consumer c(bus);
    done.wait();  // stay attached until the producer has checked
  });
  po.wait_for_readers_timeout = 10s;
  std::optional<Producer> p;
  EXPECT_NO_THROW(p.emplace(bus, po));
  if (p) {
    EXPECT_GE(p->live_readers(), 1u);
  }
  producer_done.set_value();
  attach.join();
}

TEST(Counters, PublishingMakesNoWakeCallsWhenNobodySleeps) {
  ScopedName name("no-wakes");
  Bus bus = Bus::create(name, opts(1024));
  Consumer idle(bus);  // attached, but not waiting
  Producer p(bus);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  Inspector ins = Inspector::open(name);
  EXPECT_EQ(ins.snapshot().counters.wakeups, 0u) << "futex wake calls with nobody asleep";
  EXPECT_EQ(ins.snapshot().counters.data_sleepers, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(idle.next(0ns).status, ReadStatus::message);
  EXPECT_EQ(ins.snapshot().counters.wakeups, 0u) << "reading made wake calls with no producer asleep";

  // A consumer asleep in next() is woken by exactly the publish that follows.
  std::atomic<bool> got{false};
  std::thread sleeper([&] { got = idle.next(20s).status == ReadStatus::message; });
  ASSERT_TRUE([&] {
    const auto deadline = Clock::now() + 10s;
    while (ins.snapshot().counters.data_sleepers == 0)
      if (Clock::now() > deadline) return false;
    return true;
  }()) << "the waiting consumer never went to sleep";
  ASSERT_TRUE(p.publish(bytes("wake")));
  sleeper.join();
  EXPECT_TRUE(got);
  EXPECT_GE(ins.snapshot().counters.wakeups, 1u);
  EXPECT_EQ(ins.snapshot().counters.data_sleepers, 0u);
}

// A producer asleep for space asks to be woken once a chunk (capacity/16
// records) beyond what it needs is free; only a reader whose cursor crosses
// that mark makes the wake-up call, never one ahead of it or one that moved
// less. (The producer also looks again after a 10 ms slice on its own, so the
// test asserts which calls were made, not when it resumed.)
TEST(Counters, SleepingProducerIsWokenOnlyByAReaderThatFreesAChunk) {
  constexpr std::uint64_t kCap = 64;  // chunk and cursor release step: 64 / 16 = 4
  ScopedName name("space-wake");
  Bus bus = Bus::create(name, opts(kCap));
  Consumer slow(bus), fast(bus);
  RawSegment raw(name.path());
  Producer p(bus);
  for (std::uint64_t i = 0; i < kCap; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  for (std::uint64_t i = 0; i < kCap; ++i) ASSERT_EQ(fast.next(0ns).status, ReadStatus::message);
  std::atomic<bool> published{false};
  std::thread writer([&] { published = static_cast<bool>(p.publish(bytes("y"), 20s)); });
  ASSERT_TRUE([&] {
    const auto deadline = Clock::now() + 10s;
    while (raw.header().producer_sleeping.load() == 0)
      if (Clock::now() > deadline) return false;
    return true;
  }()) << "the producer never went to sleep on the full ring";
  Inspector ins = Inspector::open(name);
  const std::uint64_t wakes = ins.snapshot().counters.wakeups;
  // The producer needs seq 0 freed and asks to be woken when 4 more are.
  EXPECT_EQ(raw.header().space_wanted.load(), 1u + kCap / 16);
  // The fast reader, ahead of it, waits without a wake-up call.
  EXPECT_EQ(fast.next(0ns).status, ReadStatus::timeout);
  // Five reads publish cursor 4: below the mark, so no call.
  for (std::uint64_t i = 0; i < 5; ++i) ASSERT_EQ(slow.next(0ns).status, ReadStatus::message);
  EXPECT_EQ(ins.snapshot().counters.wakeups, wakes) << "a wake-up call before a chunk was free";
  // The read that publishes cursor 8 crosses it: at most one call (none if
  // the producer's slice ran out first and it already went on).
  for (std::uint64_t i = 0; i < 4; ++i) ASSERT_EQ(slow.next(0ns).status, ReadStatus::message);
  writer.join();
  EXPECT_TRUE(published);
  EXPECT_LE(ins.snapshot().counters.wakeups, wakes + 1);
}

// The crossing rule itself, without timing: a producer armed for a mark is
// woken exactly once by the reader that crosses it, and not by one already past.
TEST(Counters, ReaderCrossingTheProducersMarkMakesTheOneWake) {
  constexpr std::uint64_t kCap = 64;
  ScopedName name("space-mark");
  Bus bus = Bus::create(name, opts(kCap));
  Consumer reader(bus);
  RawSegment raw(name.path());
  Inspector ins = Inspector::open(name);
  {
    Producer p(bus);
    for (std::uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  }
  // Arm by hand as a sleeping producer would: woken once a reader reaches 8.
  raw.header().space_wanted.store(8);
  raw.header().producer_sleeping.store(1);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(reader.next(0ns).status, ReadStatus::message);  // publishes 4
  EXPECT_EQ(raw.header().producer_sleeping.load(), 1u);
  EXPECT_EQ(ins.snapshot().counters.wakeups, 0u);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(reader.next(0ns).status, ReadStatus::message);  // publishes 8
  EXPECT_EQ(raw.header().producer_sleeping.load(), 0u) << "the crossing reader did not clear the word";
  EXPECT_EQ(ins.snapshot().counters.wakeups, 1u);
  // Armed again for a mark this reader is already past: it does not wake.
  raw.header().producer_sleeping.store(1);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(reader.next(0ns).status, ReadStatus::message);  // publishes 12
  EXPECT_EQ(ins.snapshot().counters.wakeups, 1u);
  raw.header().producer_sleeping.store(0);
}

TEST(Counters, SegmentCountersTrackPublishingAndReading) {
  ScopedName name("counters");
  Bus bus = Bus::create(name, opts(4, Policy::overwrite));
  ConsumerOptions co;
  co.name = "counted";
  Consumer c(bus, co);
  Producer p(bus);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(p.publish(bytes("x")));
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::lost);
  for (std::uint64_t s = 6; s < 10; ++s) expect_message(c, s);
  (void)c.next(0ns);
  Snapshot snap = Inspector::open(name).snapshot();
  EXPECT_EQ(snap.counters.published, 10u);
  EXPECT_EQ(snap.head, 10u);
  EXPECT_EQ(snap.oldest, 6u);
  ASSERT_EQ(snap.readers.size(), 1u);
  EXPECT_EQ(snap.readers[0].name, "counted");
  EXPECT_EQ(snap.readers[0].delivered, 4u);
  EXPECT_EQ(snap.readers[0].lost, 6u);
  EXPECT_EQ(snap.readers[0].cursor, 10u);
  EXPECT_EQ(snap.readers[0].pid, ::getpid());
  EXPECT_EQ(snap.readers[0].liveness, Liveness::alive);
  EXPECT_TRUE(snap.producer.attached);
  EXPECT_EQ(snap.producer.pid, ::getpid());
}

}  // namespace
}  // namespace shmbus::test

namespace shmbus::test {
namespace {

// WaitOptions::interrupt: raised from another thread (as a signal handler
// would), it ends a wait that would last forever within milliseconds, as if
// its timeout had run out; a call that needs no wait is not affected.
TEST(Interrupted, AWaitForSpaceForMessagesOrForReadersEndsSoonAfterTheFlagIsRaised) {
  using Clock = std::chrono::steady_clock;
  auto ends_soon_after_raise = [](Interrupt& stop, auto&& blocking_call) {
    stop.clear();
    std::thread raiser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      stop.raise();
    });
    const auto t0 = Clock::now();
    blocking_call();
    const auto took = Clock::now() - t0;
    raiser.join();
    EXPECT_GE(took, std::chrono::milliseconds(90));
    EXPECT_LT(took, std::chrono::milliseconds(1000)) << "an interrupted wait lasted on";
  };
  ScopedName name("interrupt");
  Bus bus = Bus::create(name, opts(16));
  Interrupt stop;
  ConsumerOptions co;
  co.wait.interrupt = &stop;
  Consumer c(bus, co);
  ends_soon_after_raise(stop, [&] { EXPECT_EQ(c.next(forever).status, ReadStatus::timeout); });
  ProducerOptions po;
  po.wait.interrupt = &stop;
  {
    ProducerOptions wait_readers = po;
    wait_readers.wait_for_readers = 2;
    ends_soon_after_raise(stop, [&] {
      try {
        Producer p(bus, wait_readers);
        ADD_FAILURE() << "a producer waiting for readers was not interrupted";
      } catch (const Error& e) {
        EXPECT_EQ(e.errc(), Errc::timeout);
        EXPECT_THAT(e.what(), HasSubstr("interrupted while waiting for 2 readers (1 attached)"));
      }
    });
  }
  Producer p(bus, po);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  ends_soon_after_raise(stop, [&] { EXPECT_EQ(p.publish(bytes("y"), forever).status, PublishStatus::timeout); });
  // Still raised: a call that needs no wait goes through, one that would wait returns at once.
  EXPECT_EQ(c.next(forever).status, ReadStatus::message);
  const auto t0 = Clock::now();
  EXPECT_EQ(p.publish(bytes("y"), forever).status, PublishStatus::timeout);
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(500));
  stop.clear();
  EXPECT_EQ(c.next(0ns).status, ReadStatus::message);  // publishes the cursor past the first
  EXPECT_TRUE(p.publish(bytes("z"), 1s)) << "one record is free again";
}

}  // namespace
}  // namespace shmbus::test
