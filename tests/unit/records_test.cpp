// Byte-level tests: fake half-written, torn and impossible records by writing
// the documented fields of layout.hpp directly into a mapped segment, and check
// that a consumer never delivers them.
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <atomic>

#include <gtest/gtest.h>

#include "shmbus/inspect.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

BusOptions opts(std::uint64_t capacity, Policy policy, std::uint32_t record_size = 128) {
  BusOptions o;
  o.capacity = capacity;
  o.policy = policy;
  o.record_size = record_size;
  o.max_readers = 4;
  return o;
}

void fill_record(RawSegment& raw, std::uint64_t seq, std::string_view payload, std::uint64_t tag) {
  layout::RecordHeader& h = raw.record_header(seq);
  std::memcpy(raw.payload(seq), payload.data(), payload.size());
  h.length = static_cast<std::uint32_t>(payload.size());
  h.timestamp_ns = 1;
  h.tag.store(tag, std::memory_order_release);
}

class RecordFaking : public ::testing::TestWithParam<Policy> {};

TEST_P(RecordFaking, HalfWrittenRecordIsNotDeliveredWhileTheProducerLives) {
  ScopedName name("half");
  Bus bus = Bus::create(name, opts(8, GetParam()));
  Consumer c(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("zero")));
  ASSERT_TRUE(p.publish(bytes("one")));
  RawSegment raw(name.path());
  // Record 2: payload and length written, commit tag not.
  fill_record(raw, 2, "HALF-WRITTEN", 0);
  for (std::uint64_t s = 0; s < 2; ++s) {
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, s);
  }
  ReadResult r = c.next(30ms);
  EXPECT_EQ(r.status, ReadStatus::timeout) << "an uncommitted record was delivered: " << to_string(r.status);
  // The real publish of 2 replaces the fake and is delivered intact.
  ASSERT_EQ(p.publish(bytes("two")).seq, 2u);
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 2u);
  EXPECT_EQ(text(r.message.payload), "two");
}

TEST_P(RecordFaking, HalfWrittenRecordOfADeadProducerIsNeverDelivered) {
  // A producer process publishes 3 records, claims the 4th, writes its payload
  // and dies before commit(): consumers get 0..2 and then end-of-stream.
  ScopedName name("half-dead");
  Bus bus = Bus::create(name, opts(8, GetParam()));
  Consumer c(bus);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto* p = new Producer(Bus::open(name));
      for (int i = 0; i < 3; ++i)
        if (!p->publish(bytes("committed"))) ::_exit(2);
      Claim cl = p->claim(20);
      if (!cl) ::_exit(3);
      std::memset(cl.data.data(), 'H', 20);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);  // dies with the claim open
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  {
    // Also write a plausible length into the uncommitted record, in case the
    // claim path defers it.
    RawSegment raw(name.path());
    raw.record_header(3).length = 20;
  }
  for (std::uint64_t s = 0; s < 3; ++s) {
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, s);
    EXPECT_EQ(text(r.message.payload), "committed");
  }
  ReadResult r = c.next(5s);
  EXPECT_EQ(r.status, ReadStatus::end_of_stream) << to_string(r.status);
  // The next producer reuses sequence 3 for a real message.
  Producer q(bus);
  EXPECT_EQ(q.next_seq(), 3u);
  ASSERT_TRUE(q.publish(bytes("real three")));
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 3u);
  EXPECT_EQ(text(r.message.payload), "real three");
}

