// Processes as containers run them: sharing /dev/shm, each in a PID
// namespace of its own (every container's default), or without /proc, or
// with a main thread that has exited. None of that may make a live process
// look dead: no live reader is reclaimed, no live producer taken over, and
// every message arrives exactly once, byte for byte. Isolated peers run
// under util-linux unshare (root, as CI runs; skipped with the reason
// where namespaces cannot be made).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
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

struct Setting {
  const char* name;
  Isolation isolation;
  bool main_thread_exits;
};

void PrintTo(const Setting& s, std::ostream* os) { *os << s.name; }

std::vector<std::string> peer_args(const Setting& s, std::vector<std::string> args) {
  if (s.main_thread_exits) args.insert(args.begin(), "--main-thread-exits");
  return args;
}

// Sanitizer runtimes read /proc (their options, the memory map, the
// threads to stop for the leak check): a sanitized peer without /proc
// tests the sanitizer, not shmbus.
bool without_proc(Isolation iso) { return iso == Isolation::no_proc || iso == Isolation::own_namespaces; }
constexpr bool kSanitized = sizeof(SHMBUS_TEST_SANITIZE) > 1;

class Isolated : public ::testing::TestWithParam<Setting> {
 protected:
  void SetUp() override {
    if (GetParam().isolation != Isolation::none && !isolation_unavailable().empty())
      GTEST_SKIP() << isolation_unavailable();
    if (kSanitized && without_proc(GetParam().isolation))
      GTEST_SKIP() << "built with -fsanitize=" SHMBUS_TEST_SANITIZE ", whose runtime needs /proc";
  }
};

// A slow-enough, full-ring `block` run: the producer waits for the reader
// over and over, checks its liveness each time, and must never let it go.
TEST_P(Isolated, LiveReaderIsNeverTakenForDeadAndGetsEveryMessage) {
  const Setting& set = GetParam();
  const std::uint64_t total = std::max<std::uint64_t>(message_count() / 4, 20000);
  ScopedName name("ns-reader");
  BusOptions o;
  o.capacity = 1024;
  o.record_size = 128;
  o.max_readers = 4;
  Bus bus = Bus::create(name, o);
  const std::size_t max = bus.info().max_payload;

  // It naps every half ring, so the ring fills and the producer waits for
  // it, and tests its liveness, over and over.
  Peer reader(peer_args(set, {"consumer", name.str(), "--name", "isolated", "--expect-first", "0", "--nap-every", "512"}),
              set.isolation);
  // Waits for a reader it can only know through its lock.
  ProducerOptions po;
  po.wait_for_readers = 1;
  po.wait_for_readers_timeout = 20s;
  Producer producer(bus, po);
  ASSERT_TRUE(reader.wait_line("attached", 10s)) << dump(reader);

  // A garbage collector running all along (shmbus-inspect gc) must find
  // nothing to reclaim.
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reclaimed{0}, seen_alive{0}, seen_other{0};
  std::thread gc([&] {
    while (!stop.load()) {
      reclaimed += reclaim_dead_readers(name.str()).size();
      for (const ReaderView& r : Inspector::open(name).snapshot().readers)
        (r.liveness == Liveness::alive ? seen_alive : seen_other)++;
      std::this_thread::sleep_for(5ms);
    }
  });
  std::vector<std::byte> buf(max);
  std::uint64_t published = 0;
  for (std::uint64_t seq = 0; seq < total; ++seq) {
    const std::size_t n = make_payload(seq, max, buf.data());
    const PublishResult r = producer.publish(std::span<const std::byte>(buf.data(), n), 30s);
    if (!r) {
      ADD_FAILURE() << "publish of " << seq << ": " << to_string(r.status);
      break;
    }
    ++published;
  }
  const Snapshot during = Inspector::open(name).snapshot();
  producer.close();
  stop = true;
  gc.join();

  Fields res = result_of(reader, 60s);
  EXPECT_EQ(u64(res, "errors"), 0u) << dump(reader);
  EXPECT_EQ(u64(res, "delivered"), published);
  EXPECT_EQ(u64(res, "lost"), 0u);
  EXPECT_EQ(u64(res, "lib_lost"), 0u);
  EXPECT_EQ(u64(res, "hash"), expected_stream_hash(0, published - 1, max));
  EXPECT_EQ(reclaimed.load(), 0u) << "gc reclaimed a live reader";
  EXPECT_EQ(seen_other.load(), 0u) << "the inspector showed a live reader as not alive";
  EXPECT_GT(during.counters.producer_waits, 0u) << "the ring never filled: the reader was never put to the test";
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_reclaimed, 0u);
}

