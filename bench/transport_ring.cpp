// shmbus-bench — `ring`: the reference, not a transport anyone would ship.
//
// About the least a broadcast ring between processes can do, kept here as the
// yardstick for shmbus: the table's "÷ ring" column says how close the library
// comes to it on the same machine, in the same run. Nothing here is part of
// the library and nothing in the library uses it.
//
// One producer, N consumers (every consumer reads every message), 1024 slots
// of the message size rounded up to a cache line, in a memfd the orchestrator
// makes and every role maps. The ring adds nothing to a message: no record
// header, no length (every message of a run has the configured size), no
// timestamp, no liveness, no wake-ups. Messages carry the harness's own
// header (sequence, send time), stamped as for every other transport.
//
// Segment (one ring; ping-pong has a second, for the echo, right behind it):
//
//   +0                      head      count of messages published   (own line)
//   +64                     tail[0]   consumer 0's count read        (own line)
//   +64*i + 64              tail[i]   ...                            (own line)
//   +64 * (1 + kMaxConsumers)
//                           slot 0 .. slot 1023, `slot` bytes each (a multiple of 64);
//                           message n lives in slot n % 1024
//
// Who writes what:
//   head     the producer only; consumers read it.
//   tail[i]  consumer i only; the producer reads them all (the slowest
//            bounds where it may write: slot n is free once every tail > n - 1024).
//   slots    the producer, in slots no consumer is still reading; a consumer
//            reads a slot in place and publishes its tail past it afterwards.
//
// Each side publishes its own index (a release store) every 16 messages, and
// also when it is about to wait: the producer when the ring is full or when
// the harness flushes it (ping-pong: before waiting for the echo; fixed rate:
// before waiting for the next message's due time; the end of the run), a
// consumer when it finds the ring empty. Each side caches the other's index
// and re-reads it (acquire) only when the cached copy says full (producer) or
// empty (consumer). Waiting re-reads with one pause between reads for the
// first 64 reads, then with a sched_yield() between.
#include <emmintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>
#include <system_error>
#include <type_traits>

#include "roles.hpp"

namespace bench {
namespace {

constexpr std::uint64_t kSlots = 1024;          // a power of two
constexpr std::uint64_t kPublishEvery = 16;     // messages between index stores
constexpr int kSpinReads = 64;                  // re-reads with a pause, then yield
constexpr std::size_t kLine = 64;
static_assert((kSlots & (kSlots - 1)) == 0 && kSlots % kPublishEvery == 0);

// One index alone on its cache line: the producer's and each consumer's
// stores never invalidate a line another writer is using.
struct alignas(kLine) Index {
  std::atomic<std::uint64_t> value;
};
static_assert(sizeof(Index) == kLine && alignof(Index) == kLine);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

struct RingHeader {
  Index head;
  Index tail[kMaxConsumers];
};
static_assert(std::is_standard_layout_v<RingHeader>);
static_assert(offsetof(RingHeader, head) == 0);
static_assert(offsetof(RingHeader, tail) == kLine);
static_assert(sizeof(RingHeader) == kLine * (1 + kMaxConsumers));

std::size_t slot_bytes(const RunConfig& cfg) noexcept { return (cfg.size + kLine - 1) / kLine * kLine; }
std::size_t ring_bytes(const RunConfig& cfg) noexcept { return sizeof(RingHeader) + kSlots * slot_bytes(cfg); }
int ring_count(const RunConfig& cfg) noexcept { return cfg.mode == Mode::pingpong ? 2 : 1; }

// One ring of the segment, as this process sees it.
struct Ring {
  RingHeader* hdr;
  std::byte* slots;
  std::size_t slot;
  std::byte* at(std::uint64_t n) const noexcept { return slots + (n & (kSlots - 1)) * slot; }
};

// The segment mapped into a role (the descriptor is RunConfig::fds[0]).
// Populated when mapped, as shmbus's ring is, so neither pays first-touch faults.
class Segment {
 public:
  explicit Segment(const RunConfig& cfg)
      : ring_(ring_bytes(cfg)), bytes_(ring_ * static_cast<std::size_t>(ring_count(cfg))), slot_(slot_bytes(cfg)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, cfg.fds[0], 0);
    if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "ring: mmap");
    ::close(cfg.fds[0]);
    base_ = static_cast<std::byte*>(p);
  }
  ~Segment() { munmap(base_, bytes_); }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  Ring ring(int k) const noexcept {
    std::byte* r = base_ + static_cast<std::size_t>(k) * ring_;
    return {reinterpret_cast<RingHeader*>(r), r + sizeof(RingHeader), slot_};
  }

