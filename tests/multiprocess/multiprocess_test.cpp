// Real processes on one bus: the producer and the consumers are separate
// processes (shmbus_test_peer, started with fork + exec), except where the test
// process itself plays the producer to control it precisely.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <ostream>
#include <thread>

#include <gtest/gtest.h>

#include "payload.hpp"
#include "peer_process.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;

BusOptions options(Policy policy, std::uint64_t capacity, std::uint32_t max_readers = 8) {
  BusOptions o;
  o.policy = policy;
  o.capacity = capacity;
  o.record_size = 128;
  o.max_readers = max_readers;
  return o;
}

void publish_in_process(Producer& p, std::uint64_t count) {
  const std::size_t max = p.bus().info().max_payload;
  std::vector<std::byte> buf(max);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t seq = p.next_seq();
    const std::size_t n = make_payload(seq, max, buf.data());
    PublishResult r = p.publish(std::span<const std::byte>(buf.data(), n), 10s);
    ASSERT_EQ(r.status, PublishStatus::ok) << "seq " << seq;
    ASSERT_EQ(r.seq, seq);
  }
}

// Polls the segment until `done()` (there is nothing to wait on for an
// outside observer); fails with `what` after `timeout`.
template <class F>
bool eventually(F&& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// ---------------------------------------------------------------- a million messages

struct Fanout {
  Policy policy;
  int consumers;
  const char* producer_mode;
};

void PrintTo(const Fanout& f, std::ostream* os) {
  *os << to_string(f.policy) << ", " << f.consumers << " consumer(s), producer " << f.producer_mode;
}

class MillionMessages : public ::testing::TestWithParam<Fanout> {};

TEST_P(MillionMessages, EveryConsumerGetsEveryMessageOrExactlyCountedLosses) {
  const Fanout f = GetParam();
  const std::uint64_t total = message_count();
  ScopedName name("million");
  Bus bus = Bus::create(name, options(f.policy, 4096));
  const std::size_t max = bus.info().max_payload;

  std::vector<std::unique_ptr<Peer>> consumers;
  for (int i = 0; i < f.consumers; ++i) {
    std::vector<std::string> args = {"consumer", name.str(), "--expect-first", "0", "--name",
                                     "c" + std::to_string(i)};
    if (i % 2 == 1) args.push_back("--poll");  // half of them read in batches
    consumers.push_back(std::make_unique<Peer>(args));
  }
  const auto start = Clock::now();
  Peer producer({"producer", name.str(), std::to_string(total), "--wait-readers", std::to_string(f.consumers),
                 "--mode", f.producer_mode, "--close"});
  EXPECT_EQ(producer.wait_exit(120s), 0) << dump(producer);

  const std::uint64_t expected_hash = expected_stream_hash(0, total - 1, max);
  for (auto& c : consumers) {
    SCOPED_TRACE(c->describe());
    Fields r = result_of(*c, 60s);
    EXPECT_EQ(u64(r, "errors"), 0u) << dump(*c);
    EXPECT_EQ(u64(r, "last"), total - 1) << "the last message is never overwritten";
    EXPECT_EQ(u64(r, "delivered") + u64(r, "lost"), total);
    EXPECT_EQ(u64(r, "lib_delivered"), u64(r, "delivered"));
    EXPECT_EQ(u64(r, "lib_lost"), u64(r, "lost"));
    if (f.policy == Policy::block) {
      EXPECT_EQ(u64(r, "delivered"), total);
      EXPECT_EQ(u64(r, "lost"), 0u);
      EXPECT_EQ(u64(r, "first"), 0u);
      EXPECT_EQ(u64(r, "hash"), expected_hash) << "stream hash over seq 0.." << total - 1;
    }
    std::printf("[ info     ] %s: delivered %llu, lost %llu\n", c->describe().c_str(),
                static_cast<unsigned long long>(u64(r, "delivered")), static_cast<unsigned long long>(u64(r, "lost")));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("[ info     ] %llu messages to %d consumer(s), %s, in %.2f s (%.2f M msg/s)\n",
              static_cast<unsigned long long>(total), f.consumers, to_string(f.policy), secs, total / secs / 1e6);
  EXPECT_EQ(bus.head(), total);
}

INSTANTIATE_TEST_SUITE_P(
    , MillionMessages,
    ::testing::Values(Fanout{Policy::block, 1, "publish"}, Fanout{Policy::block, 4, "claim"},
                      Fanout{Policy::overwrite, 1, "publish"}, Fanout{Policy::overwrite, 4, "batch"}),
    [](const auto& p) {
      return std::string(p.param.policy == Policy::block ? "Block" : "Overwrite") + "To" +
             std::to_string(p.param.consumers) + "Consumers";
    });

TEST(OverwriteLosses, ReaderLappedByAProducerProcessIsToldExactlyHowManyItLost) {
  constexpr std::uint64_t kCap = 4096, kExtra = 1000;
  ScopedName name("exact-loss");
  Bus bus = Bus::create(name, options(Policy::overwrite, kCap));
  const std::size_t max = bus.info().max_payload;
  Consumer c(bus);  // attached at 0, reads nothing until the producer is done
  Peer producer({"producer", name.str(), std::to_string(kCap + kExtra), "--close"});
  ASSERT_EQ(producer.wait_exit(60s), 0) << dump(producer);

  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::lost) << to_string(r.status);
  EXPECT_EQ(r.lost, kExtra) << "exactly the overwritten records are lost";
  StreamHash h;
  for (std::uint64_t seq = kExtra; seq < kCap + kExtra; ++seq) {
    r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message) << "seq " << seq;
    ASSERT_EQ(r.message.seq, seq);
    ASSERT_TRUE(check_payload(seq, max, r.message.payload)) << "seq " << seq;
    h.add(seq, r.message.payload);
  }
  EXPECT_EQ(h.value, expected_stream_hash(kExtra, kCap + kExtra - 1, max));
  EXPECT_EQ(c.next(1s).status, ReadStatus::end_of_stream);
  EXPECT_EQ(c.lost(), kExtra);
  EXPECT_EQ(c.delivered(), kCap);
}

