// Messages longer than one record: they take consecutive records, laid out
// contiguously (layout.hpp, "Spans"). Sizes at every edge, padding at the
// end of a lap, claim() of any size, readers that land inside a span (late
// joiners, lapped readers, Start::sequence), a producer that dies inside a
// span, and a checked reader racing a writer of mixed sizes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../lib/ledger.hpp"
#include "layout.hpp"
#include "span_marks.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using ::testing::HasSubstr;

BusOptions opts(std::uint64_t capacity, Policy policy = Policy::block, std::uint32_t record_size = 64) {
  BusOptions o;
  o.capacity = capacity;
  o.policy = policy;
  o.record_size = record_size;
  o.max_readers = 4;
  return o;
}

// A message that vouches for itself: its index and length, then bytes that
// follow from both, so a torn or misplaced copy never passes check().
std::vector<std::byte> make(std::uint64_t index, std::size_t length) {
  std::vector<std::byte> m(length);
  for (std::size_t j = 0; j < length; ++j) m[j] = static_cast<std::byte>((index * 131 + j * 7 + length) & 0xff);
  if (length >= 16) {
    std::memcpy(m.data(), &index, 8);
    const std::uint64_t len = length;
    std::memcpy(m.data() + 8, &len, 8);
  }
  return m;
}
// The index a message carries, or -1 if it is not whole.
std::int64_t check(std::span<const std::byte> p) {
  if (p.size() < 16) return -2;  // too short to say
  std::uint64_t index = 0, len = 0;
  std::memcpy(&index, p.data(), 8);
  std::memcpy(&len, p.data() + 8, 8);
  if (len != p.size()) return -1;
  const std::vector<std::byte> want = make(index, p.size());
  return std::memcmp(want.data(), p.data(), p.size()) == 0 ? static_cast<std::int64_t>(index) : -1;
}

std::uint64_t records_for(const Bus& bus, std::size_t length) { return layout::records_for(length, bus.info().record_size); }

TEST(Spans, EverySizeFromOneByteToTheMaxMessageArrivesWholeAndInOrder) {
  for (const Policy policy : {Policy::block, Policy::overwrite}) {
    ScopedName name("span-sizes");
    Bus bus = Bus::create(name, opts(64, policy));  // 40-byte payload per record, max message 32 x 64 - 24
    const std::uint32_t max = bus.info().max_message;
    ASSERT_EQ(max, 32u * 64u - 24u);
    ASSERT_EQ(bus.info().max_payload, 40u);
    Consumer c(bus);
    Producer p(bus);
    const std::vector<std::size_t> sizes = {16, 39, 40, 41, 64, 103, 104, 105, 500, max - 1, max, 17, max, 40, 41};
    std::uint64_t expect_seq = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto m = make(i, sizes[i]);
      const PublishResult pr = p.publish(m);
      ASSERT_TRUE(pr) << "size " << sizes[i] << ": " << to_string(pr.status);
      const ReadResult r = c.next(2s);
      ASSERT_EQ(r.status, ReadStatus::message) << to_string(r.status);
      EXPECT_EQ(r.message.seq, pr.seq);
      EXPECT_GE(r.message.seq, expect_seq) << "sequences only go forward";
      EXPECT_EQ(r.message.records, records_for(bus, sizes[i])) << "size " << sizes[i];
      EXPECT_EQ(check(r.message.payload), static_cast<std::int64_t>(i)) << "size " << sizes[i];
      EXPECT_EQ(c.cursor(), r.message.seq + r.message.records);
      // A span never crosses the end of the ring.
      EXPECT_LE((r.message.seq % 64) + r.message.records, 64u);
      expect_seq = r.message.seq + r.message.records;
      // Nothing more: the reader makes its position visible, as it does
      // whenever it would wait (a span and its padding may need the whole ring).
      EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
    }
    EXPECT_EQ(c.lost(), 0u) << "padding at the end of a lap loses nothing";
    EXPECT_EQ(p.publish(make(99, max + 1)).status, PublishStatus::too_large);
    EXPECT_EQ(p.claim(max + 1).status, PublishStatus::too_large);
    EXPECT_TRUE(Inspector::open(name).check().empty());
  }
}

