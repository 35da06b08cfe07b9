// shmbus — the shared-memory layout. Everything that crosses the process
// boundary is defined here and nowhere else.
//
// A bus is one shared-memory segment, DIR/shmbus.NAME (DIR is /dev/shm or
// another tmpfs or hugetlbfs directory):
//
//   offset 0                header_size              bookmark_table_offset_for()
//   +-----------------------+------------------------+---------------------------+
//   | SegmentHeader (512 B) | ReaderSlot[max_readers] | Bookmark[max_readers]    |
//   | identity, head, owner,| 128 B each: owner, name,| 64 B each: a durable     |
//   | futex words, counters | cursor, counters        | reader's name and cursor |
//   +-----------------------+------------------------+---------------------------+
//
//   span_table_offset_for()                        log_offset_for() (4 KiB aligned)
//   +---------------------------------------------+---------------------------------+
//   | SpanMark[capacity] (u64 each): which slots  | Record[capacity]                |
//   | hold the inside of a message, not its start | record_size bytes each,         |
//   |                                             | slot = seq & (capacity - 1)     |
//   +---------------------------------------------+---------------------------------+
//                                       segment_size = log_offset + capacity * record_size
//   On hugetlbfs the file is segment_size rounded up to a whole huge page
//   (the file system sizes files in nothing smaller); the rest is unused.
//
// SegmentHeader, one 64-byte cache line per row (byte offsets):
//
//     0  identity   magic u64 | layout_version u32 (written LAST) | header_size u32 |
//                   record_size u32 | max_readers u32 | capacity u64 | policy u32 |
//                   reader_slot_size u32 | reader_table_offset u64 | log_offset u64 |
//                   segment_size u64                                  (immutable)
//    64  creation   creation_time_ns u64 | creator_pid u32 | reserved  (immutable)
//   128  publish    head u64 | oldest u64 | reserved         (producer writes)
//   192  producer   owner u64 | start_ticks u64 | pid u32 | closed u32 | takeovers u32 |
//                   pid_ns u32 | producer_waits u64 | producer_wait_ns u64 |
//                   wakeups u64 | readers_reclaimed u64
//   256  data wake  data_futex u32 | data_sleepers u32 | data_armed u32 | removed u32 |
//                   best_effort_readers u32 | reserved
//                                             (consumers sleep here; the producer reads
//                                              data_armed, removed and best_effort_readers
//                                              on every publish)
//   320  space wake space_futex u32 | producer_sleeping u32 | blocked_on_slot u32 |
//                   reserved u32 | wait_start_ns u64 | space_wanted u64 |
//                   readers_let_go u64 | max_hold_ns u64 | reserved
//                                                          (producer sleeps here)
//   384  reserved (two lines)
//
// ReaderSlot (128 bytes; two cache lines so the cursor line is the consumer's alone):
//
//     0  owner u64 | state u32 | pid u32 | generation u64 | name char[32] |
//        attach_time_ns u64                                 (set at attach/reclaim)
//    64  cursor u64 | delivered u64 | lost u64 | last_active_ns u64 | sleeping u32 |
//        pid_ns u32 | start_ticks u64 | let_go_ns u64 | reserved
//                                      (the consumer writes; let_go_ns who lets it go)
//
// The slot's state moves kFree -> kActive or kBestEffort at attach and back
// to kFree at detach or reclaim, by the holder of the slot's role lock (or a
// reclaimer that took it). One other move: a reader is let go, kActive ->
// kBestEffort, by compare-and-swap, and let_go_ns stamped, by a producer
// with a hold limit (ProducerOptions::max_hold) that waited that long for
// it, or by an administrator (let_go_reader(), shmbus-inspect let-go); only
// the producer ever moves a slot back, within its own let-go of a slot
// that changed hands (reader_table.hpp, let_go()). Every writer of `state`
// uses an atomic read-modify-write or owns the slot.
//
// Bookmark (64 bytes; one per durable reader name, ConsumerOptions::durable):
//
//     0  holder u64   pid of the reader that holds (or last held) the name,
//                     a label for people; the bookmark's role lock says
//                     whether a live reader holds it
//     8  state u32    kBookmarkEmpty / kBookmarkValid (name and cursor set)
//    12  holder_pid_ns u32  inode of the holder's PID namespace, 0 if unknown (a label)
//    16  cursor u64   next sequence the named reader will read; written by the
//                     holder each time it publishes its slot's cursor
//    24  updated_ns u64  CLOCK_REALTIME of the holder's last detach or update
//    32  name char[32]   NUL-padded; untrusted when read
//
// A bookmark does not hold the producer back: only active reader slots do.
//
// Record (record_size bytes, a multiple of 8; 8-byte aligned, so a record may
// share a cache line with its neighbours unless record_size is a multiple of
// 64, as record_size_for() picks):
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-------------------------------------------------------------+
//   |B|                commit tag (u64): seq + 1                    |  0
//   + +                                                             +
//   | |                 (B: being overwritten)                      |
//   +-+-------------------------------------------------------------+
//   |                   timestamp_ns (u64, CLOCK_REALTIME or 0)     |  8
//   +                                                               +
//   |                                                               |
//   +---------------------------------------------------------------+
//   |                   length (u32, <= max_message_for(), or a gap | 16
//   |                   marker: kGapLost / kGapStart / kGapPad)     |
//   +---------------------------------------------------------------+
//   |                   records (u32): slots the message occupies,  | 20
//   |                   1 .. max_span_for(); 1 for a gap marker     |
//   +---------------------------------------------------------------+
//   |                   payload (length bytes) ...                  | 24
//   +---------------------------------------------------------------+
//
// The commit tag is written LAST, with release, after the payload, timestamp
// and length: tag == seq + 1 means "record seq is complete". 0 means never
// written. Before writing a record the producer stores BUSY | (seq + 1), so
// an `overwrite` consumer still copying the previous occupant sees the tag
// change and discards its copy (seqlock). In a `block` bus no live reader
// is on a record being overwritten; there the BUSY tag tells the inspector
// (and a copy it is making) that the record is being written, and a reader
// meeting skip_to's markers that they are not yet complete.
//
// Gap markers (Producer::skip_to): a committed record whose length is
// kGapLost or kGapStart carries no message; its first 8 payload bytes hold
// the sequence the stream continues at (greater than the marker's own). A
// reader at the marker moves its cursor there, counting the sequences in
// between as lost (kGapLost) or not (kGapStart: a bus that never carried a
// message starting at a later sequence). skip_to writes a marker into every
// slot of the gap that lies within one ring of its end, highest first and the
// lowest last, so a reader that lands anywhere in the gap finds one, and a
// takeover that finds the lowest marker committed knows the whole gap is.
//
// Spans. A message longer than one record's payload (record_size - 24)
// occupies `records` consecutive slots, and its payload runs on
// contiguously from the first record's header over the slots that follow
// (no headers there): a reader gets one view of it.
//
//   slot s             slot s+1           slot s+2           slot s+3
//   +------+---------+------------------+------------------+------------------+
//   |header| payload ...                                   ...|  next record   |
//   |rec=3 |                                                  |  (or padding)  |
//   +------+---------+------------------+------------------+------------------+
//   span[s]: older     span[s+1] = s+2    span[s+2] = s+3     span[s+3]: older
//
// A span never crosses the end of the ring: when it would, the producer
// first pads the rest of the lap with gap markers of kind kGapPad (which
// lose nothing; a reader crosses them as it crosses kGapStart) and starts
// the span at slot 0 of the next lap. A message takes at most
// max_span_for() slots: half the ring, so a span and its padding always
// fit. Sequence numbers count slots: a message's sequence is that of its
// first record, and the next message's is at least seq + records.
//
// The span table marks the inside of spans: SpanMark[slot] = p + 1 when the
// slot holds position p of a span that began before p; 0 or any older
// position means the slot's own header is (or was) a record's. The producer
// stores the marks of a span before any of its payload (a release fence
// between), so a reader that finds the slot's tag word rewritten by a
// span's payload also finds the mark. In-order readers never look at the
// table (a record's `records` says where the next one starts); it is for a
// reader that lands somewhere it did not come to in order (a late joiner, a
// lapped reader, a resumed durable name: it moves on past marked slots), and
// for a checked copy, which re-checks its record's mark with its tag.
//
// The code that writes and reads records by these rules, over any memory,
// is record_ring.hpp.
//
// Role locks: who is alive is decided by the kernel, never by pid numbers.
// Every role is held through an open-file-description lock (fcntl
// F_OFD_SETLK, F_WRLCK) on one byte of the segment file, taken on an open
// file description of the holder's own; the kernel drops it when the last
// descriptor of that description closes, which process exit does in any PID
// or mount namespace, with or without /proc, whatever state its threads are
// in. Whoever wonders whether a holder lives tests the byte (F_OFD_GETLK)
// from another description. The locked byte is the first byte of the
// structure the role owns:
//
//   producer role     byte offsetof(SegmentHeader, producer_owner)  (192)
//   reader slot i     byte reader_table_offset + i * sizeof(ReaderSlot)
//   bookmark i        byte bookmark_table_offset_for(max_readers) + i * sizeof(Bookmark)
//
// Locks are advisory and touch no data. A slot whose byte nobody has
// locked has no live holder: a reclaimer takes the lock itself (so an
// attacher and a reclaimer never work on one slot at once), cleans the slot
// and unlocks. Pids stored beside them are labels for people.
//
// A bus is created under a temporary name (.shmbus.NAME.XXXXXX, whose
// creator holds a lock on byte 0) and renamed to shmbus.NAME, with
// RENAME_NOREPLACE, only once complete: a segment under a bus name is never
// half made, and a creator's death leaves only its temporary file, which
// the next creation of that name removes once its lock is free.
//
// Versioning: bump kLayoutVersion whenever any offset, size, field meaning or
// protocol rule here changes. Readers refuse any other version. New fields go
// into reserved bytes only together with a version bump.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shmbus/placement.hpp"

