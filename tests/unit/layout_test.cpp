// The shared-memory layout is a contract between processes built at different
// times: these static_asserts restate it independently of layout.hpp, and the
// runtime tests check that a bus created by the library matches it byte for byte.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "layout.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace shmbus::layout;

// --- compile time: the layout as documented in layout.hpp's diagram ---
static_assert(kMagic == 0x3130'5355'424d'4853ULL);
static_assert(kLayoutVersion >= 1);
static_assert(kRecordHeaderSize == 24 && kMinRecordSize == 64 && kCacheLine == 64);
static_assert(kBusyBit == (std::uint64_t{1} << 63));
static_assert(sizeof(SegmentHeader) == 512);
static_assert(sizeof(ReaderSlot) == 128);
static_assert(sizeof(RecordHeader) == 24);
static_assert(std::is_standard_layout_v<SegmentHeader> && std::is_standard_layout_v<ReaderSlot> &&
              std::is_standard_layout_v<RecordHeader>);
static_assert(std::is_trivially_destructible_v<SegmentHeader> &&
              std::is_trivially_destructible_v<ReaderSlot> &&
              std::is_trivially_destructible_v<RecordHeader>);

// Hot fields written by different parties sit on different cache lines.
constexpr std::size_t line(std::size_t offset) { return offset / kCacheLine; }
static_assert(line(offsetof(SegmentHeader, head)) != line(offsetof(SegmentHeader, layout_version)));
static_assert(line(offsetof(SegmentHeader, head)) != line(offsetof(SegmentHeader, producer_owner)));
static_assert(line(offsetof(SegmentHeader, head)) != line(offsetof(SegmentHeader, data_futex)));
static_assert(line(offsetof(SegmentHeader, head)) != line(offsetof(SegmentHeader, space_futex)));
static_assert(line(offsetof(SegmentHeader, data_futex)) !=
              line(offsetof(SegmentHeader, space_futex)));
static_assert(line(offsetof(ReaderSlot, cursor)) != line(offsetof(ReaderSlot, owner)));
static_assert(line(offsetof(ReaderSlot, cursor)) == line(offsetof(ReaderSlot, sleeping)));
// A reader's cursor line is its own: slots are whole cache lines.
static_assert(sizeof(ReaderSlot) % kCacheLine == 0 && alignof(ReaderSlot) == kCacheLine);
static_assert(offsetof(ReaderSlot, cursor) % kCacheLine == 0);

// Every atomic in the segment is lock-free (a lock cannot live in shared memory
// across processes) and 8- or 4-byte aligned within its struct.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(offsetof(SegmentHeader, head) % 8 == 0 && offsetof(SegmentHeader, oldest) % 8 == 0);
static_assert(offsetof(SegmentHeader, data_futex) % 4 == 0 &&
              offsetof(SegmentHeader, space_futex) % 4 == 0);
static_assert(offsetof(RecordHeader, tag) == 0 && offsetof(RecordHeader, length) == 16);

// The log starts on a page boundary after the header, the reader table,
// the bookmark table and the span table (one u64 per record).
static_assert(log_offset_for(1, 2) % kPageSize == 0);
static_assert(bookmark_table_offset_for(max_readers_limit) == 512 + 128 * 1024);
static_assert(span_table_offset_for(max_readers_limit) == 512 + (128 + 64) * 1024);
static_assert(log_offset_for(max_readers_limit, 65536) == align_up(512 + (128 + 64) * 1024 + 8 * 65536, 4096));

// Every role lock sits on the first byte of what the role owns, inside the
// tables (never in the log, which nobody locks).
static_assert(kProducerLockByte == offsetof(SegmentHeader, producer_owner));
static_assert(reader_lock_byte(max_readers_limit - 1) + sizeof(ReaderSlot) == bookmark_table_offset_for(max_readers_limit));
static_assert(bookmark_lock_byte(max_readers_limit, max_readers_limit - 1) + sizeof(Bookmark) <=
              span_table_offset_for(max_readers_limit));

TEST(Layout, LogOffsetIsPageAlignedAndLeavesRoomForEveryReaderSlotBookmarkAndSpanMark) {
  for (std::uint32_t readers = 1; readers <= max_readers_limit; ++readers) {
    for (const std::uint64_t cap : {std::uint64_t{2}, std::uint64_t{1000 * 8}, std::uint64_t{65536}}) {
      const std::uint64_t off = log_offset_for(readers, cap);
      ASSERT_EQ(off % kPageSize, 0u) << readers;
      const std::uint64_t tables =
          sizeof(SegmentHeader) + std::uint64_t{readers} * (sizeof(ReaderSlot) + sizeof(Bookmark)) + cap * sizeof(SpanMark);
      ASSERT_EQ(bookmark_table_offset_for(readers), sizeof(SegmentHeader) + std::uint64_t{readers} * sizeof(ReaderSlot));
      ASSERT_EQ(span_table_offset_for(readers), sizeof(SegmentHeader) + std::uint64_t{readers} * (sizeof(ReaderSlot) + sizeof(Bookmark)));
      ASSERT_GE(off, tables) << readers;
      ASSERT_LT(off - tables, kPageSize) << "more than one page of padding for " << readers << " readers";
    }
  }
  EXPECT_EQ(log_offset_for(1, 64), 4096u);
  EXPECT_EQ(log_offset_for(16, 64), 4096u);
  EXPECT_EQ(log_offset_for(18, 64), 8192u);
  EXPECT_EQ(log_offset_for(1, 65536), 528384u);
}

TEST(Layout, TheLongestMessageIsHalfTheRingLessOneHeaderAndAtMostOneGibibyte) {
  EXPECT_EQ(max_span_for(2), 1u);
  EXPECT_EQ(max_span_for(65536), 32768u);
  EXPECT_EQ(max_message_for(2, 64), 40u) << "a two-record ring carries one record's payload";
  EXPECT_EQ(max_message_for(1024, 256), 512u * 256u - 24u);
  EXPECT_EQ(max_message_for(std::uint64_t{1} << 32, max_record_size), kMaxMessageLimit);
  EXPECT_EQ(records_for(0, 64), 1u);
  EXPECT_EQ(records_for(40, 64), 1u);
  EXPECT_EQ(records_for(41, 64), 2u);
  EXPECT_EQ(records_for(104, 64), 2u);
  EXPECT_EQ(records_for(105, 64), 3u);
}

TEST(Layout, MaxPayloadIsRecordSizeMinusRecordHeader) {
  EXPECT_EQ(max_payload_for(64), 40u);
  EXPECT_EQ(max_payload_for(128), 104u);
  EXPECT_EQ(max_payload_for(256), 232u);
  EXPECT_EQ(max_payload_for(max_record_size), max_record_size - 24);
  EXPECT_EQ(record_size_for(0), 64u);
  EXPECT_EQ(record_size_for(40), 64u);
  EXPECT_EQ(record_size_for(41), 128u);
  EXPECT_EQ(record_size_for(128), 192u);
  EXPECT_EQ(record_size_for(max_record_size - 24), max_record_size);
  EXPECT_EQ(record_size_for(max_record_size - 23), 0u);
}

TEST(Layout, CreatedSegmentMatchesTheDocumentedHeader) {
  ScopedName name("layout");
  BusOptions o;
  o.capacity = 64;
  o.record_size = 192;
  o.max_readers = 40;
  o.policy = Policy::overwrite;
  const auto before = std::chrono::system_clock::now();
  Bus bus = Bus::create(name, o);

  RawSegment raw(name.path());
  const SegmentHeader& h = raw.header();
  EXPECT_EQ(h.magic, kMagic);
  EXPECT_EQ(h.layout_version.load(), kLayoutVersion);
  EXPECT_EQ(h.header_size, sizeof(SegmentHeader));
  EXPECT_EQ(h.record_size, 192u);
  EXPECT_EQ(h.max_readers, 40u);
  EXPECT_EQ(h.capacity, 64u);
  EXPECT_EQ(h.policy, static_cast<std::uint32_t>(Policy::overwrite));
  EXPECT_EQ(h.reader_slot_size, sizeof(ReaderSlot));
  EXPECT_EQ(h.reader_table_offset, sizeof(SegmentHeader));
  EXPECT_EQ(h.log_offset, log_offset_for(40, 64));
  EXPECT_EQ(h.segment_size, log_offset_for(40, 64) + 64u * 192u);
  EXPECT_EQ(raw.size(), h.segment_size) << "file size must equal the header's segment_size";
  EXPECT_EQ(h.creator_pid, static_cast<std::uint32_t>(::getpid()));
  const auto created = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(h.creation_time_ns)));
  EXPECT_GE(created, before - 5s);
  EXPECT_LE(created, std::chrono::system_clock::now() + 5s);
  EXPECT_EQ(h.head.load(), 0u);
  EXPECT_EQ(h.oldest.load(), 0u);
  EXPECT_EQ(h.producer_owner.load(), 0u);

  // BusInfo reports the same numbers.
  const BusInfo& info = bus.info();
  EXPECT_EQ(info.name, name.str());
  EXPECT_EQ(info.policy, Policy::overwrite);
  EXPECT_EQ(info.capacity, 64u);
  EXPECT_EQ(info.record_size, 192u);
  EXPECT_EQ(info.max_payload, 192u - 24u);
  EXPECT_EQ(info.max_readers, 40u);
  EXPECT_EQ(info.segment_size, h.segment_size);
  EXPECT_EQ(info.creation_time_ns, h.creation_time_ns);
  EXPECT_EQ(info.layout_version, kLayoutVersion);
}

