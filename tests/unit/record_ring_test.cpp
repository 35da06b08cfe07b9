// The record protocol (record_ring.hpp) on its own: over ordinary memory,
// and over the log of a real segment, where a Consumer reads what the ring
// wrote and the ring reads what a Producer wrote. Torn copies, half-written
// records and gap markers are made by the test itself, at the documented
// offsets, with no producer process.
#include "record_ring.hpp"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace shmbus::test {
namespace {

using detail::Gap;
using detail::RecordRing;
using detail::TagState;

constexpr std::uint64_t kCap = 8;
constexpr std::uint32_t kRecordSize = 64;  // 40 payload bytes

std::span<const std::byte> text(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string payload_of(const std::byte* p, std::size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// Where a ring's records live: ordinary memory, or a mapped segment's log.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual RecordRing ring() = 0;
};

class PlainMemory : public Memory {
 public:
  PlainMemory() : words_(kCap * kRecordSize / 8, 0), marks_(kCap) {}
  RecordRing ring() override {
    return RecordRing(reinterpret_cast<std::byte*>(words_.data()), marks_.data(), kCap, kRecordSize);
  }

 private:
  std::vector<std::uint64_t> words_;  // 8-byte aligned, zeroed: every tag "never written"
  std::vector<shmbus::layout::SpanMark> marks_;  // zeroed: no slot inside a span
};

class SegmentMemory : public Memory {
 public:
  SegmentMemory() : name_("ring") {
    BusOptions o;
    o.capacity = kCap;
    o.record_size = kRecordSize;
    o.policy = Policy::overwrite;
    bus_.emplace(Bus::create(name_, o));
    raw_ = std::make_unique<RawSegment>(name_.path());
  }
  RecordRing ring() override {
    return RecordRing(raw_->base() + raw_->header().log_offset,
                      reinterpret_cast<shmbus::layout::SpanMark*>(
                          raw_->base() + shmbus::layout::span_table_offset_for(raw_->header().max_readers)),
                      raw_->header().capacity, raw_->header().record_size);
  }
  const Bus& bus() const { return *bus_; }
  // What a producer stores after its commits: readers take a committed
  // record for the record only below head.
  void announce(std::uint64_t head) { raw_->header().head.store(head, std::memory_order_release); }

 private:
  ScopedName name_;
  std::optional<Bus> bus_;
  std::unique_ptr<RawSegment> raw_;
};

void write(const RecordRing& ring, std::uint64_t seq, std::string_view payload, std::uint64_t ts = 7,
           bool shared = true) {
  layout::RecordHeader* r = ring.record(seq);
  RecordRing::begin_write(r, seq);
  RecordRing::write_payload(r, text(payload), shared);
  RecordRing::finish_write(r, seq, static_cast<std::uint32_t>(payload.size()), ts);
}

TEST(RecordTags, NameTheirSequenceAndState) {
  EXPECT_EQ(detail::committed_tag(0), 1u);
  EXPECT_EQ(detail::tag_seq(detail::committed_tag(41)), 41u);
  EXPECT_EQ(detail::tag_seq(detail::busy_tag(41)), 41u);
  EXPECT_TRUE(detail::is_busy(detail::busy_tag(41)));
  EXPECT_FALSE(detail::is_busy(detail::committed_tag(41)));

  EXPECT_EQ(detail::tag_state(detail::committed_tag(5), 5), TagState::ready);
  EXPECT_EQ(detail::tag_state(0, 5), TagState::not_yet);                            // never written
  EXPECT_EQ(detail::tag_state(detail::busy_tag(5), 5), TagState::not_yet);          // being written
  EXPECT_EQ(detail::tag_state(detail::committed_tag(5), 5 + kCap), TagState::not_yet);  // the lap before
  EXPECT_EQ(detail::tag_state(detail::committed_tag(5 + kCap), 5), TagState::passed);
  EXPECT_EQ(detail::tag_state(detail::busy_tag(5 + kCap), 5), TagState::passed);
}

TEST(RecordLaps, ResumePastWhatIsCertainlyGone) {
  // One lap: only the reader's own record is certainly gone.
  EXPECT_EQ(detail::resume_after_lap(3, 3 + kCap, 3 + kCap + 1, kCap), 4u);
  // Head says more is gone: resume a ring behind it.
  EXPECT_EQ(detail::resume_after_lap(3, 3 + kCap, 20, kCap), 20 - kCap);
  // Several laps: everything a ring behind the found sequence is gone.
  EXPECT_EQ(detail::resume_after_lap(3, 3 + 4 * kCap, 3 + 4 * kCap + 1, kCap), 3 + 3 * kCap + 1);
  // A head that makes no sense is ignored, not trusted.
  EXPECT_EQ(detail::resume_after_lap(3, 3 + kCap, 1'000'000, kCap), 4u);
  // No publish writes a full ring past head; no sequence reaches 2^62.
  EXPECT_EQ(detail::resume_after_lap(3, 3 + kCap, 3, kCap), std::nullopt);
  EXPECT_EQ(detail::resume_after_lap(3, layout::kMaxSequence + 3, layout::kMaxSequence, kCap), std::nullopt);
}

class RecordRingOn : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam())
      memory_ = std::make_unique<SegmentMemory>();
    else
      memory_ = std::make_unique<PlainMemory>();
    ring_ = memory_->ring();
  }
  std::unique_ptr<Memory> memory_;
  RecordRing ring_;
};