TEST_P(RecordFaking, RecordWithAnImpossibleLengthIsReportedCorruptAndSkipped) {
  // Use the last slot of the ring, so an over-read would run off the mapping.
  constexpr std::uint64_t kCap = 8;
  // (0xffffffff and 0xfffffffe mark gaps; a gap marker with an impossible
  // target is the next test's.)
  for (std::uint32_t bad_length : {128u - 24u + 1u, 4096u, 0xfffffffdu}) {
    SCOPED_TRACE(bad_length);
    ScopedName name("corrupt-len");
    Bus bus = Bus::create(name, opts(kCap, GetParam()));
    Consumer c(bus);
    Producer p(bus);
    for (std::uint64_t i = 0; i < kCap; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
    RawSegment raw(name.path());
    raw.record_header(kCap - 1).length = bad_length;
    for (std::uint64_t s = 0; s < kCap - 1; ++s) {
      ReadResult r = c.next(1s);
      ASSERT_EQ(r.status, ReadStatus::message);
      ASSERT_EQ(r.message.seq, s);
    }
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::corrupt) << to_string(r.status);
    EXPECT_EQ(r.message.seq, kCap - 1);
    // It was skipped: the next message is the one after it.
    EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
    ASSERT_TRUE(p.publish(bytes("after"), 2s));
    r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, kCap);
    EXPECT_EQ(text(r.message.payload), "after");
  }
}

TEST_P(RecordFaking, AGapMarkerWithAnImpossibleTargetIsReportedCorruptAndSkipped) {
  constexpr std::uint64_t kCap = 8;
  // Before the marker, at it, more than a ring past it (skip_to writes
  // markers only within one ring of the target), at 2^62, near 2^64.
  for (const std::uint64_t target : {std::uint64_t{0}, std::uint64_t{kCap - 1}, std::uint64_t{2 * kCap},
                                     layout::kMaxSequence, ~std::uint64_t{0}}) {
    SCOPED_TRACE(target);
    ScopedName name("corrupt-gap");
    Bus bus = Bus::create(name, opts(kCap, GetParam()));
    Consumer c(bus);
    Producer p(bus);
    for (std::uint64_t i = 0; i < kCap; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
    RawSegment raw(name.path());
    raw.record_header(kCap - 1).length = 0xffffffffu;  // a gap marker
    std::memcpy(raw.payload(kCap - 1), &target, sizeof target);  // ... going nowhere sensible
    for (std::uint64_t s = 0; s < kCap - 1; ++s) ASSERT_EQ(c.next(1s).message.seq, s);
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::corrupt) << to_string(r.status);
    EXPECT_EQ(r.message.seq, kCap - 1);
    ASSERT_TRUE(p.publish(bytes("after"), 2s));
    r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, kCap);
  }
}

TEST_P(RecordFaking, ATagAFullRingPastHeadIsCorruptNotALap) {
  // A lap resumes a ring behind the tag it met. A tag no publish could have
  // written yet (a ring or more past head) must not send the cursor there
  // with a made-up loss count: it is a corrupt record, skipped.
  constexpr std::uint64_t kCap = 8;
  ScopedName name("corrupt-tag");
  Bus bus = Bus::create(name, opts(kCap, GetParam()));
  Consumer c(bus);
  Producer p(bus);
  for (std::uint64_t i = 0; i < kCap; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  for (std::uint64_t s = 0; s < kCap - 1; ++s) ASSERT_EQ(c.next(1s).message.seq, s);
  RawSegment raw(name.path());
  const std::uint64_t far = kCap - 1 + (kCap << 40);  // the same slot, 2^43 sequences on
  const std::uint64_t real_tag = raw.record_header(kCap - 1).tag.load();

  // While BUSY it may be Producer::skip_to writing its markers: not judged yet.
  raw.record_header(kCap - 1).tag.store((far + 1) | layout::kBusyBit);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);
  EXPECT_EQ(c.cursor(), kCap - 1);

  raw.record_header(kCap - 1).tag.store(far + 1);  // committed
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::corrupt) << to_string(r.status) << " lost " << r.lost;
  EXPECT_EQ(r.message.seq, kCap - 1);
  EXPECT_EQ(c.cursor(), kCap);
  EXPECT_EQ(c.lost(), 0u);
  raw.record_header(kCap - 1).tag.store(real_tag);
  ASSERT_TRUE(p.publish(bytes("after"), 2s));
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, kCap);
  EXPECT_EQ(text(r.message.payload), "after");
}