namespace shmbus::layout {

inline constexpr std::uint64_t kMagic = 0x3130'5355'424d'4853ULL;  // "SHMBUS01" little-endian
// 2: header.space_wanted; a reader wakes a sleeping producer only when its
//    cursor crosses it (version 1 readers woke it on every cursor update).
// 3: the bookmark table after the reader table (durable reader names), and
//    header.removed (a bus removed by force ends every stream, stops its producer).
// 4: records are a multiple of 8 bytes (was 64), and gap markers.
// 5: liveness by role locks (above); ReaderSlot.owner is an attachment
//    ticket and .generation counts attachments and reclaims; pids are labels.
// 6: best-effort readers (kSlotBestEffort, header.best_effort_readers).
// 7: the hold limit: a producer may move a slot kSlotActive -> kSlotBestEffort
//    (ReaderSlot.let_go_ns, header.readers_let_go, header.max_hold_ns).
// 8: spans: a message may occupy several records (RecordHeader.records, the
//    span table before the log, kGapPad markers at the end of a lap).
inline constexpr std::uint32_t kLayoutVersion = 8;
inline constexpr std::uint32_t kCacheLine = 64;
inline constexpr std::uint32_t kPageSize = 4096;
inline constexpr std::uint32_t kRecordHeaderSize = 24;
inline constexpr std::uint32_t kMinRecordSize = 64;
inline constexpr std::uint32_t kRecordAlign = 8;
// RecordHeader::length values that mark a gap (never a payload length: those
// are below max_record_size).
inline constexpr std::uint32_t kGapLost = 0xFFFF'FFFF;
inline constexpr std::uint32_t kGapStart = 0xFFFF'FFFE;
inline constexpr std::uint32_t kGapPad = 0xFFFF'FFFD;  // the rest of a lap, before a span
// No message is longer than this, whatever the ring (lengths stay far below
// the gap marker values, and a bridge frame length fits a u32).
inline constexpr std::uint32_t kMaxMessageLimit = 1u << 30;
inline constexpr std::uint32_t kReaderNameSize = 32;
inline constexpr std::uint64_t kBusyBit = std::uint64_t{1} << 63;
// No sequence reaches 2^62 (146 years at 10^9 messages a second): a head, a
// gap marker's target or a tag at or past it is corrupt. Far below 2^64, so
// seq + 1 never wraps to 0, the tag of a record never written.
inline constexpr std::uint64_t kMaxSequence = std::uint64_t{1} << 62;

// ReaderSlot::owner holds kOwnerFree or the ticket of the attachment that
// holds the slot: the slot's generation after it was incremented at attach,
// so an attachment never sees its own ticket again once the slot was taken
// from it (reclaimed, or cleared by a stray store). Only the holder of the
// slot's role lock writes line 0 of a slot.
inline constexpr std::uint64_t kOwnerFree = 0;

// ReaderSlot::state
inline constexpr std::uint32_t kSlotFree = 0;
inline constexpr std::uint32_t kSlotActive = 1;      // reading; in `block` its cursor holds the producer
inline constexpr std::uint32_t kSlotBestEffort = 2;  // reading, never holds the producer: it may be
                                                     // lapped, and reads with checked copies

// Bookmark::state
inline constexpr std::uint32_t kBookmarkEmpty = 0;
inline constexpr std::uint32_t kBookmarkValid = 1;

struct alignas(kCacheLine) SegmentHeader {
  // --- line 0: identity, immutable once layout_version is set ---
  std::uint64_t magic;
  std::atomic<std::uint32_t> layout_version;  // 0 while initialising; stored last (release)
  std::uint32_t header_size;
  std::uint32_t record_size;
  std::uint32_t max_readers;
  std::uint64_t capacity;
  std::uint32_t policy;  // shmbus::Policy
  std::uint32_t reader_slot_size;
  std::uint64_t reader_table_offset;
  std::uint64_t log_offset;
  std::uint64_t segment_size;