// A reader that stops reading (paused, alive) holds a `block` producer for
// as long as it lives, however many liveness checks the producer makes;
// killed, it is reclaimed within the documented bound.
TEST_P(Isolated, PausedReaderHoldsTheProducerUntilItIsKilled) {
  const Setting& set = GetParam();
  ScopedName name("ns-paused");
  BusOptions o;
  o.capacity = 64;
  o.record_size = 128;
  Bus bus = Bus::create(name, o);
  Peer reader(peer_args(set, {"consumer", name.str(), "--name", "paused", "--pause-after", "10"}), set.isolation);
  ASSERT_TRUE(reader.wait_line("attached", 10s)) << dump(reader);
  Producer producer(bus);
  const std::size_t max = bus.info().max_payload;
  std::vector<std::byte> buf(max);
  auto publish = [&](std::chrono::nanoseconds timeout) {
    const std::size_t n = make_payload(producer.next_seq(), max, buf.data());
    return producer.publish(std::span<const std::byte>(buf.data(), n), timeout);
  };
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(publish(1s));
  ASSERT_TRUE(reader.wait_line("paused", 10s)) << dump(reader);
  while (publish(0ns)) {
  }
  // Ten liveness periods (50 ms each) with the reader alive but idle.
  EXPECT_EQ(publish(500ms).status, PublishStatus::timeout) << "the producer stopped waiting for a live reader";
  EXPECT_TRUE(reclaim_dead_readers(name.str()).empty()) << "gc reclaimed a live reader";
  EXPECT_EQ(producer.live_readers(), 1u);
  const Snapshot snap = Inspector::open(name).snapshot();
  ASSERT_EQ(snap.readers.size(), 1u);
  EXPECT_EQ(snap.readers[0].liveness, Liveness::alive);
  EXPECT_EQ(snap.counters.readers_reclaimed, 0u);
  EXPECT_LE(bus.head(), 10u + 64u);

  const auto killed = Clock::now();
  reader.kill(SIGKILL);
  EXPECT_TRUE(publish(10s)) << "not reclaimed after the kill";
  const double took = std::chrono::duration<double>(Clock::now() - killed).count();
  std::printf("[ info     ] %s: reclaimed %.3f s after the kill\n", set.name, took);
  EXPECT_LT(took, 1.0) << "documented bound: 50 ms liveness period";
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_reclaimed, 1u);
}

// A durable name held from another namespace is held: refused to anyone
// else while its holder lives, free (with its cursor) once it is killed.
TEST_P(Isolated, DurableNameIsHeldWhileItsIsolatedHolderLives) {
  const Setting& set = GetParam();
  ScopedName name("ns-durable");
  BusOptions o;
  o.capacity = 64;
  o.record_size = 128;
  Bus bus = Bus::create(name, o);
  Producer producer(bus);
  const std::size_t max = bus.info().max_payload;
  std::vector<std::byte> buf(max);
  for (std::uint64_t s = 0; s < 20; ++s) {
    const std::size_t n = make_payload(s, max, buf.data());
    ASSERT_TRUE(producer.publish(std::span<const std::byte>(buf.data(), n)));
  }
  Peer holder(peer_args(set, {"consumer", name.str(), "--name", "audit", "--durable", "--pause-after", "10"}),
              set.isolation);
  ASSERT_TRUE(holder.wait_line("paused", 10s)) << dump(holder);
  ConsumerOptions co;
  co.name = "audit";
  co.start = Start::resume;
  try {
    Consumer second(bus, co);
    ADD_FAILURE() << "took a durable name a live reader in another namespace holds";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::name_in_use) << e.what();
  }
  EXPECT_TRUE(reclaim_dead_readers(name.str()).empty());
  holder.kill(SIGKILL);
  holder.reap();
  // The unshare wrapper is gone at once; the reader a moment later (killed
  // by the wrapper's death): the name is free once the kernel has closed
  // its files.
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    const Snapshot snap = Inspector::open(name).snapshot();
    if (!snap.bookmarks.empty() && !snap.bookmarks[0].held) break;
    std::this_thread::sleep_for(1ms);
  }
  // Gone: the name is free, and resumes where its holder last published its
  // cursor (never after what it read).
  Consumer heir(bus, co);
  EXPECT_TRUE(heir.resumed());
  EXPECT_LE(heir.cursor(), 10u);
  const ReadResult r = heir.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, heir.cursor() - 1);
}