TEST(Layout, PublishedRecordSitsAtItsSlotWithTagLengthAndPayload) {
  ScopedName name("layout-rec");
  BusOptions o;
  o.capacity = 8;
  o.record_size = 128;
  Bus bus = Bus::create(name, o);
  ProducerOptions po;
  po.timestamps = Timestamps::coarse;
  Producer p(bus, po);
  RawSegment raw(name.path());
  const std::string msgs[] = {"zero", "", "two two", std::string(104, 'x')};
  for (std::uint64_t i = 0; i < 12; ++i) {
    const std::string& m = msgs[i % 4];
    ASSERT_EQ(p.publish(bytes(m)).status, PublishStatus::ok);
  }
  // Sequences 4..11 are in the ring; 8..11 overwrote slots 0..3.
  for (std::uint64_t seq = 4; seq < 12; ++seq) {
    const RecordHeader& r = raw.record_header(seq);
    const std::string& m = msgs[seq % 4];
    EXPECT_EQ(r.tag.load(), seq + 1) << "commit tag of seq " << seq;
    EXPECT_EQ(r.length, m.size()) << seq;
    EXPECT_NE(r.timestamp_ns, 0u) << seq;
    EXPECT_EQ(std::memcmp(raw.payload(seq), m.data(), m.size()), 0) << seq;
  }
  EXPECT_EQ(raw.header().head.load(), 12u);
  EXPECT_EQ(bus.head(), 12u);
}

