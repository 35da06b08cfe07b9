// The hold limit of a `block` bus (ProducerOptions::max_hold): a reader
// that holds the producer that long is let go. It reads on as a best-effort
// reader, is told so once (ReadStatus::let_go), learns its exact loss, and
// the inspector names it.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../lib/ledger.hpp"
#include "reader_table.hpp"
#include "segment.hpp"
#include "shmbus/inspect.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;

ProducerOptions holding_at_most(std::chrono::nanoseconds limit) {
  ProducerOptions o;
  o.max_hold = limit;
  return o;
}

// Publishes "m<seq>" until `total` messages went out, giving each publish
// `timeout`; returns how many it took.
std::uint64_t publish_until(Producer& p, std::uint64_t total, std::chrono::nanoseconds timeout) {
  std::uint64_t sent = p.next_seq();
  while (sent < total && p.publish(bytes("m" + std::to_string(sent)), timeout)) ++sent;
  return sent;
}

TEST(HoldLimit, WithoutOneAStuckReaderHoldsTheProducerForever) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("hold-none");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer stuck(bus);
  Producer p(bus);
  EXPECT_EQ(publish_until(p, 4 * kCap, 20ms), kCap);
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_let_go, 0u);
  EXPECT_EQ(stuck.next(0ns).status, ReadStatus::message);
}

TEST(HoldLimit, AStuckReaderIsLetGoNamedAndToldItsExactLoss) {
  constexpr std::uint64_t kCap = 16, kTotal = 5 * kCap + 3;
  ScopedName name("hold-let-go");
  Bus bus = Bus::create(name, small_block(kCap));
  ConsumerOptions named;
  named.name = "stuck";
  Consumer stuck(bus, named);
  ReadResult first = stuck.next(0ns);  // nothing yet
  ASSERT_EQ(first.status, ReadStatus::timeout);
  Producer p(bus, holding_at_most(30ms));
  EXPECT_EQ(Inspector::open(name).snapshot().producer.max_hold_ns, 30'000'000u);
  // The stuck reader holds a view of seq 0 and reads no further.
  ASSERT_EQ(publish_until(p, 1, 0ns), 1u);
  first = stuck.next(0ns);
  ASSERT_EQ(first.status, ReadStatus::message);
  ASSERT_EQ(text(first.message.payload), "m0");
  // Short publishes that time out, one after another, add up to the limit.
  std::uint64_t sent = 1;
  for (int tries = 0; tries < 1000 && sent < kTotal; ++tries) sent = publish_until(p, kTotal, 5ms);
  ASSERT_EQ(sent, kTotal) << "the producer never let the stuck reader go";

  const Snapshot s = Inspector::open(name).snapshot();
  EXPECT_EQ(s.counters.readers_let_go, 1u);
  ASSERT_EQ(s.readers.size(), 1u);
  EXPECT_TRUE(s.readers[0].best_effort);
  EXPECT_NE(s.readers[0].let_go_ns, 0u);
  EXPECT_EQ(s.readers[0].name, "stuck");
  EXPECT_TRUE(Inspector::open(name).check().empty());

  // Told once, at its next call: its view of seq 0 was overwritten.
  ReadResult r = stuck.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::let_go);
  EXPECT_TRUE(r.stale_view);
  EXPECT_EQ(r.message.seq, 1u) << "goes on where it stopped";
  // Then a lap like a best-effort reader's: exact loss, then the last ring, in order.
  r = stuck.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::lost);
  EXPECT_EQ(r.lost, kTotal - kCap - 1);
  for (std::uint64_t seq = kTotal - kCap; seq < kTotal; ++seq) {
    r = stuck.next(0ns);
    ASSERT_EQ(r.status, ReadStatus::message) << "at " << seq;
    EXPECT_EQ(r.message.seq, seq);
    EXPECT_EQ(text(r.message.payload), "m" + std::to_string(seq));
  }
  EXPECT_EQ(stuck.next(0ns).status, ReadStatus::timeout);
  // It holds the producer no more: a whole ring more goes out without waiting.
  for (std::uint64_t i = 0; i < 2 * kCap; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns)) << i;
}