TEST_P(RecordFaking, AnImpossibleHeadIsRefusedAtAttach) {
  // Near 2^64, seq + 1 would wrap to 0, the tag of a record never written.
  for (const std::uint64_t head : {std::uint64_t{1} << 62, ~std::uint64_t{0}}) {
    SCOPED_TRACE(head);
    ScopedName name("corrupt-head");
    Bus bus = Bus::create(name, opts(8, GetParam()));
    RawSegment raw(name.path());
    raw.header().head.store(head);
    raw.header().oldest.store(head);
    try {
      Consumer c(bus);
      ADD_FAILURE() << "attached to a bus whose head is " << head;
    } catch (const Error& e) {
      EXPECT_EQ(e.errc(), Errc::corrupt);
      EXPECT_NE(std::string(e.what()).find("impossible"), std::string::npos) << e.what();
    }
    raw.header().head.store(0);
    raw.header().oldest.store(0);
    Consumer c(bus);  // the refused attach left no slot behind
    EXPECT_EQ(Inspector::open(name.str()).snapshot().readers.size(), 1u);
  }
}

TEST_P(RecordFaking, PollCountsCorruptRecordsAndDeliversTheRest) {
  ScopedName name("corrupt-poll");
  Bus bus = Bus::create(name, opts(16, GetParam()));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(p.publish(bytes(std::to_string(i))));
  {
    RawSegment raw(name.path());
    raw.record_header(4).length = 1u << 20;
  }
  std::vector<std::uint64_t> seen;
  std::uint64_t corrupt = 0;
  for (int i = 0; i < 5 && seen.size() + corrupt < 10; ++i) {
    PollResult r = c.poll([&](const Message& m) {
      EXPECT_EQ(text(m.payload), std::to_string(m.seq));
      seen.push_back(m.seq);
    }, 100, 1s);
    corrupt += r.corrupt;
  }
  EXPECT_EQ(corrupt, 1u);
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 2, 3, 5, 6, 7, 8, 9}));
}