TEST_P(RecordRingOn, AWrittenRecordReadsBackWhole) {
  EXPECT_EQ(ring_.capacity(), kCap);
  EXPECT_EQ(ring_.max_payload(), kRecordSize - layout::kRecordHeaderSize);
  EXPECT_EQ(RecordRing::load_tag(ring_.record(3)), 0u) << "a fresh ring has no record";
  write(ring_, 3, "hello", 1234);
  layout::RecordHeader* r = ring_.record(3);
  const std::uint64_t t = RecordRing::load_tag(r);
  ASSERT_EQ(detail::tag_state(t, 3), TagState::ready);
  EXPECT_EQ(RecordRing::load_length(r), 5u);
  EXPECT_EQ(RecordRing::load_timestamp(r), 1234u);
  EXPECT_EQ(payload_of(RecordRing::payload(r), 5), "hello");
  std::vector<std::byte> dst(ring_.max_payload());
  RecordRing::Copy c;
  ASSERT_TRUE(ring_.copy_checked(3, t, dst.data(), dst.size(), c));
  EXPECT_EQ(c.length, 5u);
  EXPECT_EQ(c.timestamp_ns, 1234u);
  EXPECT_FALSE(c.gap);
  EXPECT_EQ(payload_of(dst.data(), 5), "hello");
  // Sequence 3 + capacity lives in the same record.
  EXPECT_EQ(ring_.record(3 + kCap), r);
  EXPECT_TRUE(ring_.same_slot(3, 3 + 5 * kCap));
  EXPECT_FALSE(ring_.same_slot(3, 4));
}

TEST_P(RecordRingOn, ACopyOverlappingARewriteIsTorn) {
  write(ring_, 2, "old occupant");
  layout::RecordHeader* r = ring_.record(2);
  const std::uint64_t t = RecordRing::load_tag(r);
  // The writer begins the next lap's record before the reader re-checks.
  std::vector<std::byte> dst(ring_.max_payload());
  RecordRing::Copy c;
  RecordRing::begin_write(r, 2 + kCap);
  EXPECT_FALSE(ring_.copy_checked(2, t, dst.data(), dst.size(), c)) << "a copy made while the record was rewritten was kept";
  EXPECT_FALSE(RecordRing::unchanged(r, t));
  // Committed, the new occupant reads whole, and the old tag still fails.
  RecordRing::write_payload(r, text("new occupant"), true);
  RecordRing::finish_write(r, 2 + kCap, 12, 9);
  const std::uint64_t t2 = RecordRing::load_tag(r);
  EXPECT_EQ(detail::tag_state(t2, 2), TagState::passed);
  EXPECT_FALSE(RecordRing::unchanged(r, t));
  ASSERT_TRUE(ring_.copy_checked(2 + kCap, t2, dst.data(), dst.size(), c));
  EXPECT_EQ(payload_of(dst.data(), c.length), "new occupant");
}