// The producer isolated, the reader on the host: the reader never takes
// the live producer for dead, and a second producer (on the host) is refused.
TEST_P(Isolated, LiveProducerIsNeverTakenForDeadNorTakenOver) {
  const Setting& set = GetParam();
  const std::uint64_t total = std::max<std::uint64_t>(message_count() / 4, 20000);
  ScopedName name("ns-producer");
  BusOptions o;
  o.capacity = 1024;
  o.record_size = 128;
  Bus bus = Bus::create(name, o);
  const std::size_t max = bus.info().max_payload;
  ConsumerOptions co;
  co.name = "host";
  // Short waits, so the producer's liveness is tested many times.
  co.wait.spin_time = 0ns;
  co.wait.yield_time = 0ns;
  Consumer consumer(bus, co);
  Peer producer(peer_args(set, {"producer", name.str(), std::to_string(total), "--wait-readers", "1", "--close"}),
                set.isolation);

  std::uint64_t expected = 0, wrong = 0, died = 0, other = 0;
  bool second_refused = false;
  const auto deadline = Clock::now() + 60s;
  while (expected < total && Clock::now() < deadline) {
    const ReadResult r = consumer.next(2ms);
    if (r.status == ReadStatus::message) {
      if (r.message.seq != expected || !check_payload(r.message.seq, max, r.message.payload)) ++wrong;
      expected = r.message.seq + 1;
      if (expected == total / 2 && !second_refused) {
        try {
          Producer second(bus);
          ADD_FAILURE() << "a second producer took over a live one";
        } catch (const Error& e) {
          EXPECT_EQ(e.errc(), Errc::producer_active) << e.what();
          second_refused = true;
        }
      }
    } else if (r.status == ReadStatus::end_of_stream) {
      (r.end_reason == EndReason::producer_died ? died : other)++;
    } else if (r.status != ReadStatus::timeout) {
      ++other;
    }
  }
  EXPECT_EQ(expected, total);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(died, 0u) << "a live producer was reported dead";
  EXPECT_EQ(other, 0u);
  EXPECT_TRUE(second_refused);
  EXPECT_EQ(producer.wait_exit(30s), 0) << dump(producer);
  const ReadResult end = consumer.next(5s);
  EXPECT_EQ(end.status, ReadStatus::end_of_stream);
  EXPECT_EQ(end.end_reason, EndReason::closed);
  EXPECT_EQ(Inspector::open(name).snapshot().producer.takeovers, 0u);
}

// The other way round: the live producer on the host, a second one isolated.
TEST_P(Isolated, IsolatedSecondProducerIsRefusedWhileTheFirstLives) {
  const Setting& set = GetParam();
  ScopedName name("ns-second");
  BusOptions o;
  o.capacity = 64;
  Bus bus = Bus::create(name, o);
  Producer first(bus);
  ASSERT_TRUE(first.publish(std::as_bytes(std::span("x", 1))));
  Peer second(peer_args(set, {"producer", name.str(), "10"}), set.isolation);
  EXPECT_EQ(second.wait_exit(30s), 4) << "exit 4: the role was refused; " << dump(second);
  EXPECT_EQ(bus.head(), 1u) << "the second producer published on a bus with a live producer";
  EXPECT_EQ(first.next_seq(), 1u);
  EXPECT_TRUE(first.publish(std::as_bytes(std::span("y", 1))));
}

// An isolated producer killed mid-stream is still detected, and a new one
// (on the host) takes the bus over and continues the sequence.
TEST_P(Isolated, KilledIsolatedProducerIsDetectedAndTakenOver) {
  const Setting& set = GetParam();
  ScopedName name("ns-killed-producer");
  BusOptions o;
  o.capacity = 256;
  o.record_size = 128;
  Bus bus = Bus::create(name, o);
  const std::size_t max = bus.info().max_payload;
  ConsumerOptions co;
  co.name = "host";
  Consumer consumer(bus, co);
  Peer producer(peer_args(set, {"producer", name.str(), "100", "--hold"}), set.isolation);
  ASSERT_TRUE(producer.wait_line("done", 20s)) << dump(producer);
  std::uint64_t expected = 0;
  for (; expected < 100; ++expected) {
    const ReadResult r = consumer.next(5s);
    ASSERT_EQ(r.status, ReadStatus::message) << to_string(r.status);
    ASSERT_EQ(r.message.seq, expected);
    ASSERT_TRUE(check_payload(expected, max, r.message.payload));
  }
  producer.kill(SIGKILL);
  producer.reap();
  const ReadResult end = consumer.next(10s);
  EXPECT_EQ(end.status, ReadStatus::end_of_stream);
  EXPECT_EQ(end.end_reason, EndReason::producer_died);
  // Reported again to a caller that asks again with a short timeout.
  const ReadResult again = consumer.next(1ms);
  EXPECT_EQ(again.status, ReadStatus::end_of_stream);
  EXPECT_EQ(again.end_reason, EndReason::producer_died);
  Producer successor(bus);
  EXPECT_EQ(successor.next_seq(), 100u);
  std::vector<std::byte> buf(max);
  const std::size_t n = make_payload(100, max, buf.data());
  ASSERT_TRUE(successor.publish(std::span<const std::byte>(buf.data(), n)));
  const ReadResult next = consumer.next(5s);
  ASSERT_EQ(next.status, ReadStatus::message);
  EXPECT_EQ(next.message.seq, 100u);
  EXPECT_EQ(Inspector::open(name).snapshot().producer.takeovers, 1u);
}

INSTANTIATE_TEST_SUITE_P(, Isolated,
                         ::testing::Values(Setting{"OwnPidNamespace", Isolation::pid_namespace, false},
                                           Setting{"NoProc", Isolation::no_proc, false},
                                           Setting{"OwnPidNamespaceNoProc", Isolation::own_namespaces, false},
                                           Setting{"MainThreadExited", Isolation::none, true},
                                           Setting{"OwnPidNamespaceMainThreadExited", Isolation::pid_namespace, true}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace shmbus::test