TEST(ZeroCopy, BlockPayloadIsAViewIntoTheRingOverwritePayloadIsACopy) {
  for (Policy policy : {Policy::block, Policy::overwrite}) {
    SCOPED_TRACE(to_string(policy));
    ScopedName name("zero-copy");
    Bus bus = Bus::create(name, opts(8, policy));
    Consumer c(bus);
    Producer p(bus);
    RawSegment raw(name.path());
    // A claim is a span of the record itself: its bytes are in the segment
    // before commit, while the commit tag still says "not written".
    Claim cl = p.claim(5);
    ASSERT_TRUE(cl);
    std::memcpy(cl.data.data(), "abcde", 5);
    EXPECT_EQ(std::memcmp(raw.payload(0), "abcde", 5), 0) << "claim() did not hand out the record in place";
    EXPECT_NE(raw.record_header(0).tag.load(), 1u) << "committed before commit()";
    p.commit();
    EXPECT_EQ(raw.record_header(0).tag.load(), 1u);
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    ASSERT_EQ(text(r.message.payload), "abcde");
    // Change the record behind the consumer's back: a view sees it, a copy does not.
    std::memcpy(raw.payload(0), "XY", 2);
    if (policy == Policy::block) {
      EXPECT_EQ(text(r.message.payload), "XYcde") << "block payload should be a view into shared memory";
    } else {
      EXPECT_EQ(text(r.message.payload), "abcde") << "overwrite payload must be the consumer's own copy";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothPolicies, RecordFaking, ::testing::Values(Policy::block, Policy::overwrite),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(TornOverwrite, RecordBeingWrittenIsNotReturned) {
  // Overwrite bus: the producer marks a record BUSY | (seq + 1) before writing
  // it. A consumer that finds that mark must not deliver the record.
  ScopedName name("busy");
  Bus bus = Bus::create(name, opts(8, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("zero")));
  RawSegment raw(name.path());
  fill_record(raw, 1, "TORN-TORN-TORN", layout::kBusyBit | 2);
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 0u);
  r = c.next(30ms);
  EXPECT_NE(r.status, ReadStatus::message) << "delivered a record marked BUSY: seq " << r.message.seq
                                            << " '" << text(r.message.payload) << "'";
  ASSERT_TRUE(p.publish(bytes("one")));
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(r.message.seq, 1u);
  EXPECT_EQ(text(r.message.payload), "one");
}

TEST(TornOverwrite, CommittedRecordBeingOverwrittenForALaterLapIsNotReturnedTorn) {
  // Record 3 is committed and unread; then the producer starts overwriting its
  // slot with record 3 + capacity (BUSY | (3 + capacity + 1)) and scribbles on
  // the payload. The consumer must not return record 3 with those bytes.
  constexpr std::uint64_t kCap = 8;
  ScopedName name("busy-lap");
  Bus bus = Bus::create(name, opts(kCap, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.publish(bytes("good-" + std::to_string(i))));
  for (std::uint64_t s = 0; s < 3; ++s) ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  RawSegment raw(name.path());
  fill_record(raw, 3, "SCRIBBLED-BY-A-LATER-LAP", layout::kBusyBit | (3 + kCap + 1));
  ReadResult r = c.next(100ms);
  if (r.status == ReadStatus::message) {
    EXPECT_NE(r.message.seq, 3u) << "returned a record whose slot is being overwritten: '"
                                 << text(r.message.payload) << "'";
    EXPECT_EQ(text(r.message.payload).rfind("good-", 0), 0u) << text(r.message.payload);
  }
}

TEST(TornOverwrite, RecordWhoseTagNamesAnotherSequenceIsNotReturnedAsThisOne) {
  // A committed record for seq 2 + capacity sits where a consumer expects seq 2:
  // the consumer must notice it was lapped, not hand out the newer record as 2.
  constexpr std::uint64_t kCap = 8;
  ScopedName name("wrong-tag");
  Bus bus = Bus::create(name, opts(kCap, Policy::overwrite));
  Consumer c(bus);
  Producer p(bus);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.publish(bytes("good-" + std::to_string(i))));
  for (std::uint64_t s = 0; s < 2; ++s) ASSERT_EQ(c.next(1s).status, ReadStatus::message);
  RawSegment raw(name.path());
  fill_record(raw, 2, "FROM-THE-FUTURE", 2 + kCap + 1);
  ReadResult r = c.next(100ms);
  if (r.status == ReadStatus::message) {
    EXPECT_NE(text(r.message.payload), "FROM-THE-FUTURE") << "seq " << r.message.seq;
  }
}

}  // namespace
}  // namespace shmbus::test