TEST_P(RecordRingOn, AHalfWrittenRecordIsNotReady) {
  write(ring_, 1, "committed");
  layout::RecordHeader* r = ring_.record(1 + kCap);
  RecordRing::begin_write(r, 1 + kCap);
  RecordRing::write_payload(r, text("half"), true);
  // No finish_write: for a reader of 1 + capacity it is not there yet, for
  // a reader still at 1 it is gone.
  const std::uint64_t t = RecordRing::load_tag(r);
  EXPECT_EQ(detail::tag_state(t, 1 + kCap), TagState::not_yet);
  EXPECT_EQ(detail::tag_state(t, 1), TagState::passed);
  EXPECT_EQ(ring_.committed_end(0), 0u) << "record 0 was never written";
}

TEST_P(RecordRingOn, GapMarkersSayWhereTheStreamGoesOn) {
  ring_.write_gap_marker(4, Gap{7, true}, 0, true);
  ring_.write_gap_marker(5, Gap{7, true}, 0, true);
  ring_.write_gap_marker(6, Gap{7, true}, 0, true);
  for (std::uint64_t m = 4; m < 7; ++m) {
    layout::RecordHeader* r = ring_.record(m);
    ASSERT_EQ(RecordRing::load_tag(r), detail::committed_tag(m));
    const std::optional<Gap> g = ring_.read_gap(r, m);
    ASSERT_TRUE(g) << "marker " << m;
    EXPECT_EQ(g->to, 7u);
    EXPECT_TRUE(g->lost);
    std::vector<std::byte> dst(ring_.max_payload(), std::byte{0x55});
    RecordRing::Copy c;
    ASSERT_TRUE(ring_.copy_checked(m, RecordRing::load_tag(r), dst.data(), dst.size(), c));
    ASSERT_TRUE(c.gap);
    EXPECT_EQ(c.gap->to, 7u);
    EXPECT_EQ(dst[0], std::byte{0x55}) << "a gap marker's payload was copied as a message";
  }
  ring_.write_gap_marker(0, Gap{3, false}, 0, false);
  const std::optional<Gap> start = ring_.read_gap(ring_.record(0), 0);
  ASSERT_TRUE(start);
  EXPECT_FALSE(start->lost) << "a bus that starts later skips nothing";
  write(ring_, 1, "a message");
  EXPECT_FALSE(ring_.read_gap(ring_.record(1), 1)) << "a message is not a gap";
}

TEST_P(RecordRingOn, GapTargetsNoSkipToWritesAreRefused) {
  // A target not after the marker, more than a ring past it, or at 2^62.
  for (std::uint64_t to : {std::uint64_t{2}, std::uint64_t{1}, 2 + kCap + 1, layout::kMaxSequence}) {
    layout::RecordHeader* r = ring_.record(2);
    RecordRing::begin_write(r, 2);
    const std::uint64_t word = to;
    RecordRing::write_payload(r, std::as_bytes(std::span(&word, 1)), true);
    RecordRing::finish_write(r, 2, layout::kGapLost, 0);
    EXPECT_FALSE(ring_.read_gap(r, 2)) << "target " << to;
  }
}

TEST_P(RecordRingOn, CommittedEndFollowsRecordsAndGaps) {
  EXPECT_EQ(ring_.committed_end(0), 0u);
  write(ring_, 0, "a");
  write(ring_, 1, "b");
  EXPECT_EQ(ring_.committed_end(0), 2u);
  // A committed gap is followed to its end; the record after it is not written.
  for (std::uint64_t m = 2; m < 5; ++m) ring_.write_gap_marker(m, Gap{5, true}, 0, true);
  EXPECT_EQ(ring_.committed_end(0), 5u);
  write(ring_, 5, "f");
  EXPECT_EQ(ring_.committed_end(0), 6u);
  // A later lap's message in the slot of 6 is not 6: the stream ends there.
  write(ring_, 6 + kCap, "g");
  EXPECT_EQ(ring_.committed_end(0), 6u);
}

TEST_P(RecordRingOn, AGapLongerThanTheRingIsFollowedOnceItsLowestMarkerIsCommitted) {
  // skip_to(from = 2, to = 2 + 3 * capacity): markers fill the last lap
  // before the target, highest first; the slot of 2 holds a later marker.
  const std::uint64_t to = 2 + 3 * kCap;
  for (std::uint64_t m = to; m-- > to - kCap + 1;) ring_.write_gap_marker(m, Gap{to, true}, 0, true);
  EXPECT_EQ(ring_.committed_end(2), 2u) << "the lowest marker is not written yet: the gap may be half made";
  EXPECT_EQ(ring_.long_gap_end(2), std::nullopt);
  ring_.write_gap_marker(to - kCap, Gap{to, true}, 0, true);
  EXPECT_EQ(ring_.long_gap_end(2), to);
  EXPECT_EQ(ring_.committed_end(2), to);
}

