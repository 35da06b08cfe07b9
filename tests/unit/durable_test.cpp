// Durable reader names (ConsumerOptions::durable, Start::resume), why a stream
// ended (EndReason), and a bus removed by force.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <atomic>
#include <optional>
#include <thread>
#include <unistd.h>

#include <shmbus/inspect.hpp>
#include <shmbus/shmbus.hpp>

#include "test_support.hpp"

using namespace std::chrono_literals;
using shmbus::test::bytes;
using shmbus::test::ScopedName;

namespace {

shmbus::BusOptions small(std::uint64_t capacity = 64, shmbus::Policy policy = shmbus::Policy::block) {
  shmbus::BusOptions o;
  o.capacity = capacity;
  o.record_size = 64;
  o.max_readers = 4;
  o.policy = policy;
  return o;
}

shmbus::ConsumerOptions named(const std::string& name, shmbus::Start start = shmbus::Start::resume) {
  shmbus::ConsumerOptions o;
  o.name = name;
  o.durable = true;
  o.start = start;
  return o;
}

void publish_n(shmbus::Producer& p, int n) {
  for (int i = 0; i < n; ++i) ASSERT_TRUE(p.publish(bytes("m"), 1s));
}

std::uint64_t read_n(shmbus::Consumer& c, int n) {
  std::uint64_t last = 0;
  for (int i = 0; i < n; ++i) {
    const shmbus::ReadResult r = c.next(1s);
    EXPECT_EQ(r.status, shmbus::ReadStatus::message);
    last = r.message.seq;
  }
  return last;
}

}  // namespace

TEST(Durable, ANamedReaderResumesExactlyWhereItDetached) {
  ScopedName name("durable-resume");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);
  publish_n(p, 50);
  {
    shmbus::Consumer c(bus, named("archiver"));
    EXPECT_FALSE(c.resumed());
    EXPECT_EQ(c.cursor(), 0u);
    EXPECT_EQ(read_n(c, 21), 20u);
  }
  shmbus::Consumer again(bus, named("archiver"));
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.resume_gap(), 0u);
  EXPECT_EQ(again.cursor(), 21u);
  EXPECT_EQ(read_n(again, 1), 21u);
}

TEST(Durable, ASecondLiveHolderOfTheNameIsRefusedNamingItsPid) {
  ScopedName name("durable-held");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Consumer first(bus, named("dup"));
  try {
    shmbus::Consumer second(bus, named("dup"));
    FAIL() << "a second holder was accepted";
  } catch (const shmbus::Error& e) {
    EXPECT_EQ(e.errc(), shmbus::Errc::name_in_use);
    EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos) << e.what();
  }
  // The refusal took no reader slot.
  EXPECT_EQ(shmbus::Inspector::open(name).snapshot().readers.size(), 1u);
}

TEST(Durable, ABookmarkDoesNotHoldTheProducerBackAndTheGapIsCountedExactly) {
  ScopedName name("durable-gap");
  const shmbus::Bus bus = shmbus::Bus::create(name, small(16));
  shmbus::Producer p(bus);
  publish_n(p, 10);
  {
    shmbus::Consumer c(bus, named("slow"));
    read_n(c, 4);  // bookmark at 4
  }
  publish_n(p, 40);  // a block bus with no reader attached: never waits
  const std::uint64_t oldest = bus.oldest();
  ASSERT_GT(oldest, 4u);
  shmbus::Consumer c(bus, named("slow"));
  EXPECT_TRUE(c.resumed());
  EXPECT_EQ(c.resume_gap(), oldest - 4);
  EXPECT_EQ(c.lost(), oldest - 4);
  EXPECT_EQ(c.cursor(), oldest);
}

TEST(Durable, ACrashedHolderIsTakenOverAndNothingIsSkipped) {
  ScopedName name("durable-crash");
  const shmbus::Bus bus = shmbus::Bus::create(name, small(1024));
  shmbus::Producer p(bus);
  publish_n(p, 300);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    shmbus::Consumer c(bus, named("crasher"));
    for (int i = 0; i < 100; ++i) (void)c.next(1s);
    ::_exit(0);  // no detach: the bookmark is where it last published its cursor
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  shmbus::Consumer c(bus, named("crasher"));
  EXPECT_TRUE(c.resumed());
  // Redelivered, never skipped: at most 32 behind the 100 it read.
  EXPECT_LE(c.cursor(), 100u);
  EXPECT_GE(c.cursor(), 100u - 32);
}