 private:
  std::size_t ring_;   // bytes per ring
  std::size_t bytes_;  // the whole segment
  std::size_t slot_;
  std::byte* base_ = nullptr;
};

class RingSender {
 public:
  RingSender(Ring ring, std::uint32_t consumers, std::size_t size, const std::atomic<std::uint32_t>& abort)
      : ring_(ring), consumers_(consumers), size_(size), abort_(abort) {}

  bool send(const std::byte* p, std::size_t n) noexcept {
    if (n != size_) [[unlikely]] {
      err_ = "message size differs from the run's";
      return false;
    }
    if (head_ - tail_cache_ == kSlots && !wait_for_space()) [[unlikely]]
      return false;
    std::memcpy(ring_.at(head_), p, n);
    ++head_;
    if (head_ % kPublishEvery == 0) publish();
    return true;
  }
  // The harness is about to wait for something else: publish what is written.
  void flush() noexcept {
    if (head_ != published_) publish();
  }
  void finish() noexcept { flush(); }
  const char* error() const noexcept { return err_; }

 private:
  void publish() noexcept {
    // Release: the slots written below head_ are visible to a consumer that
    // acquires head (RingReceiver::read_head).
    ring_.hdr->head.value.store(head_, std::memory_order_release);
    published_ = head_;
  }
  std::uint64_t slowest_tail() const noexcept {
    std::uint64_t t = head_;
    for (std::uint32_t i = 0; i < consumers_; ++i)
      // Acquire: pairs with consumer i's release of its tail; its reads of
      // the slots below happen before this producer overwrites them.
      t = std::min(t, ring_.hdr->tail[i].value.load(std::memory_order_acquire));
    return t;
  }
  bool wait_for_space() noexcept {
    tail_cache_ = slowest_tail();
    if (head_ - tail_cache_ < kSlots) return true;
    flush();  // full: consumers may be waiting for messages not yet published
    for (int reads = 0;; ++reads) {
      if (reads < kSpinReads) {
        _mm_pause();
      } else {
        if (abort_.load(std::memory_order_relaxed)) {  // a flag alone: it publishes nothing
          err_ = "aborted while the ring was full";
          return false;
        }
        sched_yield();
      }
      tail_cache_ = slowest_tail();
      if (head_ - tail_cache_ < kSlots) return true;
    }
  }

  Ring ring_;
  std::uint32_t consumers_;
  std::size_t size_;
  const std::atomic<std::uint32_t>& abort_;
  std::uint64_t head_ = 0;        // messages written
  std::uint64_t published_ = 0;   // the head consumers can see
  std::uint64_t tail_cache_ = 0;  // the slowest consumer's tail when last read
  const char* err_ = "";
};

class RingReceiver {
 public:
  // max_batch: messages handed over per recv() at most (1, like shmbus's
  // next(); or as many as shmbus's read_batch() takes).
  RingReceiver(Ring ring, int id, std::size_t size, std::uint32_t max_batch)
      : ring_(ring), tail_slot_(ring.hdr->tail[id].value), size_(size), max_batch_(max_batch) {}