TEST(Layout, AttachedConsumerAndProducerAreVisibleInTheSegment) {
  ScopedName name("layout-owner");
  BusOptions o;
  o.capacity = 8;
  o.max_readers = 4;
  Bus bus = Bus::create(name, o);
  ConsumerOptions co;
  co.name = "layout-reader";
  Consumer c(bus, co);
  Producer p(bus);
  RawSegment raw(name.path());
  EXPECT_EQ(raw.header().producer_owner.load(), static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(raw.header().producer_pid.load(), static_cast<std::uint32_t>(::getpid()));
  const ReaderSlot& slot = raw.reader(c.slot());
  EXPECT_EQ(slot.state.load(), kSlotActive);
  EXPECT_EQ(slot.pid.load(), static_cast<std::uint32_t>(::getpid()));
  EXPECT_NE(slot.owner.load(), kOwnerFree);
  EXPECT_EQ(slot.owner.load(), slot.generation.load()) << "the owner ticket is the generation it attached at";
  EXPECT_STREQ(std::string(slot.name, strnlen(slot.name, kReaderNameSize)).c_str(), "layout-reader");
  ASSERT_TRUE(p.publish(bytes("a")));
  ASSERT_TRUE(p.publish(bytes("b")));
  ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  // The cursor may be published lazily (per batch), but after the next read
  // attempt it must cover what was consumed.
  (void)c.next(0ns);
  EXPECT_EQ(slot.cursor.load(), 2u);
  EXPECT_EQ(c.cursor(), 2u);
}

}  // namespace
}  // namespace shmbus::test