// A reader that copies its messages (here: of an `overwrite` bus) and
// crosses padding after messages are in hand stores its name's cursor no
// further than the first of them: killed while it handles the batch, it
// gets them again.
TEST(Durable, ACopyingReaderNeverStoresItsNamePastTheBatchInHand) {
  for (const shmbus::Policy policy : {shmbus::Policy::overwrite, shmbus::Policy::block}) {
    SCOPED_TRACE(policy == shmbus::Policy::overwrite ? "overwrite" : "block, best-effort");
    ScopedName name("durable-batch");
    const shmbus::Bus bus = shmbus::Bus::create(name, small(8, policy));
    shmbus::Producer p(bus);
    shmbus::ConsumerOptions o = named("copier", shmbus::Start::earliest);
    o.hold_producer = false;
    shmbus::Consumer c(bus, o);
    publish_n(p, 6);  // seq 0..5
    // Three records do not fit the two left in the lap: padding at 6..7,
    // the message at 8..10 (over 0..2).
    ASSERT_EQ(p.publish(std::vector<std::byte>(120), 1s).seq, 8u);
    std::vector<shmbus::Message> out(16);
    shmbus::PollResult r;
    const auto got = c.read_batch(out, r, 1s);
    ASSERT_FALSE(got.empty());
    // The oldest messages were lapped by the one at 8: the batch is what
    // is left before the padding.
    EXPECT_LT(got.back().seq, 6u);
    const auto snap = shmbus::Inspector::open(name).snapshot();
    ASSERT_EQ(snap.bookmarks.size(), 1u);
    EXPECT_LE(snap.bookmarks[0].cursor, got.front().seq) << "stored past messages still in hand";
  }
}

TEST(Durable, ForgettingANameDropsItsBookmarkButNotWhileHeld) {
  ScopedName name("durable-forget");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);
  publish_n(p, 5);
  {
    shmbus::Consumer c(bus, named("gone"));
    read_n(c, 3);
    EXPECT_THROW(shmbus::forget_reader_name(name.str(), "gone"), shmbus::Error);
  }
  auto snap = shmbus::Inspector::open(name).snapshot();
  ASSERT_EQ(snap.bookmarks.size(), 1u);
  EXPECT_EQ(snap.bookmarks[0].name, "gone");
  EXPECT_EQ(snap.bookmarks[0].cursor, 3u);
  EXPECT_FALSE(snap.bookmarks[0].held);
  EXPECT_TRUE(shmbus::forget_reader_name(name.str(), "gone"));
  EXPECT_FALSE(shmbus::forget_reader_name(name.str(), "gone"));
  EXPECT_TRUE(shmbus::Inspector::open(name).snapshot().bookmarks.empty());
  shmbus::Consumer fresh(bus, named("gone"));
  EXPECT_FALSE(fresh.resumed());
  EXPECT_EQ(fresh.cursor(), 0u);
}