  // --- line 1: creation, immutable ---
  alignas(kCacheLine) std::uint64_t creation_time_ns;
  std::uint32_t creator_pid;
  std::uint32_t reserved1[13];

  // --- line 2: written by the producer on every publish ---
  alignas(kCacheLine) std::atomic<std::uint64_t> head;  // next sequence to publish
  std::atomic<std::uint64_t> oldest;  // block: a joining reader may start here, never
                                      // overwritten while a cursor is at or after it.
                                      // overwrite: unused (oldest is head - capacity)
  std::uint64_t reserved2[6];

  // --- line 3: producer role and counters (rarely written) ---
  alignas(kCacheLine) std::atomic<std::uint64_t> producer_owner;  // packed identity, 0 = none
  std::atomic<std::uint64_t> producer_start_ticks;
  std::atomic<std::uint32_t> producer_pid;     // last holder (kept after it leaves)
  std::atomic<std::uint32_t> closed;           // 1 = end-of-stream marked
  std::atomic<std::uint32_t> takeovers;
  std::atomic<std::uint32_t> producer_pid_ns;  // label: inode of the holder's PID namespace, 0 if unknown
  std::atomic<std::uint64_t> producer_waits;
  std::atomic<std::uint64_t> producer_wait_ns;
  std::atomic<std::uint64_t> wakeups;
  std::atomic<std::uint64_t> readers_reclaimed;