  template <class F>
  long recv(F&& on_message, std::uint64_t timeout_ns) noexcept {
    if (tail_ == head_cache_ && !wait_for_data(timeout_ns)) return 0;
    const std::uint64_t end = std::min(head_cache_, tail_ + max_batch_);
    const long n = static_cast<long>(end - tail_);
    while (tail_ != end) {
      on_message(ring_.at(tail_), size_);
      ++tail_;
      if (tail_ % kPublishEvery == 0) publish();
    }
    return n;
  }
  const char* error() const noexcept { return "ring: receive failed"; }  // recv never fails

 private:
  void publish() noexcept {
    // Release: this consumer's reads of the slots below tail_ are done
    // before the producer, acquiring tail, overwrites them.
    tail_slot_.store(tail_, std::memory_order_release);
    published_ = tail_;
  }
  std::uint64_t read_head() const noexcept {
    // Acquire: pairs with the producer's release of head; the slots below
    // it hold their messages.
    return ring_.hdr->head.value.load(std::memory_order_acquire);
  }
  bool wait_for_data(std::uint64_t timeout_ns) noexcept {
    head_cache_ = read_head();
    if (head_cache_ != tail_) return true;
    if (tail_ != published_) publish();  // empty: give the producer all we have read
    std::uint64_t until = 0;             // the deadline, once the yield phase starts
    for (int reads = 0;; ++reads) {
      if (reads < kSpinReads) {
        _mm_pause();
      } else {
        const std::uint64_t now = mono_ns();
        if (until == 0) until = timeout_ns >= kForever - now ? kForever : now + timeout_ns;
        else if (now >= until) return false;
        sched_yield();
      }
      head_cache_ = read_head();
      if (head_cache_ != tail_) return true;
    }
  }

  Ring ring_;
  std::atomic<std::uint64_t>& tail_slot_;
  std::size_t size_;
  std::uint64_t max_batch_;
  std::uint64_t tail_ = 0;        // messages read
  std::uint64_t published_ = 0;   // the tail the producer can see
  std::uint64_t head_cache_ = 0;  // the producer's head when last read
};

}  // namespace

// Makes the segment (zeroed indices) and returns its descriptor, to be
// inherited by the roles as RunConfig::fds[0].
int ring_create(const RunConfig& cfg) {
  const int fd = memfd_create("shmbus-bench-ring", 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "ring: memfd_create");
  const std::size_t bytes = ring_bytes(cfg) * static_cast<std::size_t>(ring_count(cfg));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "ring: ftruncate");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "ring: mmap");
  }
  for (int k = 0; k < ring_count(cfg); ++k)
    new (static_cast<std::byte*>(p) + static_cast<std::size_t>(k) * ring_bytes(cfg)) RingHeader{};
  munmap(p, bytes);
  return fd;
}

void run_ring(Control& c, Role role, int id) {
  const RunConfig& cfg = c.cfg;
  const Segment seg(cfg);
  const std::uint32_t batch = cfg.recv_batch;
  if (cfg.mode == Mode::pingpong) {
    // Ring 0 carries the pings, ring 1 the echoes; one consumer each.
    if (role == Role::producer) {
      RingSender s(seg.ring(0), 1, cfg.size, c.abort);
      RingReceiver r(seg.ring(1), 0, cfg.size, batch);
      ping_loop(c, s, r);
    } else {
      RingReceiver r(seg.ring(0), 0, cfg.size, batch);
      RingSender s(seg.ring(1), 1, cfg.size, c.abort);
      pong_loop(c, s, r);
    }
    return;
  }
  if (role == Role::producer) {
    RingSender s(seg.ring(0), cfg.consumers, cfg.size, c.abort);
    if (cfg.mode == Mode::idle)
      idle_producer_loop(c, s);
    else
      producer_loop(c, s);
  } else {
    RingReceiver r(seg.ring(0), id, cfg.size, batch);
    if (cfg.mode == Mode::idle)
      idle_consumer_loop(c, id, r);
    else
      consumer_loop(c, id, r);
  }
}

}  // namespace bench
