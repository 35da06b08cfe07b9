// WaitSet: one thread waiting on many consumers, by wait() or through a
// descriptor watched with poll(). Members with news and only those, every
// kind of news (a message, the end of a stream, a producer that died), a
// sleep that a producer in another thread or process ends, and members
// that leave while the set's thread watches them.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

struct Buses {
  std::vector<std::unique_ptr<ScopedName>> names;
  std::vector<std::unique_ptr<Bus>> buses;
  std::vector<std::unique_ptr<Consumer>> consumers;
  std::vector<std::unique_ptr<Producer>> producers;
  explicit Buses(int n, bool producers_too = true) {
    for (int i = 0; i < n; ++i) {
      names.push_back(std::make_unique<ScopedName>("waitset"));
      buses.push_back(std::make_unique<Bus>(Bus::create(*names.back(), small_block(64))));
      consumers.push_back(std::make_unique<Consumer>(*buses.back()));
      if (producers_too) producers.push_back(std::make_unique<Producer>(*buses.back()));
    }
  }
};

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

// Reads every message `c` has now; returns how many.
int drain(Consumer& c) {
  int n = 0;
  while (c.next(0ns).status == ReadStatus::message) ++n;
  return n;
}

TEST(WaitSet, ReturnsTheMembersWithNewsAndOnlyThose) {
  Buses b(3);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  EXPECT_TRUE(set.wait(0ns).empty());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(set.wait(30ms).empty());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
  ASSERT_TRUE(b.producers[1]->publish(bytes("one")));
  ASSERT_TRUE(b.producers[2]->publish(bytes("two")));
  auto ready = set.wait(1s);
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0], b.consumers[1].get());
  EXPECT_EQ(ready[1], b.consumers[2].get());
  // A member stays ready until its news is taken.
  EXPECT_EQ(set.wait(0ns).size(), 2u);
  EXPECT_EQ(drain(*b.consumers[1]), 1);
  ready = set.wait(0ns);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], b.consumers[2].get());
  EXPECT_EQ(drain(*b.consumers[2]), 1);
  EXPECT_TRUE(set.wait(0ns).empty());
}

// A member is news when next() has something to say, and only then: a tag
// in the record past head (a stray store, or a record being written) is
// not, as next() does not read it before head is past it. Otherwise a
// set would return the member at once, again and again, while next()
// times out.
TEST(WaitSet, ATagPastHeadIsNotNewsAsNextDoesNotReadIt) {
  Buses b(1);
  WaitSet set;
  set.add(*b.consumers[0]);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.producers[0]->publish(bytes("m")));
  EXPECT_EQ(drain(*b.consumers[0]), 3);
  {
    RawSegment raw(b.names[0]->path());
    // The tag a record two laps on would have, in the slot of seq 3.
    raw.record_header(3).tag.store(3 + 2 * 64 + 1);
  }
  EXPECT_TRUE(set.wait(0ns).empty());
  EXPECT_TRUE(set.wait(30ms).empty()) << "a tag past head woke the set";
  EXPECT_EQ(b.consumers[0]->next(0ns).status, ReadStatus::timeout);
  // The record written over it is news, and read.
  ASSERT_TRUE(b.producers[0]->publish(bytes("next")));
  ASSERT_EQ(set.wait(1s).size(), 1u);
  const ReadResult r = b.consumers[0]->next(0ns);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 3u);
}

TEST(WaitSet, ASleepingWaitIsEndedByAPublishAndShowsAsleepMeanwhile) {
  Buses b(3);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  std::atomic<bool> saw_sleeping{false};
  std::thread publisher([&] {
    const Inspector insp = Inspector::open(*b.names[2]);
    for (int i = 0; i < 2000 && !saw_sleeping; ++i) {
      const auto snap = insp.snapshot();
      for (const auto& r : snap.readers)
        if (r.sleeping) saw_sleeping = true;
      std::this_thread::sleep_for(1ms);
    }
    (void)b.producers[2]->publish(bytes("late"));
  });
  const auto ready = set.wait(10s);
  publisher.join();
  EXPECT_TRUE(saw_sleeping) << "the wait never went to sleep on the bus";
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], b.consumers[2].get());
  const ReadResult r = b.consumers[2]->next(0ns);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(text(r.message.payload), "late");
}

TEST(WaitSet, TheDescriptorIsReadableWhileAMemberHasNewsAndQuietOtherwise) {
  Buses b(3);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  const int fd = set.fd();
  EXPECT_EQ(set.fd(), fd);
  ASSERT_TRUE(readable(fd, 0)) << "readable at first: the caller looks";
  EXPECT_TRUE(set.wait(0ns).empty());
  EXPECT_FALSE(readable(fd, 50)) << "nothing to read: quiet";
  for (int round = 0; round < 50; ++round) {
    const int bus = round % 3;
    ASSERT_TRUE(b.producers[bus]->publish(bytes("x")));
    ASSERT_TRUE(readable(fd, 5000)) << "round " << round;
    auto ready = set.wait(0ns);
    ASSERT_EQ(ready.size(), 1u) << "round " << round;
    EXPECT_EQ(ready[0], b.consumers[bus].get());
    // Not taken yet: still readable, still returned.
    EXPECT_TRUE(readable(fd, 0));
    EXPECT_EQ(set.wait(0ns).size(), 1u);
    EXPECT_EQ(drain(*b.consumers[bus]), 1);
    EXPECT_TRUE(set.wait(0ns).empty());
    EXPECT_FALSE(readable(fd, 0)) << "round " << round;
  }
}