  // --- line 4: consumers waiting for data sleep on data_futex ---
  alignas(kCacheLine) std::atomic<std::uint32_t> data_futex;
  std::atomic<std::uint32_t> data_sleepers;  // consumers asleep now (for the inspector)
  std::atomic<std::uint32_t> data_armed;     // 1: someone went to sleep since the last wake
  std::atomic<std::uint32_t> removed;        // 1: removed by force (shmbus-inspect rm --force)
  std::atomic<std::uint32_t> best_effort_readers;  // slots in kSlotBestEffort (or about to be): while
                                                   // not 0, a block producer writes payloads as an
                                                   // overwrite one does (word by word), since such a
                                                   // reader may be copying a record it rewrites
  std::uint32_t reserved4[11];

  // --- line 5: the producer waiting for space sleeps on space_futex ---
  alignas(kCacheLine) std::atomic<std::uint32_t> space_futex;
  std::atomic<std::uint32_t> producer_sleeping;  // 1: armed; the first consumer to clear it wakes
  std::atomic<std::uint32_t> blocked_on_slot;  // slot + 1 of the reader holding it back, 0 = none
  std::uint32_t reserved5a;
  std::atomic<std::uint64_t> wait_start_ns;    // CLOCK_REALTIME the current wait for space began, 0 = none
  std::atomic<std::uint64_t> space_wanted;     // while producer_sleeping: the cursor every reader must
                                               // reach; a reader whose cursor crosses it wakes the producer
  std::atomic<std::uint64_t> readers_let_go;   // readers let go (hold limit, or an administrator)
  std::atomic<std::uint64_t> max_hold_ns;      // the attached producer's hold limit, 0 = none (a label)
  std::uint64_t reserved5[2];