TEST(HoldLimit, OnlyTheReadersTheProducerWaitsForAreLetGo) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("hold-only-stuck");
  Bus bus = Bus::create(name, small_block(kCap));
  ConsumerOptions o;
  o.name = "stuck";
  Consumer stuck(bus, o);
  o.name = "reader";
  Consumer reader(bus, o);
  Producer p(bus, holding_at_most(20ms));
  std::uint64_t read = 0;
  for (std::uint64_t sent = 0; sent < 6 * kCap;) {
    const PublishResult pr = p.publish(bytes("m" + std::to_string(sent)), 5ms);
    if (pr) ++sent;
    // The reader keeps up with whatever is published: the producer only ever waits for `stuck`.
    for (ReadResult r = reader.next(0ns); r.status == ReadStatus::message; r = reader.next(0ns)) {
      ASSERT_EQ(r.message.seq, read);
      ASSERT_EQ(text(r.message.payload), "m" + std::to_string(read));
      ++read;
    }
  }
  EXPECT_EQ(read, 6 * kCap) << "the reader that kept up lost nothing";
  const Snapshot s = Inspector::open(name).snapshot();
  EXPECT_EQ(s.counters.readers_let_go, 1u);
  for (const ReaderView& v : s.readers) EXPECT_EQ(v.let_go_ns != 0, v.name == "stuck") << v.name;
  // The one let go without a view in hand is told so, with no stale view.
  PollResult pr;
  std::array<Message, 8> out;
  EXPECT_TRUE(stuck.read_batch(out, pr, 0ns).empty());
  EXPECT_TRUE(pr.let_go);
  EXPECT_FALSE(pr.stale_view);
  EXPECT_FALSE(pr.evicted);
  const auto got = stuck.read_batch(out, pr, 0ns);
  EXPECT_GT(pr.lost, 0u);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front().seq, pr.lost) << "loss counted from seq 0 exactly";
}

TEST(HoldLimit, AReaderLetGoLosesOnlyWhatTheProducerOverwrote) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("hold-caught-up");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer slow(bus);
  Producer p(bus, holding_at_most(10ms));
  ASSERT_EQ(publish_until(p, kCap, 0ns), kCap);
  // Full: the next publish waits the limit, lets `slow` go, and goes on.
  ASSERT_TRUE(p.publish(bytes("m" + std::to_string(kCap)), 5s));
  ReadResult r = slow.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::let_go);
  EXPECT_FALSE(r.stale_view);
  EXPECT_EQ(r.message.seq, 0u);
  // Seq 0 was overwritten by seq kCap: one lost, then 1..kCap in order.
  r = slow.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::lost);
  EXPECT_EQ(r.lost, 1u);
  for (std::uint64_t seq = 1; seq <= kCap; ++seq) {
    r = slow.next(0ns);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, seq);
  }
  EXPECT_EQ(slow.lost(), 1u);
}

TEST(HoldLimit, OnlyTimeSpentWaitingForTheReaderCounts) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("hold-only-waiting");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer stuck(bus);
  Producer p(bus, holding_at_most(150ms));
  ASSERT_EQ(publish_until(p, kCap, 0ns), kCap);
  // Two waits of 40 ms with a long pause between them: 80 ms of waiting, not
  // the 400 ms that passed.
  EXPECT_FALSE(p.publish(bytes("x"), 40ms));
  std::this_thread::sleep_for(320ms);
  EXPECT_FALSE(p.publish(bytes("x"), 40ms));
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_let_go, 0u);
  // The waits go on adding up while it does not move.
  EXPECT_TRUE(p.publish(bytes("x"), 5s));
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_let_go, 1u);
  EXPECT_EQ(stuck.next(0ns).status, ReadStatus::let_go);
}

TEST(HoldLimit, AReaderThatMovedIsChargedAfreshAndOneThatKeepsReadingIsNeverLetGo) {
  constexpr std::uint64_t kCap = 16, kTotal = 16 * kCap;
  ScopedName name("hold-slow-reader");
  Bus bus = Bus::create(name, small_block(kCap));
  Consumer slow(bus);
  std::uint64_t read = 0;
  std::thread reader([&] {
    // One message every 4 ms: far slower than the producer, which waits for
    // it all the time (about a second in all), but always moving; the limit
    // leaves room for a loaded machine's scheduling.
    while (read < kTotal) {
      const ReadResult r = slow.next(1s);
      if (r.status != ReadStatus::message) break;
      EXPECT_EQ(r.message.seq, read);
      ++read;
      std::this_thread::sleep_for(4ms);
    }
  });
  {
    Producer p(bus, holding_at_most(300ms));
    for (std::uint64_t i = 0; i < kTotal; ++i) ASSERT_TRUE(p.publish(bytes("m"), 10s)) << i;
    reader.join();
  }
  EXPECT_EQ(read, kTotal);
  const Snapshot s = Inspector::open(name).snapshot();
  EXPECT_EQ(s.counters.readers_let_go, 0u) << "a reader that kept reading was let go";
  EXPECT_GT(s.counters.producer_wait_ns, 300'000'000u) << "the producer waited longer than its limit in all";
}