// ---------------------------------------------------------------- late joiners

TEST(LateJoiners, StartAtEarliestLatestOrAGivenSequence) {
  ScopedName name("late");
  Bus bus = Bus::create(name, options(Policy::block, 1024));
  const std::size_t max = bus.info().max_payload;
  auto producer = std::make_unique<Producer>(bus);
  publish_in_process(*producer, 2000);
  // No readers yet: the ring retains the newest records. A `block` producer
  // protects them from joiners in chunks (at most capacity/16 fewer).
  const std::uint64_t oldest = bus.oldest();
  ASSERT_GE(oldest, 2000u - 1024u);
  ASSERT_LE(oldest, 2000u - 1024u + 1024u / 16);

  struct Joiner {
    std::string start;
    std::uint64_t first;
  };
  const Joiner joiners[] = {
      {"earliest", oldest}, {"latest", 2000}, {"1500", 1500}, {std::to_string(oldest), oldest}, {"2000", 2000}};
  std::vector<std::unique_ptr<Peer>> peers;
  for (const Joiner& j : joiners) {
    peers.push_back(std::make_unique<Peer>(std::vector<std::string>{"consumer", name.str(), "--start", j.start}));
    auto line = peers.back()->wait_line("attached", 10s);
    ASSERT_TRUE(line) << dump(*peers.back());
    EXPECT_EQ(u64(parse_fields(*line), "cursor"), j.first) << j.start;
  }
  // Gone (overwritten) and not yet published are refused.
  for (const std::string& gone : {std::string("0"), std::to_string(oldest - 1), std::string("2001")}) {
    Peer p({"consumer", name.str(), "--start", gone});
    EXPECT_EQ(p.wait_exit(10s), 3) << "start " << gone << " must be not_retained; " << dump(p);
  }

  publish_in_process(*producer, 100);
  producer->close();
  for (std::size_t i = 0; i < peers.size(); ++i) {
    SCOPED_TRACE(peers[i]->describe());
    Fields r = result_of(*peers[i], 30s);
    EXPECT_EQ(u64(r, "errors"), 0u);
    EXPECT_EQ(u64(r, "first"), joiners[i].first);
    EXPECT_EQ(u64(r, "last"), 2099u);
    EXPECT_EQ(u64(r, "delivered"), 2100 - joiners[i].first);
    EXPECT_EQ(u64(r, "lost"), 0u);
    EXPECT_EQ(u64(r, "hash"), expected_stream_hash(joiners[i].first, 2099, max));
  }
}