  // --- lines 6-7: reserved ---
  alignas(kCacheLine) std::uint8_t reserved6[128];
};

struct alignas(kCacheLine) ReaderSlot {
  // --- line 0: identity, written at attach and reclaim ---
  std::atomic<std::uint64_t> owner;  // the holding attachment's ticket, or kOwnerFree
  std::atomic<std::uint32_t> state;  // kSlotFree / kSlotActive / kSlotBestEffort
  std::atomic<std::uint32_t> pid;    // label: the holder's pid in its own PID namespace
  std::atomic<std::uint64_t> generation;  // attachments and reclaims so far
  char name[kReaderNameSize];  // NUL-padded; untrusted when read
  std::atomic<std::uint64_t> attach_time_ns;

  // --- line 1: written by the owning consumer only ---
  alignas(kCacheLine) std::atomic<std::uint64_t> cursor;  // next sequence it will read
  std::atomic<std::uint64_t> delivered;
  std::atomic<std::uint64_t> lost;
  std::atomic<std::uint64_t> last_active_ns;
  std::atomic<std::uint32_t> sleeping;
  std::atomic<std::uint32_t> pid_ns;       // label: inode of the holder's PID namespace, 0 if unknown
  std::atomic<std::uint64_t> start_ticks;  // label: the holder's start time from its /proc, 0 if none
  std::atomic<std::uint64_t> let_go_ns;    // CLOCK_REALTIME it was let go (hold limit, administrator), 0 = never
  std::uint64_t reserved1[1];
};

struct alignas(kCacheLine) Bookmark {
  std::atomic<std::uint64_t> holder;  // label: pid of the last holder, 0 = never held
  std::atomic<std::uint32_t> state;   // kBookmarkEmpty / kBookmarkValid
  std::atomic<std::uint32_t> holder_pid_ns;  // label, as ReaderSlot::pid_ns
  std::atomic<std::uint64_t> cursor;
  std::atomic<std::uint64_t> updated_ns;
  char name[kReaderNameSize];  // NUL-padded; untrusted when read
};

struct RecordHeader {
  std::atomic<std::uint64_t> tag;  // commit mark: seq + 1, BUSY | (seq + 1), or 0
  std::uint64_t timestamp_ns;
  std::uint32_t length;
  std::uint32_t records;  // slots the message occupies (1 unless it spans)
};

// One u64 per slot (see "Spans" above): p + 1 when the slot holds position p
// inside a span.
using SpanMark = std::atomic<std::uint64_t>;

// ---- the layout is the contract: check every size, offset and alignment ----
template <class T>
inline constexpr bool kSharedOk = std::is_standard_layout_v<T>;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && alignof(std::atomic<std::uint64_t>) == 8);
static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && alignof(std::atomic<std::uint32_t>) == 4);
static_assert(kSharedOk<SegmentHeader> && kSharedOk<ReaderSlot> && kSharedOk<RecordHeader>);