TEST(Spans, ASpanThatWouldCrossTheEndOfTheRingStartsTheNextLapAfterPadding) {
  ScopedName name("span-pad");
  Bus bus = Bus::create(name, opts(16));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 13; ++i) ASSERT_TRUE(p.publish(make(i, 20)));
  for (int i = 0; i < 13; ++i) ASSERT_EQ(check(c.next(1s).message.payload), i);
  ASSERT_EQ(c.next(0ns).status, ReadStatus::timeout);
  // Three slots left in this lap; the message takes five.
  const PublishResult pr = p.publish(make(13, 5 * 64 - 24));
  ASSERT_TRUE(pr);
  EXPECT_EQ(pr.seq, 16u) << "starts at slot 0 of the next lap";
  EXPECT_EQ(p.next_seq(), 21u);
  const Inspector insp = Inspector::open(name);
  for (std::uint64_t s = 13; s < 16; ++s) {
    const auto v = insp.record(s);
    ASSERT_TRUE(v) << s;
    EXPECT_TRUE(v->padding) << s;
    EXPECT_EQ(v->gap_to, 16u);
    EXPECT_FALSE(v->gap_lost);
  }
  const auto head = insp.record(16);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->records, 5u);
  EXPECT_EQ(head->payload.size(), 5u * 64 - 24);
  for (std::uint64_t s = 17; s < 21; ++s) EXPECT_TRUE(insp.record(s)->inside) << s;
  const ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 16u);
  EXPECT_EQ(check(r.message.payload), 13);
  EXPECT_EQ(c.lost(), 0u);
  EXPECT_TRUE(insp.check().empty());
}

TEST(Spans, AClaimOfAnySizeIsOneContiguousRegionAndMayCommitLess) {
  ScopedName name("span-claim");
  Bus bus = Bus::create(name, opts(64));
  Consumer c(bus);
  Producer p(bus);
  Claim cl = p.claim(1000);
  ASSERT_TRUE(cl);
  ASSERT_EQ(cl.data.size(), 1000u);
  const auto m = make(1, 1000);
  std::memcpy(cl.data.data(), m.data(), m.size());
  p.commit();
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(check(r.message.payload), 1);
  EXPECT_EQ(r.message.records, records_for(bus, 1000));

  // Committing less keeps the records claimed: the next message follows them.
  cl = p.claim(1000);
  ASSERT_TRUE(cl);
  const auto small = make(2, 30);
  std::memcpy(cl.data.data(), small.data(), small.size());
  p.commit(30);
  ASSERT_TRUE(p.publish(make(3, 20)));
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(check(r.message.payload), 2);
  EXPECT_EQ(r.message.records, records_for(bus, 1000));
  const std::uint64_t after = r.message.seq + r.message.records;
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, after);
  EXPECT_EQ(check(r.message.payload), 3);
  EXPECT_TRUE(Inspector::open(name).check().empty());
}

TEST(Spans, ABatchMixingSizesArrivesInOrderForInPlaceAndCopyingReaders) {
  for (const bool hold : {true, false}) {
    ScopedName name("span-batch");
    Bus bus = Bus::create(name, opts(128));
    ConsumerOptions co;
    co.hold_producer = hold;
    Consumer c(bus, co);
    Producer p(bus);
    std::vector<std::vector<std::byte>> ms;
    for (int i = 0; i < 40; ++i) ms.push_back(make(i, i % 5 == 0 ? 300 + i * 11 : 16 + i));
    std::vector<std::span<const std::byte>> views(ms.begin(), ms.end());
    ASSERT_EQ(p.publish_batch(views), ms.size());
    std::int64_t want = 0;
    std::array<Message, 16> out;
    while (want < 40) {
      PollResult pr;
      const auto got = c.read_batch(out, pr, 1s);
      ASSERT_FALSE(got.empty()) << "hold " << hold;
      for (const Message& m : got) {
        EXPECT_EQ(check(m.payload), want) << "hold " << hold;
        ++want;
      }
    }
    EXPECT_EQ(c.lost(), 0u);
  }
}