namespace shmbus::test {
namespace {

// Fakes an active reader slot at cursor 0 that names `pid`, as an attached
// reader leaves it.
void fake_reader(RawSegment& raw, std::uint32_t slot, pid_t pid) {
  layout::ReaderSlot& r = raw.reader(slot);
  r.pid.store(static_cast<std::uint32_t>(pid));
  r.cursor.store(0);
  std::memcpy(r.name, "fake", 5);
  r.generation.store(1);
  r.owner.store(1);
  r.state.store(layout::kSlotActive, std::memory_order_release);
}

// Holds the role lock of reader slot `slot` through an open file
// description of its own, as a live reader does.
class SlotLock {
 public:
  SlotLock(const std::string& path, std::uint32_t slot) : fd_(::open(path.c_str(), O_RDWR | O_CLOEXEC)) {
    flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(layout::reader_lock_byte(slot));
    fl.l_len = 1;
    ok_ = fd_ >= 0 && ::fcntl(fd_, F_OFD_SETLK, &fl) == 0;
  }
  ~SlotLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool ok_ = false;
};

TEST(ReaderLiveness, SlotNobodyHoldsTheLockOfIsReclaimedWhateverPidItNames) {
  // The slot names a live process (this one), but no open file description
  // holds its role lock: its reader is gone. The pid is only a label.
  ScopedName name("unlocked-slot");
  BusOptions o;
  o.capacity = 4;
  o.max_readers = 2;
  Bus bus = Bus::create(name, o);
  {
    RawSegment raw(name.path());
    fake_reader(raw, 0, ::getpid());
  }
  Producer p(bus);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(p.publish(bytes("x"), 2s).status, PublishStatus::ok) << "held back by an unlocked slot at " << i;
  EXPECT_EQ(p.live_readers(), 0u);
  EXPECT_EQ(Inspector::open(name).snapshot().counters.readers_reclaimed, 1u);
}

TEST(ReaderLiveness, SlotWhoseLockIsHeldIsNeverReclaimedWhateverPidItNames) {
  // A pid no process has (as a reader in another PID namespace may show):
  // the lock is held, so the reader lives and the producer waits for it.
  ScopedName name("locked-slot");
  BusOptions o;
  o.capacity = 4;
  o.max_readers = 2;
  Bus bus = Bus::create(name, o);
  SlotLock lock(name.path(), 0);
  ASSERT_TRUE(lock.ok());
  {
    RawSegment raw(name.path());
    fake_reader(raw, 0, 4'000'000);  // above any pid_max
  }
  Producer p(bus);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(p.publish(bytes("x"), 0ns).status, PublishStatus::ok);
  EXPECT_EQ(p.publish(bytes("x"), 200ms).status, PublishStatus::timeout);
  EXPECT_EQ(p.live_readers(), 1u);
  EXPECT_TRUE(reclaim_dead_readers(name).empty());
  const Snapshot snap = Inspector::open(name).snapshot();
  ASSERT_EQ(snap.readers.size(), 1u);
  EXPECT_EQ(snap.readers[0].liveness, Liveness::alive);
  EXPECT_EQ(snap.counters.readers_reclaimed, 0u);
}

TEST(ReaderLiveness, ZombieReaderIsReclaimed) {
  // A reader process that exited but was not reaped still has its pid.
  ScopedName name("zombie");
  BusOptions o;
  o.capacity = 4;
  o.max_readers = 2;
  Bus bus = Bus::create(name, o);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(ready[0]);
    try {
      new Consumer(Bus::open(name));
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);  // closes the pipe; stays a zombie until reaped
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 0);  // the child has exited (or is exiting)
  ::close(ready[0]);
  // Wait until it is a zombie, without reaping it.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  ASSERT_EQ(info.si_status, 0);
  Producer p(bus);
  for (int i = 0; i < 10; ++i)
    ASSERT_EQ(p.publish(bytes("x"), 2s).status, PublishStatus::ok) << "held back by a zombie reader at " << i;
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
}

}  // namespace
}  // namespace shmbus::test

namespace shmbus::test {
namespace {

std::string seq_text(std::uint64_t seq) { return "message-" + std::to_string(seq); }

class Eviction : public ::testing::TestWithParam<Policy> {};


// A stray store clears the state word of a live reader's slot: the producer
// stops counting it and overwrites what it has not read. The reader must be
// told (evicted, with the exact loss and where it goes on) and never be
// handed a record under a sequence number that is not its own.
TEST_P(Eviction, ReaderWhoseSlotWasClearedIsToldItWasEvicted) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("evicted");
  Bus bus = Bus::create(name, opts(kCap, GetParam()));
  Consumer c(bus);
  Producer p(bus);
  for (std::uint64_t s = 0; s < 4; ++s) ASSERT_TRUE(p.publish(bytes(seq_text(s))));
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  ASSERT_EQ(text(r.message.payload), seq_text(0));
  {
    RawSegment raw(name.path());
    raw.reader(c.slot()).state.store(layout::kSlotFree);  // one stray store
  }
  // No reader holds the producer now: three laps go by.
  for (std::uint64_t s = 4; s < 3 * kCap; ++s) ASSERT_TRUE(p.publish(bytes(seq_text(s)), 0ns)) << s;
  r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::evicted);
  // What is retained is the last ring; the reader was at 1.
  const std::uint64_t oldest = 3 * kCap - kCap;
  EXPECT_EQ(r.message.seq, oldest);
  EXPECT_EQ(r.lost, oldest - 1);
  EXPECT_EQ(GetParam() == Policy::block, r.stale_view) << "the view of seq 0 was overwritten (block reads in place)";
  EXPECT_EQ(c.lost(), oldest - 1);
  // It holds the slot again: the producer waits for it once more (block),
  // and everything from `oldest` on arrives, each under its own sequence.
  for (std::uint64_t s = oldest; s < 3 * kCap; ++s) {
    r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message) << s;
    EXPECT_EQ(r.message.seq, s);
    EXPECT_EQ(text(r.message.payload), seq_text(s));
  }
  EXPECT_EQ(Inspector::open(name).snapshot().readers.size(), 1u);
  EXPECT_EQ(c.next(0ns).status, ReadStatus::timeout);  // publishes the cursor
  if (GetParam() == Policy::block) {
    for (std::uint64_t s = 3 * kCap; s < 4 * kCap; ++s) ASSERT_TRUE(p.publish(bytes(seq_text(s)), 0ns)) << s;
    EXPECT_EQ(p.publish(bytes("one too many"), 0ns).status, PublishStatus::timeout)
        << "the reader took its slot back but the producer does not wait for it";
  }
}

