// Moving a remembered reader name (shmbus::move_reader_name, what
// shmbus-inspect reset does): each target, the refusals, and that a
// consumer resuming under the name afterwards starts exactly there.
#include <gtest/gtest.h>
#include <time.h>

#include <string>
#include <thread>

#include <shmbus/inspect.hpp>
#include <shmbus/shmbus.hpp>

#include "test_support.hpp"

using namespace std::chrono_literals;
using shmbus::test::bytes;
using shmbus::test::ScopedName;
using Kind = shmbus::ReaderNameTarget::Kind;

namespace {

shmbus::BusOptions small() {
  shmbus::BusOptions o;
  o.capacity = 64;
  o.record_size = 64;  // 40 bytes of payload: a longer message spans records
  o.max_readers = 4;
  return o;
}

shmbus::ConsumerOptions resume(const std::string& name) {
  shmbus::ConsumerOptions o;
  o.name = name;
  o.durable = true;
  o.start = shmbus::Start::resume;
  return o;
}

// Leaves the name `name` remembered at `cursor`.
void remember(const shmbus::Bus& bus, const std::string& name, std::uint64_t cursor) {
  shmbus::ConsumerOptions o = resume(name);
  o.start = shmbus::Start::sequence;
  o.start_seq = cursor;
  shmbus::Consumer c(bus, o);
}

// The first message a consumer resuming under `name` reads, and its payload.
std::pair<std::uint64_t, std::string> first_resumed(const shmbus::Bus& bus, const std::string& name) {
  shmbus::Consumer c(bus, resume(name));
  EXPECT_TRUE(c.resumed());
  EXPECT_EQ(c.resume_gap(), 0u);
  const shmbus::ReadResult r = c.next(1s);
  EXPECT_EQ(r.status, shmbus::ReadStatus::message);
  return {r.message.seq, std::string(reinterpret_cast<const char*>(r.message.payload.data()), r.message.payload.size())};
}

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

TEST(ResetName, EachTargetIsWhereTheNextResumingConsumerStarts) {
  ScopedName name("reset-targets");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::ProducerOptions po;
  po.timestamps = shmbus::Timestamps::precise;
  shmbus::Producer p(bus, po);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(p.publish(bytes("early " + std::to_string(i)), 1s));
  // Precise stamps come from the TSC, re-anchored to CLOCK_REALTIME every
  // millisecond (PublishClock): a few milliseconds apart, the two batches
  // are on either side of `between` whatever the scale error.
  std::this_thread::sleep_for(5ms);
  const std::uint64_t between = now_ns();
  std::this_thread::sleep_for(5ms);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(p.publish(bytes("late " + std::to_string(i)), 1s));
  remember(bus, "r", 15);

  auto moved = shmbus::move_reader_name(name, "r", {Kind::earliest, 0});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->from, 15u);
  EXPECT_EQ(moved->to, 0u);
  EXPECT_EQ(first_resumed(bus, "r"), std::make_pair(std::uint64_t{0}, std::string("early 0")));

  moved = shmbus::move_reader_name(name, "r", {Kind::sequence, 7});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->from, 1u);  // where the consumer above stopped
  EXPECT_EQ(moved->to, 7u);
  EXPECT_EQ(first_resumed(bus, "r"), std::make_pair(std::uint64_t{7}, std::string("early 7")));

  moved = shmbus::move_reader_name(name, "r", {Kind::time, between});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->to, 10u);
  EXPECT_GE(moved->timestamp_ns, between);
  EXPECT_EQ(moved->unstamped, 0u);
  EXPECT_EQ(first_resumed(bus, "r"), std::make_pair(std::uint64_t{10}, std::string("late 0")));

  moved = shmbus::move_reader_name(name, "r", {Kind::latest, 0});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->to, 20u);
  EXPECT_EQ(moved->head, 20u);
  ASSERT_TRUE(p.publish(bytes("newest"), 1s));
  EXPECT_EQ(first_resumed(bus, "r"), std::make_pair(std::uint64_t{20}, std::string("newest")));

  // A time after every message: the next one published.
  moved = shmbus::move_reader_name(name, "r", {Kind::time, now_ns() + 3'600'000'000'000u});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->to, 21u);
  EXPECT_EQ(moved->timestamp_ns, 0u);
}

TEST(ResetName, RefusedWhileALiveReaderHoldsTheName) {
  ScopedName name("reset-held");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes("m"), 1s));
  remember(bus, "r", 3);
  {
    shmbus::Consumer holder(bus, resume("r"));
    try {
      (void)shmbus::move_reader_name(name, "r", {Kind::earliest, 0});
      FAIL() << "moved a name a live reader holds";
    } catch (const shmbus::Error& e) {
      EXPECT_EQ(e.errc(), shmbus::Errc::name_in_use);
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos) << e.what();
    }
  }
  // Let go, it moves; the holder's cursor (3, it read nothing) is where it moved from.
  const auto moved = shmbus::move_reader_name(name, "r", {Kind::earliest, 0});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->from, 3u);
  EXPECT_EQ(moved->to, 0u);
}

TEST(ResetName, ASequenceOutsideTheRingOrInsideASpanIsRefusedAndNothingMoves) {
  ScopedName name("reset-refused");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes("m"), 1s));
  ASSERT_TRUE(p.publish(bytes(std::string(150, 'x')), 1s));  // seq 5..7: 3 records of 64 B hold 168
  ASSERT_TRUE(p.publish(bytes("after"), 1s));                 // seq 8
  remember(bus, "r", 2);
  const auto refused = [&](std::uint64_t seq, const std::string& says) {
    try {
      (void)shmbus::move_reader_name(name, "r", {Kind::sequence, seq});
      ADD_FAILURE() << "moved to " << seq;
    } catch (const shmbus::Error& e) {
      EXPECT_EQ(e.errc(), shmbus::Errc::not_retained);
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(10, "sequence 10 is not retained (the bus holds 0..8)");
  refused(6, "inside a message that spans records (the next message starts at 8)");
  refused(7, "(the next message starts at 8)");
  // Nothing moved: the name still resumes at 2.
  EXPECT_EQ(first_resumed(bus, "r").first, 2u);
  // The span's own sequence, and head, are fine.
  EXPECT_EQ(shmbus::move_reader_name(name, "r", {Kind::sequence, 5})->to, 5u);
  EXPECT_EQ(first_resumed(bus, "r"), std::make_pair(std::uint64_t{5}, std::string(150, 'x')));
  EXPECT_EQ(shmbus::move_reader_name(name, "r", {Kind::sequence, 9})->to, 9u);
}

TEST(ResetName, ATimeOnRecordsWithoutTimestampsIsRefusedSayingSo) {
  ScopedName name("reset-unstamped");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);  // Timestamps::off
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes("m"), 1s));
  remember(bus, "r", 2);
  try {
    (void)shmbus::move_reader_name(name, "r", {Kind::time, 1});
    FAIL() << "resolved a time on records without timestamps";
  } catch (const shmbus::Error& e) {
    EXPECT_EQ(e.errc(), shmbus::Errc::not_retained);
    EXPECT_NE(std::string(e.what()).find("carries a timestamp"), std::string::npos) << e.what();
  }
}

TEST(ResetName, AnUnknownNameIsNotCreated) {
  ScopedName name("reset-unknown");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  EXPECT_FALSE(shmbus::move_reader_name(name, "nobody", {Kind::earliest, 0}));
  EXPECT_TRUE(shmbus::Inspector::open(name).snapshot().bookmarks.empty());
}