// A batch read in place hands out views into the ring; crossing padding (or
// a gap) on the way to a later message must not free the records of the
// messages already in hand: the producer may not write over them until the
// next call.
TEST(Spans, ABatchThatCrossesPaddingKeepsTheMessagesInHandFromTheProducer) {
  for (const bool padding : {true, false}) {
    ScopedName name("span-batch-pad");
    Bus bus = Bus::create(name, opts(64));
    Consumer c(bus);
    Producer p(bus);
    // 0..19 read and released (the reader waited after them), 20..49 not yet.
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(p.publish(make(i, 20)));
    for (int i = 0; i < 20; ++i) ASSERT_EQ(check(c.next(1s).message.payload), i);
    ASSERT_EQ(c.next(0ns).status, ReadStatus::timeout);
    for (int i = 20; i < 50; ++i) ASSERT_TRUE(p.publish(make(i, 20)));
    if (padding) {
      // 14 slots left in the lap; 1000 bytes take 16: padding, then seq 64..79.
      const PublishResult pr = p.publish(make(50, 1000), 1s);
      ASSERT_TRUE(pr) << to_string(pr.status);
      ASSERT_EQ(pr.seq, 64u);
    } else {
      ASSERT_TRUE(p.skip_to(60, 1s));
      ASSERT_TRUE(p.publish(make(50, 20), 1s));
    }
    std::array<Message, 64> out;
    PollResult pr;
    const auto got = c.read_batch(out, pr, 1s);
    // Padding is crossed within a batch; a loss ends it, and is told by the
    // next call, before the message after it.
    const std::size_t in_hand = padding ? 31 : 30;
    ASSERT_EQ(got.size(), in_hand) << "padding " << padding;
    EXPECT_EQ(pr.lost, 0u);
    // Everything the producer may write now, it writes: never over 20..49.
    int written = 0;
    while (written < 200 && p.publish(make(1000 + written, 20), 0ns)) ++written;
    EXPECT_LT(written, 64) << "padding " << padding;
    for (std::size_t i = 0; i < in_hand; ++i)
      EXPECT_EQ(check(got[i].payload), static_cast<std::int64_t>(20 + i)) << "padding " << padding << ", message " << 20 + i;
    if (!padding) {
      const auto after = c.read_batch(out, pr, 1s);
      EXPECT_EQ(pr.lost, 10u) << "seq 50..59, skipped";
      ASSERT_FALSE(after.empty());
      EXPECT_EQ(after[0].seq, 60u);
      EXPECT_EQ(check(after[0].payload), 50);
    }
  }
}