TEST(WaitSet, TheEndOfAStreamIsNewsOnceAndAProducerThatDiedIsNoticed) {
  Buses b(2, false);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  const int fd = set.fd();
  {
    Producer p(*b.buses[0]);
    ASSERT_TRUE(p.publish(bytes("last")));
  }  // closed: end of stream
  ASSERT_TRUE(readable(fd, 5000));
  auto ready = set.wait(0ns);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(b.consumers[0]->next(0ns).status, ReadStatus::message);
  EXPECT_EQ(set.wait(0ns).size(), 1u) << "the end of the stream is news";
  EXPECT_EQ(b.consumers[0]->next(0ns).status, ReadStatus::end_of_stream);
  EXPECT_TRUE(set.wait(0ns).empty()) << "and only once";

  // A producer in another process, killed: the set's thread notices.
  int ready_pipe[2];
  ASSERT_EQ(::pipe(ready_pipe), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Bus bus = Bus::open(*b.names[1]);
    Producer p(bus);
    char c = 'r';
    (void)!::write(ready_pipe[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready_pipe[0], &c, 1), 1);
  EXPECT_TRUE(set.wait(0ns).empty());
  EXPECT_FALSE(readable(fd, 100));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(readable(fd, 5000)) << "a dead producer is noticed within a liveness period";
  ready = set.wait(0ns);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], b.consumers[1].get());
  const ReadResult r = b.consumers[1]->next(0ns);
  EXPECT_EQ(r.status, ReadStatus::end_of_stream);
  EXPECT_EQ(r.end_reason, EndReason::producer_died);
  ::close(ready_pipe[0]);
  ::close(ready_pipe[1]);
}

TEST(WaitSet, AMemberRemovedWhileTheThreadWatchesItCanBeDestroyedAtOnce) {
  Buses b(2);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  const int fd = set.fd();
  for (int i = 0; i < 200; ++i) {
    ScopedName name("waitset-gone");
    auto bus = std::make_unique<Bus>(Bus::create(name, small_block(64)));
    auto c = std::make_unique<Consumer>(*bus);
    set.add(*c);
    EXPECT_EQ(set.size(), 3u);
    while (!set.wait(0ns).empty()) {
    }  // armed: the thread watches all three
    set.remove(*c);
    c.reset();
    bus.reset();  // unmapped: the thread must not look at it again
  }
  ASSERT_TRUE(b.producers[0]->publish(bytes("still")));
  ASSERT_TRUE(readable(fd, 5000));
  const auto ready = set.wait(0ns);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0], b.consumers[0].get());
}

TEST(WaitSet, RefusesAMemberTwiceAndMoreThanItHolds) {
  Buses b(1, false);
  WaitSet set;
  set.add(*b.consumers[0]);
  try {
    set.add(*b.consumers[0]);
    FAIL() << "added twice";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::invalid_options);
  }
  set.remove(*b.consumers[0]);
  set.remove(*b.consumers[0]);  // not a member: nothing
  EXPECT_EQ(set.size(), 0u);
  EXPECT_TRUE(set.wait(1s).empty()) << "an empty set has nothing to wait for";

  // One bus, as many readers as a set holds and one more.
  ScopedName name("waitset-full");
  BusOptions o = small_block(64);
  o.max_readers = WaitSet::kMaxMembers + 1;
  Bus bus = Bus::create(name, o);
  std::vector<std::unique_ptr<Consumer>> many;
  for (std::size_t i = 0; i <= WaitSet::kMaxMembers; ++i) many.push_back(std::make_unique<Consumer>(bus));
  for (std::size_t i = 0; i < WaitSet::kMaxMembers; ++i) set.add(*many[i]);
  try {
    set.add(*many.back());
    FAIL() << "a member past kMaxMembers was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::invalid_options);
    EXPECT_THAT(e.what(), HasSubstr("at most 127 consumers"));
  }
  EXPECT_EQ(set.size(), WaitSet::kMaxMembers);
  set.remove(*many[0]);
  set.add(*many.back());  // room again
  EXPECT_EQ(set.size(), WaitSet::kMaxMembers);
}