TEST(LateJoiners, OverwriteLateJoinerAtEarliestGetsTheNewestCapacityRecords) {
  ScopedName name("late-ow");
  Bus bus = Bus::create(name, options(Policy::overwrite, 256));
  const std::size_t max = bus.info().max_payload;
  Producer producer(bus);
  publish_in_process(producer, 1000);
  Peer p({"consumer", name.str(), "--start", "earliest"});
  ASSERT_TRUE(p.wait_line("attached", 10s)) << dump(p);
  producer.close();
  Fields r = result_of(p, 30s);
  EXPECT_EQ(u64(r, "first"), 1000u - 256u);
  EXPECT_EQ(u64(r, "last"), 999u);
  EXPECT_EQ(u64(r, "delivered"), 256u);
  EXPECT_EQ(u64(r, "lost"), 0u);
  EXPECT_EQ(u64(r, "hash"), expected_stream_hash(744, 999, max));
}

// ---------------------------------------------------------------- crashes

struct Killed {
  bool reap_at_once;  // false: the dead reader stays a zombie
  Isolation isolation;
};

class KilledReader : public ::testing::TestWithParam<Killed> {};

TEST_P(KilledReader, BlockedProducerResumesWhenTheReaderIsKilled) {
  const bool reap_at_once = GetParam().reap_at_once;
  const Isolation iso = GetParam().isolation;
  if (iso != Isolation::none && !isolation_unavailable().empty()) GTEST_SKIP() << isolation_unavailable();
  // Sanitizer runtimes read /proc: a sanitized peer without it tests them.
  if (sizeof(SHMBUS_TEST_SANITIZE) > 1 && iso == Isolation::own_namespaces)
    GTEST_SKIP() << "built with -fsanitize=" SHMBUS_TEST_SANITIZE ", whose runtime needs /proc";
  constexpr std::uint64_t kCap = 64, kPauseAfter = 10, kTotal = 20000;
  ScopedName name("killed-reader");
  Bus bus = Bus::create(name, options(Policy::block, kCap));
  const std::size_t max = bus.info().max_payload;

  // Killing the unshare wrapper of an isolated reader kills the reader.
  Peer stuck({"consumer", name.str(), "--name", "stuck", "--pause-after", std::to_string(kPauseAfter)}, iso);
  Peer healthy({"consumer", name.str(), "--name", "healthy", "--expect-first", "0"});
  ASSERT_TRUE(stuck.wait_line("attached", 10s)) << dump(stuck);
  const std::uint32_t stuck_slot = static_cast<std::uint32_t>(u64(parse_fields(stuck.lines()[0]), "slot"));
  ASSERT_TRUE(healthy.wait_line("attached", 10s)) << dump(healthy);

  ProducerOptions po;
  po.wait_for_readers = 2;
  po.wait_for_readers_timeout = 10s;
  Producer producer(bus, po);
  std::promise<Clock::time_point> finished;
  std::future<Clock::time_point> finished_at = finished.get_future();
  std::atomic<bool> give_up{false};
  std::thread publisher([&] {
    std::vector<std::byte> buf(max);
    for (std::uint64_t seq = 0; seq < kTotal && !give_up;) {
      const std::size_t n = make_payload(seq, max, buf.data());
      const PublishResult r = producer.publish(std::span<const std::byte>(buf.data(), n), 100ms);
      if (r) ++seq;
      else if (r.status != PublishStatus::timeout) break;
    }
    finished.set_value(Clock::now());
  });
  // On any early return (a failed ASSERT), stop the publisher before the
  // peers and the producer go away.
  struct StopPublisher {
    std::atomic<bool>& flag;
    std::thread& thread;
    ~StopPublisher() {
      flag = true;
      if (thread.joinable()) thread.join();
    }
  } stop_publisher{give_up, publisher};

  ASSERT_TRUE(stuck.wait_line("paused", 10s)) << dump(stuck);
  // The producer fills the ring up to the stuck reader and waits for it. A
  // reader publishes its cursor every capacity/16 reads (and before it
  // waits), so the producer may stop up to that many records short.
  constexpr std::uint64_t kReleaseEvery = kCap / 16;
  Inspector ins = Inspector::open(name);
  const bool blocked = eventually(
      [&] {
        const Snapshot s = ins.snapshot();
        return s.producer.waiting_for_space && s.head + kReleaseEvery >= kPauseAfter + kCap;
      },
      10s);
  ASSERT_TRUE(blocked) << "the producer never blocked on the stuck reader; head " << bus.head();
  const Snapshot before = ins.snapshot();
  EXPECT_LE(before.head, kPauseAfter + kCap) << "the producer overwrote records the stuck reader has not read";
  // The inspector shows who holds the producer back.
  ASSERT_TRUE(eventually([&] { return ins.snapshot().producer.blocked_on_slot.has_value(); }, 5s))
      << "producer waiting but blocked_on_slot never set; sleeping=" << before.producer.waiting_for_space;
  EXPECT_EQ(ins.snapshot().producer.blocked_on_slot.value_or(9999), stuck_slot);
  EXPECT_EQ(finished_at.wait_for(0s), std::future_status::timeout);

  const auto killed = Clock::now();
  stuck.kill(SIGKILL);
  if (reap_at_once) stuck.reap();
  // The bound is on the producer moving again (head past where it stopped),
  // not on it finishing: publishing the rest takes as long as the machine
  // (or a sanitizer) makes it.
  const bool moved = eventually([&] { return ins.snapshot().head > before.head; }, 10s);
  const auto moved_at = Clock::now();
  const bool resumed = finished_at.wait_for(30s) == std::future_status::ready;
  give_up = true;
  publisher.join();
  ASSERT_TRUE(moved) << "the producer is still blocked 10 s after its reader was killed";
  ASSERT_TRUE(resumed) << "the producer resumed but did not finish within 30 s";
  const double took = std::chrono::duration<double>(moved_at - killed).count();
  std::printf("[ info     ] producer resumed %.3f s after the blocking reader was killed (%s)\n", took,
              reap_at_once ? "reaped" : "zombie");
  EXPECT_LT(took, 1.0) << "docs/design.md bound: a dead reader is reclaimed in under a second (checked every 50 ms)";
  EXPECT_EQ(producer.next_seq(), kTotal);
  stuck.reap();
  EXPECT_EQ(stuck.exit_code(), -SIGKILL);

  producer.close();
  Fields r = result_of(healthy, 30s);
  EXPECT_EQ(u64(r, "errors"), 0u);
  EXPECT_EQ(u64(r, "delivered"), kTotal);
  EXPECT_EQ(u64(r, "hash"), expected_stream_hash(0, kTotal - 1, max));
  EXPECT_GE(ins.snapshot().counters.readers_reclaimed, 1u);
}