// The same through poll(): the batch stops at the eviction and says so.
TEST_P(Eviction, PollReportsAnEvictionAndHandsNothingOver) {
  constexpr std::uint64_t kCap = 16;
  ScopedName name("evicted-poll");
  Bus bus = Bus::create(name, opts(kCap, GetParam()));
  Consumer c(bus);
  Producer p(bus);
  {
    RawSegment raw(name.path());
    // Stray stores over the owner ticket and the state.
    raw.reader(c.slot()).owner.store(12345);
    raw.reader(c.slot()).state.store(layout::kSlotFree);
  }
  for (std::uint64_t s = 0; s < 2 * kCap; ++s) ASSERT_TRUE(p.publish(bytes(seq_text(s)), 0ns)) << s;
  std::uint64_t handed = 0;
  const PollResult pr = c.poll([&](const Message&) { ++handed; }, 256);
  EXPECT_TRUE(pr.evicted);
  EXPECT_EQ(handed, 0u);
  EXPECT_EQ(pr.lost, kCap);
  EXPECT_EQ(c.cursor(), kCap);
  std::uint64_t expected = kCap;
  const PollResult rest = c.poll(
      [&](const Message& m) {
        EXPECT_EQ(m.seq, expected);
        EXPECT_EQ(text(m.payload), seq_text(m.seq));
        ++expected;
      },
      256);
  EXPECT_FALSE(rest.evicted);
  EXPECT_EQ(rest.count, kCap);
}

// A record whose commit mark was wiped (zeroed by a stray store) after the
// producer went past it: in `block` the reader waits for it while the
// producer, a full ring on, waits for the reader. The reader reports it
// corrupt and goes on, and the producer with it.
INSTANTIATE_TEST_SUITE_P(BothPolicies, Eviction, ::testing::Values(Policy::block, Policy::overwrite),
                         [](const auto& p) { return std::string(to_string(p.param)); });

TEST(RecordFramingBlock, WipedCommitMarkIsReportedCorruptInsteadOfWaitingForever) {
  constexpr std::uint64_t kCap = 8;
  ScopedName name("wiped-tag");
  Bus bus = Bus::create(name, opts(kCap, Policy::block));
  ConsumerOptions co;
  co.wait.spin_time = 0ns;
  co.wait.yield_time = 0ns;
  Consumer c(bus, co);
  Producer p(bus);
  for (std::uint64_t s = 0; s < kCap; ++s) ASSERT_TRUE(p.publish(bytes(seq_text(s)), 0ns));
  {
    RawSegment raw(name.path());
    raw.record_header(0).tag.store(0);
  }
  ReadResult r = c.next(2s);
  ASSERT_EQ(r.status, ReadStatus::corrupt) << to_string(r.status);
  EXPECT_EQ(r.message.seq, 0u);
  for (std::uint64_t s = 1; s < kCap; ++s) {
    r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(r.message.seq, s);
  }
  EXPECT_TRUE(p.publish(bytes(seq_text(kCap)), 2s)) << "the producer is still held by the wiped record";
}