static_assert(sizeof(SegmentHeader) == 512 && alignof(SegmentHeader) == kCacheLine);
static_assert(offsetof(SegmentHeader, magic) == 0);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, header_size) == 12);
static_assert(offsetof(SegmentHeader, record_size) == 16);
static_assert(offsetof(SegmentHeader, max_readers) == 20);
static_assert(offsetof(SegmentHeader, capacity) == 24);
static_assert(offsetof(SegmentHeader, policy) == 32);
static_assert(offsetof(SegmentHeader, reader_slot_size) == 36);
static_assert(offsetof(SegmentHeader, reader_table_offset) == 40);
static_assert(offsetof(SegmentHeader, log_offset) == 48);
static_assert(offsetof(SegmentHeader, segment_size) == 56);
static_assert(offsetof(SegmentHeader, creation_time_ns) == 64);
static_assert(offsetof(SegmentHeader, creator_pid) == 72);
static_assert(offsetof(SegmentHeader, head) == 128);
static_assert(offsetof(SegmentHeader, oldest) == 136);
static_assert(offsetof(SegmentHeader, producer_owner) == 192);
static_assert(offsetof(SegmentHeader, producer_start_ticks) == 200);
static_assert(offsetof(SegmentHeader, producer_pid) == 208);
static_assert(offsetof(SegmentHeader, closed) == 212);
static_assert(offsetof(SegmentHeader, takeovers) == 216);
static_assert(offsetof(SegmentHeader, producer_pid_ns) == 220);
static_assert(offsetof(SegmentHeader, producer_waits) == 224);
static_assert(offsetof(SegmentHeader, producer_wait_ns) == 232);
static_assert(offsetof(SegmentHeader, wakeups) == 240);
static_assert(offsetof(SegmentHeader, readers_reclaimed) == 248);
static_assert(offsetof(SegmentHeader, data_futex) == 256);
static_assert(offsetof(SegmentHeader, data_sleepers) == 260);
static_assert(offsetof(SegmentHeader, data_armed) == 264);
static_assert(offsetof(SegmentHeader, removed) == 268);
static_assert(offsetof(SegmentHeader, best_effort_readers) == 272);
static_assert(offsetof(SegmentHeader, space_futex) == 320);
static_assert(offsetof(SegmentHeader, producer_sleeping) == 324);
static_assert(offsetof(SegmentHeader, blocked_on_slot) == 328);
static_assert(offsetof(SegmentHeader, wait_start_ns) == 336);
static_assert(offsetof(SegmentHeader, space_wanted) == 344);
static_assert(offsetof(SegmentHeader, readers_let_go) == 352);
static_assert(offsetof(SegmentHeader, max_hold_ns) == 360);
static_assert(offsetof(SegmentHeader, reserved6) == 384);

static_assert(sizeof(ReaderSlot) == 128 && alignof(ReaderSlot) == kCacheLine);
static_assert(offsetof(ReaderSlot, owner) == 0);
static_assert(offsetof(ReaderSlot, state) == 8);
static_assert(offsetof(ReaderSlot, pid) == 12);
static_assert(offsetof(ReaderSlot, generation) == 16);
static_assert(offsetof(ReaderSlot, name) == 24);
static_assert(offsetof(ReaderSlot, attach_time_ns) == 56);
static_assert(offsetof(ReaderSlot, cursor) == 64);
static_assert(offsetof(ReaderSlot, delivered) == 72);
static_assert(offsetof(ReaderSlot, lost) == 80);
static_assert(offsetof(ReaderSlot, last_active_ns) == 88);
static_assert(offsetof(ReaderSlot, sleeping) == 96);
static_assert(offsetof(ReaderSlot, pid_ns) == 100);
static_assert(offsetof(ReaderSlot, start_ticks) == 104);
static_assert(offsetof(ReaderSlot, let_go_ns) == 112);