INSTANTIATE_TEST_SUITE_P(, KilledReader,
                         ::testing::Values(Killed{false, Isolation::none}, Killed{true, Isolation::none},
                                           Killed{false, Isolation::pid_namespace},
                                           Killed{false, Isolation::own_namespaces}),
                         [](const auto& p) {
                           std::string n = p.param.reap_at_once ? "Reaped" : "Zombie";
                           if (p.param.isolation == Isolation::pid_namespace) n += "InItsOwnPidNamespace";
                           if (p.param.isolation == Isolation::own_namespaces) n += "InItsOwnPidNamespaceWithoutProc";
                           return n;
                         });

TEST(KilledReaderAsleep, ReaderKilledWhileAsleepIsReclaimedAndLeavesNoSleeperBehind) {
  ScopedName name("killed-sleeper");
  Bus bus = Bus::create(name, options(Policy::block, 16));
  Peer sleeper({"consumer", name.str(), "--name", "sleeper"});
  ASSERT_TRUE(sleeper.wait_line("attached", 10s)) << dump(sleeper);
  Inspector ins = Inspector::open(name);
  ASSERT_TRUE(eventually([&] { return ins.snapshot().counters.data_sleepers == 1; }, 10s))
      << "the idle consumer never went to sleep on the data futex";
  sleeper.kill(SIGKILL);
  sleeper.reap();

  Producer producer(bus);
  const auto start = Clock::now();
  publish_in_process(producer, 100);  // more than the ring: needs the dead slot reclaimed
  std::printf("[ info     ] 100 messages published %.3f s after the sleeping reader was killed\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  const Snapshot s = ins.snapshot();
  EXPECT_EQ(s.counters.data_sleepers, 0u) << "a dead sleeper still counts as asleep";
  EXPECT_TRUE(s.readers.empty());
  EXPECT_GE(s.counters.readers_reclaimed, 1u);
}

TEST(KilledReaderNeverWaitedFor, AProducerThatOnlyTriesReclaimsTheDeadReaderToo) {
  // A producer that never waits (timeout 0, its own loop around it) still
  // looks at the readers holding it once per liveness period.
  constexpr std::uint64_t kCap = 16;
  ScopedName name("killed-try");
  Bus bus = Bus::create(name, options(Policy::block, kCap));
  Peer stuck({"consumer", name.str(), "--name", "stuck", "--pause-after", "0"});
  ASSERT_TRUE(stuck.wait_line("paused", 10s)) << dump(stuck);
  Producer producer(bus);
  const std::byte one[1]{};
  std::uint64_t sent = 0;
  while (producer.publish(one, 0ns)) ++sent;
  ASSERT_LE(sent, kCap) << "the producer wrote over records its reader has not read";
  stuck.kill(SIGKILL);
  stuck.reap();
  const auto killed = Clock::now();
  const bool moved = eventually([&] { return static_cast<bool>(producer.publish(one, 0ns)); }, 10s);
  ASSERT_TRUE(moved) << "a producer publishing with timeout 0 never got past its dead reader";
  std::printf("[ info     ] try-publish moved %.3f s after its reader was killed\n",
              std::chrono::duration<double>(Clock::now() - killed).count());
  EXPECT_GE(Inspector::open(name).snapshot().counters.readers_reclaimed, 1u);
}

TEST(BestEffortReader, AStoppedOneNeverHoldsTheProducerAndLearnsItsExactLossWhenItGoesOn) {
  // One bus, two readers of different importance: a verifying reader that
  // holds the producer (lossless), and a best-effort one that is stopped
  // (SIGSTOP) while the producer writes many rings' worth.
  constexpr std::uint64_t kCap = 256, kTotal = 50 * kCap;
  ScopedName name("best-effort");
  Bus bus = Bus::create(name, options(Policy::block, kCap));
  const std::size_t max = bus.info().max_payload;
  Peer logger({"consumer", name.str(), "--name", "logger", "--expect-first", "0"});
  Peer dashboard({"consumer", name.str(), "--name", "dashboard", "--best-effort", "--expect-first", "0"});
  ASSERT_TRUE(logger.wait_line("attached", 10s)) << dump(logger);
  ASSERT_TRUE(dashboard.wait_line("attached", 10s)) << dump(dashboard);
  const std::uint32_t dashboard_slot = static_cast<std::uint32_t>(u64(parse_fields(dashboard.lines()[0]), "slot"));
  Inspector ins = Inspector::open(name);
  {
    const Snapshot s = ins.snapshot();
    ASSERT_EQ(s.readers.size(), 2u);
    for (const ReaderView& r : s.readers) EXPECT_EQ(r.best_effort, r.slot == dashboard_slot) << r.name;
  }
  dashboard.kill(SIGSTOP);
  {
    Producer producer(bus);
    std::vector<std::byte> buf(max);
    for (std::uint64_t seq = 0; seq < kTotal; ++seq) {
      const std::size_t n = make_payload(seq, max, buf.data());
      ASSERT_TRUE(producer.publish(std::span<const std::byte>(buf.data(), n), 30s)) << "at " << seq;
      // The producer may wait for the logger, never for the stopped reader.
      const Snapshot s = ins.snapshot();
      if (s.producer.blocked_on_slot) {
        ASSERT_NE(*s.producer.blocked_on_slot, dashboard_slot) << "at " << seq;
      }
      if (seq % kCap == 0) {
        ASSERT_TRUE(ins.check().empty());
      }
    }
  }  // closes the bus: end of stream
  dashboard.kill(SIGCONT);
  Fields lr = result_of(logger, 30s);
  EXPECT_EQ(u64(lr, "errors"), 0u);
  EXPECT_EQ(u64(lr, "delivered"), kTotal) << "the reader that holds the producer lost messages";
  EXPECT_EQ(u64(lr, "lost"), 0u);
  EXPECT_EQ(u64(lr, "hash"), expected_stream_hash(0, kTotal - 1, max));
  Fields dr = result_of(dashboard, 30s);
  EXPECT_EQ(u64(dr, "errors"), 0u) << "a gap the best-effort reader was not told of, or a torn message";
  EXPECT_GT(u64(dr, "lost"), 0u) << "the stopped reader was lapped";
  EXPECT_EQ(u64(dr, "delivered") + u64(dr, "lost"), kTotal) << "every sequence delivered or counted lost";
  EXPECT_EQ(u64(dr, "last"), kTotal - 1);
  EXPECT_EQ(ins.snapshot().counters.readers_reclaimed, 0u);
}

TEST(HoldLimit, AStoppedReaderThatHoldsTheProducerIsLetGoAfterTheLimitNamedAndToldItsExactLoss) {
  // Two readers that hold a `block` producer; one is stopped (SIGSTOP). The
  // producer, with a hold limit, waits that long for it once, lets it go and
  // goes on; the other reader loses nothing. After SIGCONT the stopped one
  // is told it was let go, then exactly what it lost. The limit is generous
  // (2 s): the reader that keeps reading never stalls that long, even on a
  // loaded machine under a sanitizer.
  constexpr std::uint64_t kCap = 256, kTotal = 50 * kCap;
  ScopedName name("hold-limit");
  Bus bus = Bus::create(name, options(Policy::block, kCap));
  const std::size_t max = bus.info().max_payload;
  Peer logger({"consumer", name.str(), "--name", "logger", "--expect-first", "0"});
  Peer stuck({"consumer", name.str(), "--name", "stuck", "--expect-first", "0"});
  ASSERT_TRUE(logger.wait_line("attached", 10s)) << dump(logger);
  ASSERT_TRUE(stuck.wait_line("attached", 10s)) << dump(stuck);
  const std::uint32_t stuck_slot = static_cast<std::uint32_t>(u64(parse_fields(stuck.lines()[0]), "slot"));
  stuck.kill(SIGSTOP);
  Inspector ins = Inspector::open(name);
  {
    ProducerOptions po;
    po.max_hold = 2s;
    Producer producer(bus, po);
    std::vector<std::byte> buf(max);
    for (std::uint64_t seq = 0; seq < kTotal; ++seq) {
      const std::size_t n = make_payload(seq, max, buf.data());
      ASSERT_TRUE(producer.publish(std::span<const std::byte>(buf.data(), n), 60s)) << "at " << seq;
    }
    const Snapshot s = ins.snapshot();
    EXPECT_EQ(s.counters.readers_let_go, 1u);
    for (const ReaderView& r : s.readers) {
      EXPECT_EQ(r.let_go_ns != 0, r.slot == stuck_slot) << r.name << ": only the stopped reader is let go";
      EXPECT_EQ(r.best_effort, r.slot == stuck_slot) << r.name;
    }
    EXPECT_TRUE(ins.check().empty());
  }  // closes the bus: end of stream
  stuck.kill(SIGCONT);
  Fields lr = result_of(logger, 30s);
  EXPECT_EQ(u64(lr, "errors"), 0u);
  EXPECT_EQ(u64(lr, "delivered"), kTotal) << "the reader that kept reading lost messages";
  EXPECT_EQ(u64(lr, "lost"), 0u);
  EXPECT_EQ(u64(lr, "hash"), expected_stream_hash(0, kTotal - 1, max));
  Fields sr = result_of(stuck, 30s);
  EXPECT_TRUE(stuck.wait_line("let_go", 1s)) << "never told it was let go; " << dump(stuck);
  EXPECT_EQ(u64(sr, "errors"), 0u) << "a gap it was not told of, or a torn message";
  EXPECT_GT(u64(sr, "lost"), 0u) << "the stopped reader was lapped";
  EXPECT_EQ(u64(sr, "delivered") + u64(sr, "lost"), kTotal) << "every sequence delivered or counted lost";
  EXPECT_EQ(u64(sr, "last"), kTotal - 1);
  EXPECT_EQ(ins.snapshot().counters.readers_reclaimed, 0u);
}

TEST(HoldLimit, AHolderThatDiedIsReclaimedNotLetGo) {
  // A reader that held the producer, killed just before the hold limit ran
  // out: the producer reclaims its slot rather than letting a dead reader go
  // (a let-go slot holds nothing, so nothing would ever reclaim it, and the
  // producer would write word by word for good).
  constexpr std::uint64_t kCap = 16;
  ScopedName name("hold-dead");
  Bus bus = Bus::create(name, options(Policy::block, kCap));
  Peer stuck({"consumer", name.str(), "--name", "stuck", "--pause-after", "0"});
  ASSERT_TRUE(stuck.wait_line("paused", 10s)) << dump(stuck);
  ProducerOptions po;
  po.max_hold = 30ms;
  Producer producer(bus, po);
  const std::byte one[1]{};
  std::uint64_t sent = 0;
  while (producer.publish(one, 0ns)) ++sent;
  ASSERT_EQ(sent, kCap);
  EXPECT_FALSE(producer.publish(one, 5ms)) << "waited 5 ms of its 30 ms for a live reader";
  stuck.kill(SIGKILL);
  stuck.reap();
  ASSERT_TRUE(producer.publish(one, 10s)) << "never got past its dead reader";
  const Snapshot s = Inspector::open(name).snapshot();
  EXPECT_EQ(s.counters.readers_let_go, 0u) << "a dead reader was let go";
  EXPECT_GE(s.counters.readers_reclaimed, 1u);
  EXPECT_TRUE(s.readers.empty());
}

TEST(KilledProducer, ConsumersDrainEveryCommittedMessageThenEndOfStreamThenANewProducerContinues) {
  ScopedName name("killed-producer");
  Bus bus = Bus::create(name, options(Policy::block, 1024));
  const std::size_t max = bus.info().max_payload;
  std::vector<std::unique_ptr<Peer>> consumers;
  for (const char* how : {"--name", "--poll"}) {
    std::vector<std::string> args = {"consumer", name.str(), "--expect-first", "0", "--eos-rounds", "2"};
    args.push_back(how);
    if (std::string(how) == "--name") args.push_back("next-reader");
    consumers.push_back(std::make_unique<Peer>(args));
  }
  Peer producer({"producer", name.str(), "1000000000000", "--wait-readers", "2"});
  ASSERT_TRUE(eventually([&] { return bus.head() >= 50000; }, 30s)) << "head " << bus.head() << "; " << dump(producer);
  producer.kill(SIGKILL);  // mid-stream, possibly mid-record; not reaped yet (a zombie)

  std::uint64_t last = 0;
  for (auto& c : consumers) {
    SCOPED_TRACE(c->describe());
    auto eos = c->wait_line("eos", 10s);
    ASSERT_TRUE(eos) << "no end-of-stream within 10 s of the producer's death; " << dump(*c);
    Fields f = parse_fields(*eos);
    EXPECT_EQ(u64(f, "errors"), 0u);
    EXPECT_EQ(u64(f, "first"), 0u);
    EXPECT_EQ(u64(f, "lost"), 0u);
    EXPECT_EQ(u64(f, "delivered"), u64(f, "last") + 1) << "contiguous from 0";
    EXPECT_EQ(u64(f, "hash"), expected_stream_hash(0, u64(f, "last"), max));
    if (last == 0) last = u64(f, "last");
    EXPECT_EQ(u64(f, "last"), last) << "both consumers drained to the same last committed message";
  }
  // head may lag the last commit (a producer killed between the two stores);
  // consumers go by the commit tags, and the next producer continues after them.
  EXPECT_LE(bus.head(), last + 1) << "an announced message was not delivered";
  producer.reap();
  EXPECT_EQ(producer.exit_code(), -SIGKILL);

  // A new producer takes the bus over; the sequence continues.
  Producer next(bus);
  EXPECT_EQ(next.next_seq(), last + 1);
  publish_in_process(next, 1000);
  next.close();
  for (auto& c : consumers) {
    SCOPED_TRACE(c->describe());
    Fields r = result_of(*c, 30s);
    EXPECT_EQ(u64(r, "errors"), 0u);
    EXPECT_EQ(u64(r, "first"), 0u);
    EXPECT_EQ(u64(r, "last"), last + 1000);
    EXPECT_EQ(u64(r, "delivered"), last + 1001);
    EXPECT_EQ(u64(r, "hash"), expected_stream_hash(0, last + 1000, max));
  }
  EXPECT_GE(Inspector::open(name).snapshot().producer.takeovers, 1u);
}

TEST(KilledProducer, SecondProducerProcessIsRefusedWhileTheFirstLivesAndAcceptedAfterItDies) {
  ScopedName name("producer-role");
  Bus bus = Bus::create(name, options(Policy::block, 64));
  Peer first({"producer", name.str(), "5", "--hold"});
  ASSERT_TRUE(first.wait_line("done", 10s)) << dump(first);
  {
    Peer second({"producer", name.str(), "5"});
    EXPECT_EQ(second.wait_exit(10s), 4) << dump(second);
  }
  try {
    Producer p(bus);
    ADD_FAILURE() << "took the role from a live producer";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::producer_active);
    EXPECT_NE(std::string(e.what()).find(std::to_string(first.pid())), std::string::npos) << e.what();
  }
  first.kill(SIGKILL);
  first.reap();
  Peer third({"producer", name.str(), "5", "--close"});
  auto done = third.wait_line("done", 10s);
  ASSERT_TRUE(done) << dump(third);
  EXPECT_EQ(u64(parse_fields(*done), "next_seq"), 10u);
  EXPECT_EQ(third.wait_exit(10s), 0);
}

}  // namespace
}  // namespace shmbus::test