// A batch can end with the cursor published short of where the consumer is
// (the cursor is never published past a message in hand). Waiting
// in a set must publish it, as every consumer's wait does, or a producer
// waiting for those records and the set waiting for the producer never
// meet.
TEST(WaitSet, WaitingPublishesTheCursorAProducerWaitsFor) {
  Buses b(1);
  Consumer& c = *b.consumers[0];
  Producer& p = *b.producers[0];
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.publish(bytes("x")));
  for (int i = 0; i < 20; ++i) ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  ASSERT_EQ(c.next(0ns).status, ReadStatus::timeout);  // cursor 20 published
  ASSERT_TRUE(p.publish(bytes("20")));
  ASSERT_TRUE(p.skip_to(80, 1s));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("8x"), 1s));  // 80..83: the ring is full from 20
  std::array<Message, 64> out;
  PollResult pr;
  ASSERT_EQ(c.read_batch(out, pr, 0ns).size(), 1u);  // 20: the gap after it ends the batch
  ASSERT_EQ(c.read_batch(out, pr, 0ns).size(), 4u);  // the gap told first, then 80..83
  EXPECT_EQ(pr.lost, 59u);
  WaitSet set;
  set.add(c);
  std::atomic<bool> published{false};
  std::thread producer([&] { published = static_cast<bool>(p.publish(bytes("84"), 5s)); });
  const auto ready = set.wait(5s);
  producer.join();
  EXPECT_TRUE(published) << "the producer waited for a cursor the set's wait never published";
  ASSERT_EQ(ready.size(), 1u);
  const ReadResult r = c.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 84u);
}

// A consumer asleep in next() while the set's thread has armed its slot:
// the inspector's count of sleepers comes back to zero.
TEST(WaitSet, SleepersAreCountedOnceWhenAConsumerAndTheSetSleepOnOneSlot) {
  Buses b(1);
  {
    WaitSet set;
    set.add(*b.consumers[0]);
    const int fd = set.fd();
    EXPECT_TRUE(set.wait(0ns).empty());  // the thread arms the slot
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(b.consumers[0]->next(30ms).status, ReadStatus::timeout);  // and so does next()
    (void)fd;
  }
  EXPECT_EQ(Inspector::open(*b.names[0]).snapshot().counters.data_sleepers, 0u);
}

// A child forked after the set's thread started has no such thread: its
// copy of the set goes without waiting for it.
TEST(WaitSet, ACopyInAForkedChildIsDestroyedWithoutItsThread) {
  Buses b(1);
  auto set = std::make_unique<WaitSet>();
  set->add(*b.consumers[0]);
  (void)set->fd();
  EXPECT_TRUE(set->wait(0ns).empty());  // the thread watches
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    set.reset();
    ::_exit(0);
  }
  int status = 0;
  for (int i = 0; i < 500 && ::waitpid(child, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(10ms);
  if (::waitpid(child, &status, WNOHANG) == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the child hung destroying its copy of the set";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(b.producers[0]->publish(bytes("parent")));
  EXPECT_TRUE(readable(set->fd(), 5000)) << "the parent's set still works";
}

// A producer process publishing to three buses in turns; one thread reads
// them all through the descriptor: every message, in order, per bus.
TEST(WaitSet, OneThreadReadsThreeBusesOfAnotherProcessInOrder) {
  Buses b(3, false);
  WaitSet set;
  for (auto& c : b.consumers) set.add(*c);
  constexpr std::uint64_t kPerBus = 20000;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::vector<Producer> ps;
    for (auto& n : b.names) ps.emplace_back(Bus::open(*n));
    for (std::uint64_t i = 0; i < kPerBus; ++i)
      for (std::size_t k = 0; k < ps.size(); ++k) {
        // A pause now and then: the reader goes to sleep and is woken.
        if (i % 1000 == 999) std::this_thread::sleep_for(2ms);
        if (!ps[(k + i) % 3].publish(std::as_bytes(std::span(&i, 1)), 10s)) ::_exit(3);
      }
    ::_exit(0);
  }
  const int fd = set.fd();
  std::vector<std::uint64_t> next(3, 0);
  int ended = 0;
  while (ended < 3) {
    ASSERT_TRUE(readable(fd, 10000)) << "stalled at " << next[0] << " " << next[1] << " " << next[2];
    for (Consumer* c : set.wait(0ns)) {
      std::size_t bus = 0;
      while (b.consumers[bus].get() != c) ++bus;
      for (;;) {
        const ReadResult r = c->next(0ns);
        if (r.status == ReadStatus::message) {
          std::uint64_t v;
          std::memcpy(&v, r.message.payload.data(), sizeof v);
          ASSERT_EQ(v, next[bus]) << "bus " << bus;
          ++next[bus];
        } else if (r.status == ReadStatus::end_of_stream) {
          ++ended;
          break;
        } else {
          ASSERT_EQ(r.status, ReadStatus::timeout);
          break;
        }
      }
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (std::size_t k = 0; k < 3; ++k) EXPECT_EQ(next[k], kPerBus) << "bus " << k;
}

}  // namespace
}  // namespace shmbus::test