TEST(HoldLimit, IsIgnoredOnAnOverwriteBus) {
  ScopedName name("hold-overwrite");
  BusOptions o = small_block(16);
  o.policy = Policy::overwrite;
  Bus bus = Bus::create(name, o);
  Consumer c(bus);
  Producer p(bus, holding_at_most(1ms));
  EXPECT_EQ(Inspector::open(name).snapshot().producer.max_hold_ns, 0u) << "no reader holds an overwrite producer";
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.publish(bytes("x"), 0ns));
  EXPECT_EQ(c.next(0ns).status, ReadStatus::lost);
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_let_go, 0u);
}

// let_go_reader(), shmbus-inspect let-go: the run-time twin of the hold
// limit. A producer without one, asleep on a stopped reader, goes on at
// once; the reader is told it was let go, then exactly what it lost, with
// messages of 1 byte to several records.
TEST(LetGoReader, AProducerAsleepOnAStuckReaderGoesOnAndTheReaderIsToldItsExactLoss) {
  constexpr std::uint64_t kCap = 64, kMessages = 2000;
  ScopedName name("let-go-reader");
  BusOptions o = small_block(kCap);
  o.record_size = 64;
  Bus bus = Bus::create(name, o);
  ConsumerOptions named;
  named.name = "stuck";
  Consumer stuck(bus, named);
  Producer p(bus);  // no hold limit: only let_go_reader() frees it
  std::vector<std::byte> payload(600, std::byte{'x'});
  const auto size_of = [](std::uint64_t i) { return static_cast<std::size_t>(1 + (i * 131) % 600); };
  ASSERT_TRUE(p.publish(std::span(payload).first(size_of(0)), 0ns));
  ReadResult r = stuck.next(0ns);  // holds a view of seq 0 and reads no further
  ASSERT_EQ(r.status, ReadStatus::message);
  Ledger books(0, kCap);
  books.message(r.message.seq, r.message.records);

  std::atomic<std::uint64_t> sent{1};
  std::thread producer([&] {
    for (std::uint64_t i = 1; i < kMessages; ++i) {
      if (!p.publish(std::span(payload).first(size_of(i)))) return;
      sent.store(i + 1);
    }
  });
  // The producer fills the ring and waits (asleep, past its spin) for the reader.
  Snapshot snap = Inspector::open(name).snapshot();
  for (int i = 0; i < 2000 && !snap.producer.waiting_for_space; ++i) {
    std::this_thread::sleep_for(1ms);
    snap = Inspector::open(name).snapshot();
  }
  ASSERT_TRUE(snap.producer.waiting_for_space) << "the producer never waited for the stuck reader";
  std::this_thread::sleep_for(20ms);  // past its spin and yield: asleep
  ASSERT_EQ(snap.readers.size(), 1u);
  const std::uint64_t before = sent.load();

  const ReaderView was = let_go_reader(name, snap.readers[0].slot, snap.readers[0].generation);
  EXPECT_EQ(was.name, "stuck");
  EXPECT_FALSE(was.best_effort);
  producer.join();
  EXPECT_EQ(sent.load(), kMessages) << "the producer did not go on (it had sent " << before << ")";

  snap = Inspector::open(name).snapshot();
  EXPECT_EQ(snap.counters.readers_let_go, 1u);
  ASSERT_EQ(snap.readers.size(), 1u);
  EXPECT_TRUE(snap.readers[0].best_effort);
  EXPECT_NE(snap.readers[0].let_go_ns, 0u);
  // Once let go it holds nobody: a second call is refused, naming why.
  try {
    let_go_reader(name, snap.readers[0].slot);
    ADD_FAILURE() << "a reader let go was let go again";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::invalid_options);
    EXPECT_NE(std::string(e.what()).find("does not hold the producer: it was let go at"), std::string::npos)
        << e.what();
  }

  r = stuck.next(0ns);
  ASSERT_EQ(r.status, ReadStatus::let_go);
  EXPECT_TRUE(r.stale_view) << "its view of seq 0 was overwritten";
  std::uint64_t delivered = 1;
  for (;;) {
    r = stuck.next(0ns);
    if (r.status == ReadStatus::lost) {
      books.lost(r.lost);
    } else if (r.status == ReadStatus::message) {
      ++delivered;
      books.message(r.message.seq, r.message.records);
    } else {
      break;
    }
  }
  books.finish(stuck.cursor());
  EXPECT_EQ(books.error(), "");
  EXPECT_EQ(stuck.cursor(), p.next_seq());
  EXPECT_GT(books.told(), 0u);
  EXPECT_LT(delivered, kMessages);
  EXPECT_TRUE(Inspector::open(name).check().empty());
}