TEST(Spans, AnOverwriteReaderLappedAcrossSpansLosesThemWholeAndCountsEverySequence) {
  ScopedName name("span-lap");
  Bus bus = Bus::create(name, opts(64, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  std::mt19937 rng(7);
  std::uint64_t next_index = 0;
  std::int64_t last = -1;
  std::uint64_t seen_lost = 0;
  for (int round = 0; round < 200; ++round) {
    // Publish more than a ring between reads now and then.
    const int n = round % 7 == 0 ? 40 : 3;
    for (int k = 0; k < n; ++k) {
      const std::size_t len = std::uniform_int_distribution<std::size_t>(16, 700)(rng);
      ASSERT_TRUE(p.publish(make(next_index++, len)));
    }
    for (;;) {
      const ReadResult r = c.next(0ns);
      if (r.status == ReadStatus::lost) {
        seen_lost += r.lost;
        continue;
      }
      if (r.status != ReadStatus::message) break;
      const std::int64_t idx = check(r.message.payload);
      ASSERT_GE(idx, 0) << "a torn or partial message at seq " << r.message.seq;
      ASSERT_GT(idx, last) << "out of order";
      last = idx;
    }
  }
  EXPECT_EQ(last, static_cast<std::int64_t>(next_index - 1)) << "the newest message always arrives";
  EXPECT_GT(seen_lost, 0u);
  EXPECT_EQ(c.lost(), seen_lost);
  // Every sequence is either delivered (with its records) or counted lost.
  EXPECT_EQ(c.cursor(), p.next_seq());
}

// Lapped readers of every size, 1 byte to the longest message: a writer
// thread publishing as fast as it can, readers that stall now and then, on
// an `overwrite` bus and as best-effort readers of a `block` one, through
// next() and read_batch(). Every reader's books balance: each sequence is in
// a message it was handed, in padding before a span, or in a loss it was
// told of before the message after it (tests/lib/ledger.hpp).
enum class ReadWith { next, batch };
struct LapCase {
  Policy policy;
  ReadWith with;
};
class LappedSpans : public ::testing::TestWithParam<LapCase> {};

TEST_P(LappedSpans, EveryReaderIsToldExactlyWhatItLost) {
  const LapCase lc = GetParam();
  ScopedName name("span-books");
  Bus bus = Bus::create(name, opts(256, lc.policy, 128));
  const std::uint32_t max = bus.info().max_message;
  constexpr int kReaders = 2;
  std::vector<std::unique_ptr<Consumer>> readers;
  for (int i = 0; i < kReaders; ++i) {
    ConsumerOptions co;
    co.hold_producer = false;
    readers.push_back(std::make_unique<Consumer>(bus, co));
  }
  // A lossless reader beside them on a `block` bus holds the producer back
  // and must get everything.
  std::unique_ptr<Consumer> lossless;
  if (lc.policy == Policy::block) lossless = std::make_unique<Consumer>(bus);
  constexpr std::uint64_t kMessages = 40000;
  std::atomic<bool> failed{false};
  std::thread writer([&] {
    Producer p(bus);
    std::mt19937 rng(23);
    for (std::uint64_t i = 0; i < kMessages && !failed; ++i) {
      const unsigned r = rng() % 16;
      const std::size_t len = r < 10 ? 1 + rng() % 100 : r < 14 ? 100 + rng() % 2000 : 2000 + rng() % (max - 1999);
      if (!p.publish(make(i, len))) std::abort();
    }
    p.close();
  });
  auto read = [&](Consumer& c, int seed, bool stall, Ledger& books, std::string& err) {
    std::mt19937 rng(seed);
    std::int64_t last = -1;
    auto deliver = [&](const Message& m) {
      books.message(m.seq, m.records);
      if (m.payload.size() >= 16) {
        const std::int64_t idx = check(m.payload);
        if (idx < 0 && err.empty()) err = "torn message at seq " + std::to_string(m.seq);
        if (idx >= 0 && idx <= last && err.empty()) err = "out of order at seq " + std::to_string(m.seq);
        last = std::max(last, idx);
      }
    };
    std::array<Message, 64> buf;
    for (std::uint64_t k = 0;; ++k) {
      if (stall && rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 400));
      if (lc.with == ReadWith::next) {
        const ReadResult r = c.next(5s);
        if (r.status == ReadStatus::end_of_stream) break;
        if (r.status == ReadStatus::lost) {
          books.lost(r.lost);
        } else if (r.status == ReadStatus::message) {
          deliver(r.message);
        } else {
          err = std::string("unexpected ") + to_string(r.status);
          break;
        }
      } else {
        PollResult pr;
        const std::span<const Message> got = c.read_batch(buf, pr, 5s);
        books.lost(pr.lost);
        for (const Message& m : got) deliver(m);
        if (pr.end_of_stream) break;
        if (pr.corrupt || pr.evicted || pr.let_go || (got.empty() && pr.lost == 0)) {
          err = "unexpected batch";
          break;
        }
      }
      if (!books.error().empty()) break;
    }
    if (!books.error().empty()) failed = true;
    if (err.empty() && last != static_cast<std::int64_t>(kMessages - 1) && !failed) err = "the last message never came";
    books.finish(c.cursor());
    if (books.told() != c.lost() && err.empty())
      err = "told " + std::to_string(books.told()) + " lost, lost() says " + std::to_string(c.lost());
  };
  std::vector<Ledger> books(kReaders + 1);
  std::vector<std::string> errs(kReaders + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    books[i] = Ledger(readers[i]->cursor(), 256);
    threads.emplace_back([&, i] { read(*readers[i], 100 + i, true, books[i], errs[i]); });
  }
  if (lossless) {
    books[kReaders] = Ledger(lossless->cursor(), 256);
    threads.emplace_back([&] { read(*lossless, 7, false, books[kReaders], errs[kReaders]); });
  }
  for (std::thread& t : threads) t.join();
  writer.join();
  for (std::size_t i = 0; i < threads.size(); ++i) {
    EXPECT_EQ(books[i].error(), "") << "reader " << i;
    EXPECT_EQ(errs[i], "") << "reader " << i;
  }
  EXPECT_GT(books[0].told() + books[1].told(), 0u) << "the readers were never lapped: the test tests nothing";
  if (lossless) {
    EXPECT_EQ(books[kReaders].told(), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Spans, LappedSpans,
                         ::testing::Values(LapCase{Policy::overwrite, ReadWith::next},
                                           LapCase{Policy::overwrite, ReadWith::batch},
                                           LapCase{Policy::block, ReadWith::next},
                                           LapCase{Policy::block, ReadWith::batch}),
                         [](const ::testing::TestParamInfo<LapCase>& p) {
                           return std::string(p.param.policy == Policy::block ? "best_effort" : "overwrite") +
                                  (p.param.with == ReadWith::next ? "_next" : "_read_batch");
                         });

TEST(Spans, ALateJoinerStartsAtAWholeMessageNeverInsideASpan) {
  for (const Policy policy : {Policy::block, Policy::overwrite}) {
    ScopedName name("span-join");
    Bus bus = Bus::create(name, opts(64, policy));
    Producer p(bus);
    // No reader: the ring keeps the newest records; oldest lands anywhere.
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.publish(make(i, i % 2 ? 200 : 16)));
    ConsumerOptions co;
    co.start = Start::earliest;
    Consumer c(bus, co);
    const ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_GE(check(r.message.payload), 0);
    EXPECT_NE(Inspector::open(name).record(r.message.seq)->inside, true);
  }
}

TEST(Spans, StartingAtASequenceInsideASpanIsRefusedNamingWhereTheNextMessageStarts) {
  ScopedName name("span-seq");
  Bus bus = Bus::create(name, opts(64));
  Producer p(bus);
  ASSERT_TRUE(p.publish(make(0, 16)));
  const PublishResult big = p.publish(make(1, 200));  // seq 1..4: four records
  ASSERT_TRUE(big);
  ASSERT_TRUE(p.publish(make(2, 16)));
  ConsumerOptions co;
  co.start = Start::sequence;
  co.start_seq = 3;
  try {
    Consumer c(bus, co);
    FAIL() << "started inside a span";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::not_retained);
    EXPECT_THAT(e.what(), HasSubstr("sequence 3 is inside a message"));
    EXPECT_THAT(e.what(), HasSubstr("starts at 5"));
  }
  co.start_seq = 1;
  Consumer c(bus, co);
  EXPECT_EQ(check(c.next(1s).message.payload), 1);
}

// A payload made to look like committed records at every slot boundary: a
// reader that lands inside the span must not take them for messages.
TEST(Spans, FakeHeadersInsideASpanArePassedOverNeverDelivered) {
  ScopedName name("span-fake");
  Bus bus = Bus::create(name, opts(16, Policy::overwrite));
  Producer p(bus);
  ASSERT_TRUE(p.publish(make(0, 16)));
  // seq 1..7: one message of seven records whose inside holds valid-looking
  // headers for sequences 2..7.
  std::vector<std::byte> m(7 * 64 - 24, std::byte{'z'});
  for (std::uint64_t s = 2; s < 8; ++s) {
    const std::size_t at = (s - 1) * 64 - 24;
    const std::uint64_t tag = s + 1;
    std::memcpy(m.data() + at, &tag, 8);
    const std::uint32_t len = 5, recs = 1;
    std::memcpy(m.data() + at + 16, &len, 4);
    std::memcpy(m.data() + at + 20, &recs, 4);
    std::memcpy(m.data() + at + 24, "FAKE!", 5);
  }
  ASSERT_EQ(p.publish(m).seq, 1u);
  // 8 more one-record messages: the ring now holds seq 1..16.
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(p.publish(make(10 + i, 16)));
  // The oldest retained is 16 - 16 + ... = the span's inside: whatever the
  // start, no FAKE message.
  for (std::uint64_t start = 2; start < 8; ++start) {
    ConsumerOptions co;
    co.start = Start::earliest;
    Consumer c(bus, co);
    for (;;) {
      const ReadResult r = c.next(0ns);
      if (r.status == ReadStatus::lost || r.status == ReadStatus::corrupt) continue;
      if (r.status != ReadStatus::message) break;
      ASSERT_NE(text(r.message.payload), "FAKE!");
      if (r.message.seq == 1) {
        ASSERT_EQ(r.message.payload.size(), m.size());
        ASSERT_EQ(std::memcmp(r.message.payload.data(), m.data(), m.size()), 0);
      } else {
        ASSERT_GE(check(r.message.payload), 0) << "seq " << r.message.seq;
      }
    }
    ASSERT_TRUE(p.publish(make(20 + start, 16)));
  }
  EXPECT_TRUE(Inspector::open(name).check().empty());
}

// Killed with a span claimed and half written: nothing of it is delivered,
// and the producer that takes over writes its own message at that sequence.
TEST(Spans, AProducerKilledInsideASpanDeliversNoneOfItAndATakeoverContinues) {
  for (const Policy policy : {Policy::block, Policy::overwrite}) {
    ScopedName name("span-kill");
    Bus bus = Bus::create(name, opts(64, policy));
    ConsumerOptions co;
    co.hold_producer = policy == Policy::block;
    Consumer c(bus, co);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      Producer p(bus);
      if (!p.publish(make(0, 16))) ::_exit(3);
      Claim cl = p.claim(1500);
      if (!cl) ::_exit(4);
      const auto m = make(1, 1500);
      std::memcpy(cl.data.data(), m.data(), 700);  // half of it
      ::raise(SIGKILL);
      ::_exit(5);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status));
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(check(r.message.payload), 0);
    r = c.next(300ms);
    EXPECT_NE(r.status, ReadStatus::message) << "part of a span was delivered";
    Producer p(bus);
    EXPECT_EQ(p.next_seq(), 1u) << "the takeover writes where the dead span began";
    ASSERT_TRUE(p.publish(make(2, 30)));
    ASSERT_TRUE(p.publish(make(3, 900)));
    ASSERT_TRUE(p.publish(make(4, 30)));
    for (int want = 2; want <= 4; ++want) {
      do r = c.next(1s);
      while (r.status == ReadStatus::end_of_stream);
      ASSERT_EQ(r.status, ReadStatus::message) << to_string(r.status);
      EXPECT_EQ(check(r.message.payload), want);
    }
    EXPECT_EQ(c.lost(), 0u);
    // A reader that joins now, at the earliest, lands on whole messages only.
    ConsumerOptions late;
    late.start = Start::earliest;
    Consumer l(bus, late);
    for (;;) {
      r = l.next(0ns);
      if (r.status != ReadStatus::message) break;
      EXPECT_GE(check(r.message.payload), 0);
    }
    EXPECT_TRUE(Inspector::open(name).check().empty());
  }
}