TEST(Durable, EveryBookmarkInUseIsAClearError) {
  ScopedName name("durable-full");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());  // 4 bookmarks
  for (int i = 0; i < 4; ++i) shmbus::Consumer c(bus, named("r" + std::to_string(i)));
  try {
    shmbus::Consumer c(bus, named("r4"));
    FAIL() << "a fifth name was accepted";
  } catch (const shmbus::Error& e) {
    EXPECT_EQ(e.errc(), shmbus::Errc::bookmarks_full);
    EXPECT_NE(std::string(e.what()).find("gc --forget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(shmbus::Inspector::open(name).snapshot().readers.size(), 0u);
}

TEST(Durable, NamesLongerThanTheSlotAreRefusedNotCut) {
  ScopedName name("durable-long");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::ConsumerOptions o;
  o.name = std::string(32, 'n');
  EXPECT_THROW(shmbus::Consumer(bus, o), shmbus::Error);
  o.name = std::string(31, 'n');
  EXPECT_NO_THROW(shmbus::Consumer(bus, o));
}

TEST(Durable, MovingOrForgettingANameNoReaderCouldHoldIsRefused) {
  ScopedName name("durable-badname");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  for (const std::string& bad : {std::string(), std::string(32, 'n')}) {
    try {
      shmbus::move_reader_name(name.str(), bad, {});
      FAIL() << "moved '" << bad << "'";
    } catch (const shmbus::Error& e) {
      EXPECT_EQ(e.errc(), shmbus::Errc::invalid_options) << e.what();
    }
    EXPECT_THROW(shmbus::forget_reader_name(name.str(), bad), shmbus::Error);
  }
  EXPECT_FALSE(shmbus::forget_reader_name(name.str(), std::string(31, 'n')));  // could exist; does not
}

TEST(Durable, ResumedIsTrueOnlyForAResumeThatFoundItsName) {
  ScopedName name("durable-resumed");
  const shmbus::Bus bus = shmbus::Bus::create(name, small());
  shmbus::Producer p(bus);
  publish_n(p, 10);
  { shmbus::Consumer c(bus, named("keeper")); read_n(c, 4); }
  {
    shmbus::Consumer fresh(bus, named("keeper", shmbus::Start::earliest));  // remembers, does not resume
    EXPECT_FALSE(fresh.resumed());
    EXPECT_EQ(fresh.cursor(), 0u);
  }
  shmbus::Consumer again(bus, named("keeper"));
  EXPECT_TRUE(again.resumed());
  EXPECT_EQ(again.cursor(), 0u);  // where the durable reader above left it
}

TEST(EndReasons, AClosedBusAndADeadProducerAreToldApart) {
  ScopedName closed_name("end-closed"), died_name("end-died");
  const shmbus::Bus closed_bus = shmbus::Bus::create(closed_name, small());
  const shmbus::Bus died_bus = shmbus::Bus::create(died_name, small());
  shmbus::Consumer closed_c(closed_bus), died_c(died_bus);
  {
    shmbus::Producer p(closed_bus);
    publish_n(p, 1);
  }  // closes
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    shmbus::Producer p(died_bus);
    (void)p.publish(bytes("x"));
    ::_exit(0);  // no close
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(closed_c.next(1s).status, shmbus::ReadStatus::message);
  const shmbus::ReadResult a = closed_c.next(1s);
  EXPECT_EQ(a.status, shmbus::ReadStatus::end_of_stream);
  EXPECT_EQ(a.end_reason, shmbus::EndReason::closed);
  EXPECT_EQ(died_c.next(1s).status, shmbus::ReadStatus::message);
  const shmbus::ReadResult b = died_c.next(2s);
  EXPECT_EQ(b.status, shmbus::ReadStatus::end_of_stream);
  EXPECT_EQ(b.end_reason, shmbus::EndReason::producer_died);
  EXPECT_EQ(died_c.end_reason(), shmbus::EndReason::producer_died);
}

TEST(EndReasons, ABusRemovedByForceEndsStreamsAndStopsItsProducer) {
  ScopedName name("end-removed");
  const shmbus::Bus bus = shmbus::Bus::create(name, small(4));
  shmbus::Producer p(bus);
  shmbus::Consumer c(bus);
  publish_n(p, 4);  // full: the next publish would wait for c
  ASSERT_TRUE(shmbus::remove_in_use(name.str()));
  EXPECT_FALSE(shmbus::Bus::exists(name.str()));
  EXPECT_EQ(p.publish(bytes("x"), 1s).status, shmbus::PublishStatus::closed);
  EXPECT_EQ(read_n(c, 4), 3u);
  const shmbus::ReadResult r = c.next(1s);
  EXPECT_EQ(r.status, shmbus::ReadStatus::end_of_stream);
  EXPECT_EQ(r.end_reason, shmbus::EndReason::removed);
}

TEST(Durable, ARefusedAttachLeavesNoNameBehind) {
  ScopedName name("durable-refused");
  shmbus::BusOptions o = small();
  o.max_readers = 1;
  const shmbus::Bus bus = shmbus::Bus::create(name, o);
  shmbus::Consumer holder(bus);
  try {
    shmbus::Consumer c(bus, named("late"));
    FAIL() << "attached to a full reader table";
  } catch (const shmbus::Error& e) {
    EXPECT_EQ(e.errc(), shmbus::Errc::reader_table_full);
  }
  EXPECT_TRUE(shmbus::Inspector::open(name).snapshot().bookmarks.empty());
}
