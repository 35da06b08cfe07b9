// Fuzz target: arbitrary bytes as the records of a valid bus. The header is
// sound (the library created it); the input supplies the policy, head and
// oldest, and every byte of the ring: commit tags (committed, BUSY, stale,
// in the wrong slot), lengths, record counts, timestamps, payloads, and the
// span marks. A consumer reading from the oldest record must return only
// messages it can vouch for, in order, never longer than the bus's max
// message nor running past the end of the ring; lost counts must move it
// forward; the inspector's record() and check() must cope.
//
//   input: policy (1 byte) | head (u64) | oldest (u64) | span marks (8 x u64) | ring bytes ...
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "fuzz_common.hpp"
#include "layout.hpp"
#include "shmbus/shmbus.hpp"

namespace {

constexpr std::uint64_t kCapacity = 8;
constexpr std::uint32_t kRecordSize = 64;

// One bus per policy, created once, and our own writable view of its file.
struct Fixture {
  std::string name;
  std::optional<shmbus::Bus> bus;
  std::optional<shmbus::Inspector> insp;
  std::byte* base = nullptr;
  std::size_t size = 0;

  explicit Fixture(shmbus::Policy policy) {
    name = shmbus::fuzz::own_name(policy == shmbus::Policy::block ? "record-block" : "record-overwrite");
    shmbus::Bus::remove(name);
    shmbus::BusOptions o;
    o.capacity = kCapacity;
    o.record_size = kRecordSize;
    o.max_readers = 2;
    o.policy = policy;
    bus.emplace(shmbus::Bus::create(name, o));
    insp.emplace(shmbus::Inspector::open(name));
    const int fd = ::open(shmbus::fuzz::segment_path(name).c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) std::abort();
    size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) std::abort();
    base = static_cast<std::byte*>(p);
    // Remove the name now: the mappings keep the segment alive.
    shmbus::Bus::remove(name);
  }
  shmbus::layout::SegmentHeader* header() const { return reinterpret_cast<shmbus::layout::SegmentHeader*>(base); }
  std::byte* marks() const { return base + shmbus::layout::span_table_offset_for(2); }
  std::byte* log() const { return base + shmbus::layout::log_offset_for(2, kCapacity); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono_literals;
  static Fixture block(shmbus::Policy::block), overwrite(shmbus::Policy::overwrite);
  if (size < 17) return 0;
  Fixture& f = (data[0] & 1) ? overwrite : block;
  std::uint64_t head = 0, oldest = 0;
  std::memcpy(&head, data + 1, 8);
  std::memcpy(&oldest, data + 9, 8);
  data += 17;
  size -= 17;
  // The span marks and the ring: the input's bytes, zeros after them.
  const std::size_t marks = kCapacity * 8;
  std::memset(f.marks(), 0, marks);
  std::memcpy(f.marks(), data, std::min(size, marks));
  data += std::min(size, marks);
  size -= std::min(size, marks);
  const std::size_t ring = kCapacity * kRecordSize;
  std::memset(f.log(), 0, ring);
  std::memcpy(f.log(), data, std::min(size, ring));
  auto* h = f.header();
  h->head.store(head, std::memory_order_release);
  h->oldest.store(oldest, std::memory_order_release);
  h->closed.store(1, std::memory_order_release);  // no producer: nothing to wait for
  h->producer_owner.store(0, std::memory_order_release);

  const std::size_t max = f.bus->info().max_message;
  {
    shmbus::ConsumerOptions co;
    co.start = shmbus::Start::earliest;
    std::optional<shmbus::Consumer> attached;
    try {
      attached.emplace(*f.bus, co);
    } catch (const shmbus::Error& e) {
      // An impossible head is refused at attach, as one error.
      if (e.errc() != shmbus::Errc::corrupt || head < (std::uint64_t{1} << 62))
        shmbus::fuzz::violated("attach refused a plausible bus");
      return 0;
    }
    shmbus::Consumer& c = *attached;
    std::uint64_t cursor = c.cursor();
    for (std::uint64_t i = 0; i < 2 * kCapacity; ++i) {
      const shmbus::ReadResult r = c.next(0ns);
      if (r.status == shmbus::ReadStatus::message) {
        if (r.message.payload.size() > max) shmbus::fuzz::violated("a message longer than the bus's max message");
        // Padding before a span (or a bus's start) is crossed on the way:
        // the message may lie past the cursor, never before it.
        if (r.message.seq < cursor) shmbus::fuzz::violated("a message out of order");
        if (r.message.records == 0 || (r.message.seq % kCapacity) + r.message.records > kCapacity ||
            c.cursor() != r.message.seq + r.message.records ||
            r.message.payload.size() + shmbus::layout::kRecordHeaderSize > r.message.records * kRecordSize)
          shmbus::fuzz::violated("a message whose records do not hold it within the ring");
        // Only a record whose commit tag names exactly this sequence counts.
        const auto* rec = reinterpret_cast<const shmbus::layout::RecordHeader*>(
            f.log() + (r.message.seq % kCapacity) * kRecordSize);
        if (rec->tag.load(std::memory_order_relaxed) != r.message.seq + 1)
          shmbus::fuzz::violated("a message whose commit tag does not match");
      } else if (r.status == shmbus::ReadStatus::lost) {
        // The cursor moves by the loss, plus any start markers crossed on
        // the way (sequences that never existed are not lost).
        if (r.lost == 0 || c.cursor() < cursor + r.lost) {
          std::fprintf(stderr, "cursor %llu, lost %llu, cursor after %llu\n", static_cast<unsigned long long>(cursor),
                       static_cast<unsigned long long>(r.lost), static_cast<unsigned long long>(c.cursor()));
          shmbus::fuzz::violated("a loss that does not move the cursor by as much");
        }
      } else if (r.status != shmbus::ReadStatus::corrupt) {
        break;
      }
      if (c.cursor() < cursor) shmbus::fuzz::violated("the cursor moved back");
      // No lap passes a tag's own sequence, no gap marker points at or past
      // 2^62: whatever the bytes, the cursor stays far from wrapping.
      if (c.cursor() > shmbus::layout::kMaxSequence) {
        std::fprintf(stderr, "cursor %llu after a %s\n", static_cast<unsigned long long>(c.cursor()),
                     shmbus::to_string(r.status));
        shmbus::fuzz::violated("a cursor at a sequence no bus reaches");
      }
      cursor = c.cursor();
    }
  }
  for (std::uint64_t k = 0; k < kCapacity; ++k) {
    if (const auto r = f.insp->record(head - k); r && r->payload.size() > max)
      shmbus::fuzz::violated("Inspector::record longer than the bus's max message");
  }
  (void)f.insp->check();
  return 0;
}