// The seqlock across spans: a writer thread publishing mixed sizes as fast
// as it can, checked readers copying behind it. Every message delivered is
// whole, in order; every sequence is delivered or counted lost.
// A takeover clears the inside of the span its predecessor died writing;
// until a producer writes there again those slots hold no commit mark,
// laps after they were first written. shmbus-inspect check knows that.
TEST(Spans, TheSlotsATakeoverClearedAreNoProblemForCheck) {
  ScopedName name("span-kill-lap");
  Bus bus = Bus::create(name, opts(64, Policy::overwrite));
  {
    Producer p(bus);
    for (int i = 0; i < 200; ++i) ASSERT_TRUE(p.publish(make(i, 16)));
    p.detach();
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Producer p(bus);
    Claim cl = p.claim(1500);
    if (!cl) ::_exit(4);
    ::raise(SIGKILL);
    ::_exit(5);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  {
    Producer p(bus);
    EXPECT_EQ(p.next_seq(), 200u);
    ASSERT_TRUE(p.publish(make(1, 16)));  // then it leaves: the cleared slots stay so
    p.detach();
  }
  const std::vector<Problem> problems = Inspector::open(name).check();
  for (const Problem& pr : problems) ADD_FAILURE() << pr.where << ": " << pr.what;
  // Elsewhere a slot without a mark is still a problem: slot 50 (next at
  // 242, beyond any span from head 201 and before the next lap).
  RawSegment raw(name.path());
  raw.record_header(50).tag.store(0);
  const std::vector<Problem> stray = Inspector::open(name).check();
  ASSERT_EQ(stray.size(), 1u);
  EXPECT_EQ(stray[0].where, "record (slot 50)");
  EXPECT_EQ(stray[0].what, "never committed, but head 201 is past it");
}

TEST(Spans, CheckedReadersRacingAWriterOfMixedSizesNeverSeeATornMessage) {
  for (const Policy policy : {Policy::overwrite, Policy::block}) {
    ScopedName name("span-race");
    Bus bus = Bus::create(name, opts(256, policy));
    ConsumerOptions co;
    co.hold_producer = false;  // in `block` a best-effort reader
    Consumer c(bus, co);
    constexpr std::uint64_t kMessages = 60000;
    std::thread writer([&] {
      Producer p(bus);
      std::mt19937 rng(11);
      for (std::uint64_t i = 0; i < kMessages; ++i) {
        const std::size_t len = rng() % 8 == 0 ? 100 + rng() % 3000 : 16 + rng() % 30;
        if (!p.publish(make(i, len))) std::abort();
      }
      p.close();
    });
    std::int64_t last = -1;
    std::uint64_t delivered = 0, lost = 0;
    for (;;) {
      const ReadResult r = c.next(5s);
      if (r.status == ReadStatus::end_of_stream) break;
      if (r.status == ReadStatus::lost) {
        lost += r.lost;
        continue;
      }
      ASSERT_EQ(r.status, ReadStatus::message) << to_string(r.status);
      const std::int64_t idx = check(r.message.payload);
      ASSERT_GE(idx, 0) << "torn message at seq " << r.message.seq;
      ASSERT_GT(idx, last);
      last = idx;
      ++delivered;
    }
    writer.join();
    EXPECT_EQ(last, static_cast<std::int64_t>(kMessages - 1));
    EXPECT_EQ(c.cursor(), bus.head()) << "every sequence delivered or counted lost";
    EXPECT_EQ(c.lost(), lost);
    EXPECT_GT(delivered, 0u);
  }
}

// check() on a live bus walks records its producer rewrites meanwhile:
// a span's payload lands over the headers of the slots it covers (their
// marks were stored first), padding and spans are committed before head
// moves past them, and a memcpy may store a record's fields in any order.
// None of that is a problem; only a record that holds still is judged.
TEST(Spans, CheckFindsNoProblemWhileAProducerOfMixedSizesRewritesTheRing) {
  for (const Policy policy : {Policy::block, Policy::overwrite}) {
    SCOPED_TRACE(policy == Policy::block ? "block" : "overwrite");
    ScopedName name("span-check-live");
    Bus bus = Bus::create(name, opts(256, policy, 128));
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> published{0};
    // In `block` a reader that keeps up, so the producer is never held long.
    std::thread reader;
    if (policy == Policy::block) {
      auto c = std::make_shared<Consumer>(bus);
      reader = std::thread([c] {
        while (c->next(5s).status != ReadStatus::end_of_stream) {
        }
      });
    }
    std::thread writer([&] {
      Producer p(bus);
      std::mt19937 rng(23);
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        // 1 byte .. 24 records: one record half the time, a span otherwise.
        const std::size_t len = rng() % 2 == 0 ? 1 + rng() % 104 : 105 + rng() % 2900;
        if (!p.publish(make(i, len), 5s)) std::abort();
        published.store(i + 1, std::memory_order_relaxed);
      }
      p.close();
    });
    const Inspector insp = Inspector::open(name);
    while (published.load() == 0) std::this_thread::yield();
    std::size_t found = 0, undecided = 0, checks = 0;
    // At least 1000 checks, over at least 100,000 messages (390 laps of
    // records or more).
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    for (int k = 0; (k < 1000 || published.load() < 100'000) && found < 20; ++k, ++checks) {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "only " << published.load() << " messages published after " << k << " checks";
        break;
      }
      std::vector<Problem> not_judged;
      for (const Problem& pr : insp.check(not_judged)) {
        ++found;
        ADD_FAILURE() << "check " << k << ": " << pr.where << ": " << pr.what;
      }
      undecided += not_judged.size();
    }
    const std::uint64_t during = published.load();
    stop = true;
    writer.join();
    if (reader.joinable()) reader.join();
    EXPECT_GE(during, 100'000u);
    std::cout << "[          ] " << during << " messages published during " << checks << " checks, " << undecided
              << " parts not judged\n";
  }
}

}  // namespace
}  // namespace shmbus::test