static_assert(sizeof(Bookmark) == 64 && alignof(Bookmark) == kCacheLine && kSharedOk<Bookmark>);
static_assert(offsetof(Bookmark, holder) == 0);
static_assert(offsetof(Bookmark, state) == 8);
static_assert(offsetof(Bookmark, holder_pid_ns) == 12);
static_assert(offsetof(Bookmark, cursor) == 16);
static_assert(offsetof(Bookmark, updated_ns) == 24);
static_assert(offsetof(Bookmark, name) == 32);

static_assert(sizeof(RecordHeader) == kRecordHeaderSize);
static_assert(offsetof(RecordHeader, tag) == 0);
static_assert(offsetof(RecordHeader, timestamp_ns) == 8);
static_assert(offsetof(RecordHeader, length) == 16);
static_assert(offsetof(RecordHeader, records) == 20);
static_assert(sizeof(SpanMark) == 8 && alignof(SpanMark) == 8);
static_assert(kMinRecordSize % kRecordAlign == 0 && kMinRecordSize >= kRecordHeaderSize + 8);
static_assert(kRecordHeaderSize % kRecordAlign == 0 && alignof(RecordHeader) == kRecordAlign);
static_assert(kGapPad > kMaxMessageLimit && kGapStart > kGapPad && kGapLost > kGapStart);  // above any length

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// Where the bookmark table and the log start for a given reader count (the
// only layout rules that depend on an option). There are as many bookmarks
// as reader slots.
constexpr std::uint64_t bookmark_table_offset_for(std::uint32_t max_readers) {
  return sizeof(SegmentHeader) + std::uint64_t{max_readers} * sizeof(ReaderSlot);
}
constexpr std::uint64_t span_table_offset_for(std::uint32_t max_readers) {
  return bookmark_table_offset_for(max_readers) + std::uint64_t{max_readers} * sizeof(Bookmark);
}
constexpr std::uint64_t log_offset_for(std::uint32_t max_readers, std::uint64_t capacity) {
  return align_up(span_table_offset_for(max_readers) + capacity * sizeof(SpanMark), kPageSize);
}
static_assert(span_table_offset_for(1) == 704 && span_table_offset_for(2) == 896);
static_assert(log_offset_for(1, 64) == 4096 && log_offset_for(1, 512) == 8192 && log_offset_for(19, 2) == 8192);

// The most slots one message may take: half the ring (at least one), so a
// span and the padding before it always fit in a ring.
constexpr std::uint64_t max_span_for(std::uint64_t capacity) { return capacity / 2 > 0 ? capacity / 2 : 1; }
// Slots a message of `length` bytes takes in records of `record_size` bytes,
// and the longest message a ring takes (a span of max_span_for() slots less
// its one header): the public rules (shmbus/placement.hpp), on this
// layout's header.
static_assert(kRecordHeaderSize == record_header_size && kMaxMessageLimit == max_message_limit);
using shmbus::max_message_for;
using shmbus::records_for;
static_assert(max_message_for(2, 64) == 40 && max_message_for(8, 64) == 232 && records_for(40, 64) == 1 &&
              records_for(41, 64) == 2 && records_for(232, 64) == 4);

// The bytes whose OFD locks stand for roles (see "Role locks" above).
inline constexpr std::uint64_t kProducerLockByte = 192;
constexpr std::uint64_t reader_lock_byte(std::uint32_t i) {
  return sizeof(SegmentHeader) + std::uint64_t{i} * sizeof(ReaderSlot);
}
constexpr std::uint64_t bookmark_lock_byte(std::uint32_t max_readers, std::uint32_t i) {
  return bookmark_table_offset_for(max_readers) + std::uint64_t{i} * sizeof(Bookmark);
}
inline constexpr std::uint64_t kCreatorLockByte = 0;  // of the temporary file, while it is built
static_assert(kProducerLockByte == offsetof(SegmentHeader, producer_owner));
static_assert(reader_lock_byte(0) == 512 && reader_lock_byte(1) == 640);
static_assert(bookmark_lock_byte(1, 0) == 640 && bookmark_lock_byte(2, 1) == 832);

}  // namespace shmbus::layout