TEST(RecordFramingBlock, ProducerRefusesABusWhoseHeadIsImpossible) {
  ScopedName name("head-2-63");
  Bus bus = Bus::create(name, opts(8, Policy::block));
  {
    RawSegment raw(name.path());
    raw.header().head.store(std::uint64_t{1} << 63);
  }
  try {
    Producer p(bus);
    FAIL() << "a producer published on a bus whose head is 2^63";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::corrupt) << e.what();
    EXPECT_NE(std::string(e.what()).find("head"), std::string::npos) << e.what();
  }
  // Refused without taking the role.
  EXPECT_FALSE(Inspector::open(name).snapshot().producer.attached);
}

}  // namespace
}  // namespace shmbus::test

namespace shmbus::test {
namespace {

// Descriptors of this process open on `path` (the Bus's own is one).
int descriptors_on(const std::string& path) {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (const dirent* e = ::readdir(d)) {
    char link[300], target[512];
    std::snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    const ssize_t k = ::readlink(link, target, sizeof target - 1);
    if (k <= 0) continue;
    target[k] = '\0';
    if (path == target) ++n;
  }
  ::closedir(d);
  return n;
}

// A child forked while another thread attaches and detaches never keeps a
// role's descriptor: it would keep the role's lock, so a dead parent's
// reader would hold a block producer (and the producer role, a name) for
// as long as the child lives.
TEST(Fork, AChildForkedMidAttachKeepsNoRoleDescriptor) {
  ScopedName name("fork-roles");
  BusOptions o;
  o.capacity = 64;
  o.max_readers = 4;
  Bus bus = Bus::create(name, o);
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop) {
      Consumer c(bus);
      ConsumerOptions d;
      d.name = "durable";
      d.durable = true;
      Consumer named(bus, d);
    }
  });
  int kept = 0;
  for (int i = 0; i < 1000; ++i) {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(descriptors_on(name.path()) > 1 ? 1 : 0);
    int st = 0;
    ASSERT_EQ(::waitpid(p, &st, 0), p);
    kept += WIFEXITED(st) && WEXITSTATUS(st) == 1;
  }
  stop = true;
  churn.join();
  EXPECT_EQ(kept, 0) << "children that kept a role's descriptor, of 1000";
}

// A process whose stdin is closed gets descriptor 0 for its role: a child it
// forks must not keep that one either (a dead parent's slot stays
// reclaimable while the child lives).
TEST(Fork, ARoleOnDescriptorZeroIsNotKeptByAChild) {
  ScopedName name("fork-fd0");
  BusOptions o;
  o.capacity = 64;
  o.max_readers = 2;
  Bus bus = Bus::create(name, o);
  int to_grandchild[2];
  ASSERT_EQ(::pipe(to_grandchild), 0);
  const pid_t reader = ::fork();
  ASSERT_GE(reader, 0);
  if (reader == 0) {
    ::close(0);
    auto* c = new Consumer(Bus::open(name));  // never detached: this process dies holding it
    (void)c;
    int started[2];
    if (::pipe(started) != 0) ::_exit(2);
    if (::fork() == 0) {  // a worker that never execs, alive until told
      char x = 0;
      ::close(to_grandchild[1]);
      (void)::write(started[1], &x, 1);  // fork() has returned here: the fork handlers have run
      (void)::read(to_grandchild[0], &x, 1);
      ::_exit(0);
    }
    char x;
    (void)::read(started[0], &x, 1);
    ::_exit(0);
  }
  ::close(to_grandchild[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(reader, &st, 0), reader);
  // The reader is gone, its worker lives: the slot must be reclaimable.
  EXPECT_EQ(reclaim_dead_readers(name.str()).size(), 1u) << "the forked worker kept the dead reader's lock";
  ::close(to_grandchild[1]);  // the worker exits (reaped by init)
}

}  // namespace
}  // namespace shmbus::test