// The marks of a span are stored in vector runs with a scalar head and
// tail: every alignment of the run's start and every length around the
// vector widths stores exactly the marks of the run, each whole, and
// nothing beside it.
TEST(Spans, AMarkRunStoresEveryMarkOfItsRunAndNothingElse) {
  constexpr std::size_t kTable = 128;
  alignas(64) shmbus::layout::SpanMark table[kTable];
  for (std::size_t start = 0; start < 16; ++start) {
    for (std::uint64_t count = 0; count <= 70; ++count) {
      for (auto& m : table) m.store(0xdeadbeefdeadbeefull, std::memory_order_relaxed);
      const std::uint64_t first = 1'000'000'007ull + start;
      shmbus::detail::store_mark_run(table + start, first, count);
      for (std::size_t i = 0; i < kTable; ++i) {
        const std::uint64_t got = table[i].load(std::memory_order_relaxed);
        if (i >= start && i < start + count)
          ASSERT_EQ(got, first + (i - start) + 1) << "start " << start << " count " << count << " at " << i;
        else
          ASSERT_EQ(got, 0xdeadbeefdeadbeefull) << "start " << start << " count " << count << " at " << i;
      }
    }
  }
}

namespace shmbus::test {
namespace {

// The last byte of a span written over the low byte of an old commit tag
// makes the word read as the commit tag of the record two laps on, before
// that record is written: a 41-byte message on 64-byte records puts its
// 41st byte on the next slot's tag word. A reader that reaches that slot
// waits for the record (head says it is not there yet), never takes the
// stale header and payload for it.
TEST(Spans, AStaleTagWordThatReadsAsTheNextCommitIsNotTakenForTheRecord) {
  for (const bool best_effort : {false, true}) {
    ScopedName name("span-stale-tag");
    Bus bus = Bus::create(name, opts(64, Policy::block));  // 64 records of 64 bytes: 40 in the first
    ConsumerOptions co;
    co.hold_producer = !best_effort;
    Consumer c(bus, co);
    Producer p(bus);
    auto publish_and_read = [&](std::span<const std::byte> m) {
      const PublishResult r = p.publish(m, 1s);
      ASSERT_TRUE(r);
      const ReadResult got = c.next(1s);
      ASSERT_EQ(got.status, ReadStatus::message) << to_string(got.status);
      ASSERT_EQ(got.message.seq, r.seq);
    };
    for (int i = 0; i < 64; ++i) publish_and_read(bytes(i == 1 ? "stale" : "x"));  // seq 1: slot 1, tag word 2
    // Seq 64 takes slots 0 and 1; its last byte lands on slot 1's tag word,
    // whose low byte becomes 130: the word now reads 130, seq 129's commit tag.
    std::vector<std::byte> span(41, std::byte{0x55});
    span.back() = std::byte{130};
    publish_and_read(span);
    for (int s = 66; s <= 128; ++s) publish_and_read(bytes("y"));
    const ReadResult early = c.next(0ns);
    EXPECT_EQ(early.status, ReadStatus::timeout)
        << "took seq " << early.message.seq << " (" << text(early.message.payload) << ") before it was written"
        << (best_effort ? " (best effort)" : "");
    {
      // Nor does a WaitSet see news there, until the record is written.
      WaitSet set;
      set.add(c);
      EXPECT_TRUE(set.wait(50ms).empty()) << "a WaitSet took the stale word for news";
    }
    ASSERT_TRUE(p.publish(bytes("fresh"), 1s));
    const ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, 129u);
    EXPECT_EQ(text(r.message.payload), "fresh");
  }
}

}  // namespace
}  // namespace shmbus::test