TEST(LetGoReader, IsRefusedForAReaderThatDoesNotHoldTheProducer) {
  ScopedName name("let-go-refused");
  Bus bus = Bus::create(name, small_block(16));
  ConsumerOptions loose;
  loose.hold_producer = false;
  Consumer best_effort(bus, loose);
  const Snapshot s = Inspector::open(name).snapshot();
  ASSERT_EQ(s.readers.size(), 1u);
  const auto refusal = [&](std::uint32_t slot) -> std::string {
    try {
      let_go_reader(name, slot);
    } catch (const Error& e) {
      return std::string(e.errc() == Errc::invalid_options ? "invalid_options"
                         : e.errc() == Errc::not_found     ? "not_found"
                                                           : "other") +
             ": " + e.what();
    }
    return "let go";
  };
  EXPECT_NE(refusal(s.readers[0].slot).find("invalid_options: bus '" + std::string(name) + "': reader"),
            std::string::npos);
  EXPECT_NE(refusal(s.readers[0].slot).find("does not hold the producer: it is a best-effort reader"),
            std::string::npos);
  EXPECT_NE(refusal(3).find("not_found"), std::string::npos) << "an empty slot";
  EXPECT_NE(refusal(4).find("no reader slot 4 (it has 4)"), std::string::npos);

  ScopedName ow("let-go-overwrite");
  BusOptions o = small_block(16);
  o.policy = Policy::overwrite;
  Bus obus = Bus::create(ow, o);
  Consumer c(obus);
  try {
    let_go_reader(ow, Inspector::open(ow).snapshot().readers.at(0).slot);
    ADD_FAILURE() << "let go on an overwrite bus";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on an overwrite bus no reader does"), std::string::npos) << e.what();
  }
}

// The slot changed hands between a let-go's look and its exchange: the
// producer (the only one that judges the state in between) gives the newer
// reader its state back; anyone else leaves it let go, since a producer may
// already have moved past it, and says so.
TEST(LetGoReader, ASlotThatChangedHandsIsGivenBackOnlyByTheProducer) {
  ScopedName name("let-go-hands");
  Bus bus = Bus::create(name, small_block(16));
  Consumer reader(bus);
  const std::shared_ptr<detail::Segment>& seg = detail::segment_of(bus);
  const std::uint32_t slot = Inspector::open(name).snapshot().readers.at(0).slot;
  const std::uint64_t owner = seg->reader(slot)->owner.load();
  const std::uint64_t someone_before = owner + 1000;  // the attachment the caller looked at

  EXPECT_EQ(detail::let_go(*seg, slot, someone_before, /*give_back=*/true), detail::LetGo::not_active);
  EXPECT_EQ(seg->reader(slot)->state.load(), layout::kSlotActive);
  EXPECT_EQ(seg->header()->best_effort_readers.load(), 0u);
  EXPECT_EQ(seg->header()->readers_let_go.load(), 0u);
  EXPECT_EQ(reader.next(0ns).status, ReadStatus::timeout) << "the reader given back still holds the producer";

  EXPECT_EQ(detail::let_go(*seg, slot, someone_before, /*give_back=*/false), detail::LetGo::changed_hands);
  EXPECT_EQ(seg->reader(slot)->state.load(), layout::kSlotBestEffort);
  EXPECT_EQ(seg->header()->best_effort_readers.load(), 1u);
  EXPECT_EQ(seg->header()->readers_let_go.load(), 1u);
  EXPECT_NE(Inspector::open(name).snapshot().readers.at(0).let_go_ns, 0u);
  EXPECT_EQ(reader.next(0ns).status, ReadStatus::let_go);
  EXPECT_EQ(detail::let_go(*seg, slot, owner, /*give_back=*/false), detail::LetGo::not_active);
}

}  // namespace
}  // namespace shmbus::test