INSTANTIATE_TEST_SUITE_P(Memory, RecordRingOn, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Segment" : "Plain"; });

// A writer rewrites one record as fast as it can while a reader copies it:
// every copy the reader keeps is one whole occupant, never a mix.
TEST(RecordRingRace, EveryKeptCopyIsOneWholeOccupant) {
  PlainMemory memory;
  const RecordRing ring = memory.ring();
  constexpr std::uint64_t kKeep = 5'000;
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::vector<std::byte> data(ring.max_payload());
    for (std::uint64_t s = 0; !done.load(std::memory_order_relaxed); ++s) {
      const std::uint64_t seq = 3 + s * kCap;  // always record 3
      std::memset(data.data(), static_cast<int>(seq & 0xff), data.size());
      layout::RecordHeader* r = ring.record(seq);
      RecordRing::begin_write(r, seq);
      const std::size_t n = 8 + seq % (data.size() - 8);
      RecordRing::write_payload(r, std::span<const std::byte>(data.data(), n), true);
      RecordRing::finish_write(r, seq, static_cast<std::uint32_t>(n), seq);
    }
  });
  std::uint64_t kept = 0, torn = 0;
  std::optional<std::uint64_t> mixed;  // a kept copy that was not one occupant
  std::vector<std::byte> dst(ring.max_payload());
  while (kept < kKeep) {
    layout::RecordHeader* r = ring.record(3);
    const std::uint64_t t = RecordRing::load_tag(r);
    if (t == 0 || detail::is_busy(t)) continue;
    const std::uint64_t seq = detail::tag_seq(t);
    RecordRing::Copy c;
    if (!ring.copy_checked(seq, t, dst.data(), dst.size(), c)) {
      ++torn;
      continue;
    }
    ++kept;
    bool whole = c.timestamp_ns == seq && c.length == 8 + seq % (ring.max_payload() - 8);
    for (std::uint32_t k = 0; whole && k < c.length; ++k) whole = dst[k] == static_cast<std::byte>(seq & 0xff);
    if (!whole) {
      mixed = seq;
      break;
    }
  }
  done.store(true, std::memory_order_relaxed);
  writer.join();
  EXPECT_EQ(mixed, std::nullopt) << "a kept copy of record " << *mixed << " mixes occupants";
  RecordProperty("kept", std::to_string(kept));
  RecordProperty("torn", std::to_string(torn));
}

// The unit is the library's protocol: a Consumer reads what the ring wrote
// into a segment, and the ring reads what a Producer wrote.
TEST(RecordRingIsTheBusProtocol, ConsumerReadsRingWritesAndRingReadsProducerWrites) {
  SegmentMemory memory;
  const RecordRing ring = memory.ring();
  Consumer c(memory.bus(), ConsumerOptions{});
  write(ring, 0, "from the ring");
  ring.write_gap_marker(1, Gap{3, true}, 0, true);
  ring.write_gap_marker(2, Gap{3, true}, 0, true);
  write(ring, 3, "after the gap");
  memory.announce(4);
  ReadResult r = c.next(std::chrono::seconds(1));
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 0u);
  EXPECT_EQ(payload_of(r.message.payload.data(), r.message.payload.size()), "from the ring");
  r = c.next(std::chrono::seconds(1));
  ASSERT_EQ(r.status, ReadStatus::lost);
  EXPECT_EQ(r.lost, 2u);
  r = c.next(std::chrono::seconds(1));
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 3u);

  // A producer taking over goes on after the last committed record.
  Producer p(memory.bus());
  EXPECT_EQ(p.next_seq(), 4u);
  ASSERT_TRUE(p.publish(text("from the producer")));
  layout::RecordHeader* rec = ring.record(4);
  const std::uint64_t t = RecordRing::load_tag(rec);
  ASSERT_EQ(t, detail::committed_tag(4));
  std::vector<std::byte> dst(ring.max_payload());
  RecordRing::Copy copied;
  ASSERT_TRUE(ring.copy_checked(4, t, dst.data(), dst.size(), copied));
  EXPECT_EQ(payload_of(dst.data(), copied.length), "from the producer");
}

}  // namespace
}  // namespace shmbus::test
