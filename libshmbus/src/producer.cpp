// shmbus — the producer side of the ring.
//
// Ownership (who writes what; everyone else only reads it):
//   producer  header.head, header.oldest, every record, header.producer_*,
//             header.closed, header.blocked_on_slot, header.wait_start_ns
//   consumer  its own ReaderSlot's cursor line (cursor, delivered, lost, ...)
//   sleepers  arm header.data_armed (consumers) or header.producer_sleeping
//             (the producer); the first waker to clear the word makes the wake
//   anyone    header.data_futex / space_futex (increment, then FUTEX_WAKE)
//
// Space in a `block` bus, the wait for it and the hold limit are
// back-pressure's (back_pressure.hpp, hold_limit.hpp): the producer asks it
// whether a sequence is below the cached limit, and waits through it when
// not.
//
// Prefetch for write. After each commit the producer asks, with a
// read-for-ownership prefetch (sys.hpp prefetch_for_write), for the first
// lines (at most kPrefetchRecordBytes) of the record about kPrefetchBytes
// ahead, if every reader is done with it: below the back-pressure limit
// (in `overwrite` the producer takes it anyway). Only when records are not
// whole lines may the last line be shared with the next record, which a
// reader may still be on: a cost in speed, never in correctness. A ring larger than a core's L2 (a
// 65,536-record ring of 128-byte messages is 12 MiB) has every line the
// producer writes evicted after its readers read it a lap ago, and without
// the prefetch each store waited for it. On an Intel Xeon, separate cores,
// 1 -> 1 went from 0.43x the reference ring to 1.24x (docs/bench.md). Of a
// big record only the first lines are asked for: the hardware prefetcher
// follows the stores through the rest, and a prefetch of every line
// (48 per 4 KiB message) stalled the producer on its own prefetches.
// Issued after a publish's commit and wake-up, it costs the message's own
// latency nothing (publish_batch issues it per record, before the chunk's
// head and wake-up).
// A ring of at most 16 x prefetch_ahead records (48 KiB) never gets it:
// limit is at most a rescan chunk (capacity / 16) ahead.
#include "shmbus/producer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <optional>
#include <vector>

#include "attachment.hpp"
#include "back_pressure.hpp"
#include "shmbus/liveness.hpp"
#include "sys.hpp"
#include "thread_check.hpp"
#include "waiter.hpp"

namespace shmbus {
namespace {
constexpr std::uint64_t kPrefetchBytes = 3072;  // how far ahead publish prefetches (see above)
constexpr std::uint64_t kPrefetchRecordBytes = 256;  // of a record that far ahead, at most (see above)
}  // namespace

const char* to_string(PublishStatus s) noexcept {
  switch (s) {
    case PublishStatus::ok: return "ok";
    case PublishStatus::too_large: return "too large";
    case PublishStatus::timeout: return "timeout";
    case PublishStatus::closed: return "closed";
    case PublishStatus::invalid: return "invalid";
  }
  return "?";
}

struct Producer::Impl : detail::Attachment {
  ProducerOptions opt;
  detail::RoleFd role;  // holds the producer role's lock (layout.hpp, "Role locks")
  std::uint64_t prefetch_ahead;  // records: about kPrefetchBytes
  std::uint64_t next = 0;   // next sequence to publish (local copy of head)
  detail::BackPressure space;  // block: how far we may write, and the wait for room
  bool closed = false;
  bool claim_open = false;
  std::uint64_t claim_seq = 0;
  std::size_t claim_size = 0;
  std::uint32_t claim_records = 1;
  std::optional<detail::PublishClock> clock;  // Timestamps::precise only (calibrating takes 2 ms)
  [[no_unique_address]] detail::OneThread calls;  // debug builds: one thread at a time

  Impl(const Bus& b, const ProducerOptions& o)
      : Attachment(b),
        opt(o),
        prefetch_ahead(std::clamp<std::uint64_t>(kPrefetchBytes / ring.record_size(), 1, cap / 2)),
        space(seg, o.wait, o.max_hold) {
    if (opt.timestamps == Timestamps::precise) clock.emplace();
  }

  void acquire_role();
  void release_role(bool mark_closed) noexcept;
  // close() (marking end-of-stream) or detach(): once, from one thread.
  void leave(bool mark_closed, const char* what) noexcept {
    detail::OneThread::Scope in(calls, what);
    if (closed) return;
    release_role(mark_closed);
    closed = true;
  }
  // True once sequences up to `last_seq` may be written: at once in
  // `overwrite` or below the cached limit, else after waiting (up to
  // `timeout`) for the readers to make room.
  bool room_for(std::uint64_t last_seq, std::chrono::nanoseconds timeout) noexcept {
    if (overwrite || space.below(last_seq)) [[likely]]
      return true;
    switch (space.wait(last_seq, timeout)) {
      case detail::BackPressure::Wait::room: return true;
      case detail::BackPressure::Wait::removed: closed = true; return false;
      case detail::BackPressure::Wait::timeout: break;
    }
    return false;
  }
  // Why room_for() failed.
  PublishStatus no_room() const noexcept { return closed ? PublishStatus::closed : PublishStatus::timeout; }

  // Whether a reader may be copying a record we rewrite: always in
  // `overwrite`; in `block` while a best-effort reader (one that does not
  // hold us) is attached. The count shares a line with `removed`, which
  // every publish reads anyway; a reader counts itself before it reads.
  bool shared_writes() const noexcept {
    return overwrite || h->best_effort_readers.load(std::memory_order_relaxed) != 0;
  }

  // One whole record: word by word if a reader may be copying it meanwhile
  // (see record_ring.hpp).
  void write_record(std::uint64_t s, std::span<const std::byte> payload, std::uint64_t ts) const noexcept {
    layout::RecordHeader* r = ring.record(s);
    detail::RecordRing::begin_write(r, s);
    detail::RecordRing::write_payload(r, payload, shared_writes());
    detail::RecordRing::finish_write(r, s, static_cast<std::uint32_t>(payload.size()), ts);
  }

  // Room for a message of `records` slots: returns its first sequence, with
  // its first record marked BUSY and the slots inside it marked (layout.hpp,
  // "Spans"), after padding the rest of the lap if it would cross the end
  // of the ring; nullopt (and why) if no room came within `timeout`.
  std::optional<std::uint64_t> reserve(std::uint64_t records, std::chrono::nanoseconds timeout,
                                       PublishStatus& why) noexcept {
    const std::uint64_t s = next;
    const std::uint64_t start = place(s, records, cap);
    if (!room_for(start + records - 1, timeout)) {
      why = no_room();
      return std::nullopt;
    }
    // Padding loses nothing: a reader crosses it as it crosses a bus's start.
    if (start != s) ring.write_markers(s, detail::Gap{start, false}, now_stamp(), shared_writes(), layout::kGapPad);
    detail::RecordRing::begin_write(ring.record(start), start);
    if (records > 1) ring.mark_span(start, records);
    return start;
  }

  // A message longer than one record's payload (and at most max_message).
  PublishResult publish_span(std::span<const std::byte> payload, std::chrono::nanoseconds timeout) noexcept {
    const std::uint64_t k = ring.records_for(payload.size());
    PublishStatus why = PublishStatus::ok;
    const std::optional<std::uint64_t> s = reserve(k, timeout, why);
    if (!s) return {why, 0};
    layout::RecordHeader* r = ring.record(*s);
    detail::RecordRing::write_payload(r, payload, shared_writes());
    detail::RecordRing::finish_write(r, *s, static_cast<std::uint32_t>(payload.size()), now_stamp(),
                                     static_cast<std::uint32_t>(k));
    publish_head(*s + k);
    prefetch_ahead_of(*s + k - 1);
    prefetch_next_span(*s + k, k);
    return {PublishStatus::ok, *s};
  }

  // A takeover at `s` whose predecessor died writing a gap (skip_to's, or
  // the padding before a span): it writes markers highest first, so some
  // above s may be committed while s is not. A reader that lands on one
  // crosses the gap, so the gap is finished rather than written over: the
  // lowest committed marker above s (within the ring, and a bounded look)
  // names it. Returns where to go on.
  std::uint64_t finish_interrupted_gap(std::uint64_t s) noexcept {
    const std::uint64_t look = std::min<std::uint64_t>(cap - 1, std::uint64_t{1} << 16);
    for (std::uint64_t m = s + 1; m <= s + look; ++m) {
      layout::RecordHeader* r = ring.record(m);
      if (detail::RecordRing::load_tag(r) != detail::committed_tag(m) ||
          !detail::RecordRing::is_header(ring.span_mark(m)))
        continue;
      // Only a gap's markers are committed out of order.
      const std::optional<detail::Gap> gap = ring.read_gap(r, m);
      if (!gap || gap->to - s > cap) return s;
      const std::uint32_t kind = detail::RecordRing::load_length(r);
      const bool shared = shared_writes();
      if (shared)
        for (std::uint64_t q = s; q < m; ++q) detail::RecordRing::begin_write(ring.record(q), q);
      for (std::uint64_t q = m; q-- > s;) ring.write_gap_marker(q, *gap, 0, shared, kind);
      return ring.committed_end(gap->to);
    }
    return s;
  }

  // Asks for the lines of the record prefetch_ahead after `s` (see the top
  // of this file); only a record every reader is done with.
  void prefetch_ahead_of(std::uint64_t s) const noexcept {
    const std::uint64_t a = s + prefetch_ahead;
    if (!overwrite && a >= space.limit()) return;
    const auto at = reinterpret_cast<std::uintptr_t>(ring.record(a));
    // A big record: its first lines only (see the top of this file).
    const std::uintptr_t end = at + std::min<std::uint64_t>(ring.record_size(), kPrefetchRecordBytes);
    for (std::uintptr_t line = at & ~std::uintptr_t{layout::kCacheLine - 1}; line < end; line += layout::kCacheLine)
      detail::prefetch_for_write(reinterpret_cast<const void*>(line));
  }

  // After a span of `k` records ending before `n`: the lines the next
  // message of its size will store to first, fetched for writing now. A
  // span moves past what prefetch_ahead_of() reached for the message
  // before, so without this its header and its marks (one line per eight
  // records) each cost a miss on the way to the reader.
  void prefetch_next_span(std::uint64_t n, std::uint64_t k) const noexcept {
    if (!overwrite && n >= space.limit()) return;
    detail::prefetch_for_write(ring.record(n));
    const std::uint64_t marks = std::min<std::uint64_t>(k, cap - (n & (cap - 1)));
    const auto at = reinterpret_cast<std::uintptr_t>(ring.mark_slot(n));
    const std::uintptr_t end = at + std::min<std::uint64_t>(marks * sizeof(layout::SpanMark), kPrefetchBytes);
    for (std::uintptr_t line = at & ~std::uintptr_t{layout::kCacheLine - 1}; line < end; line += layout::kCacheLine)
      detail::prefetch_for_write(reinterpret_cast<const void*>(line));
  }

  void publish_head(std::uint64_t new_next) noexcept {
    next = new_next;
    // After every commit below it: a consumer reads a record only once head
    // is past it, and one that has caught up waits on this line. Pairs with
    // their acquire loads of head (and a late joiner's, the inspector's, a
    // producer's taking over).
    h->head.store(new_next, std::memory_order_release);
    wake_data_sleepers();
  }

  void wake_data_sleepers() noexcept {
    // Dekker with a consumer going to sleep: we stored the tag and head,
    // then load data_armed; it stores data_armed = 1, then issues
    // heavy_barrier() and looks at head and the tag again. No system call
    // unless somebody went to sleep since the last wake: one wake per sleep
    // episode, not one per publish until the sleeper gets a CPU (and a
    // sleeper that died costs one wake at most).
    detail::light_barrier();
    if (h->data_armed.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      if (h->data_armed.exchange(0, std::memory_order_acq_rel) != 0) {
        // Release: a sleeper that reads the new futex value sees our tag.
        h->data_futex.fetch_add(1, std::memory_order_release);
        detail::futex_wake(&h->data_futex, INT_MAX);
        h->wakeups.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  // A bus removed by force (shmbus-inspect rm --force) takes no more
  // messages. The flag shares the line with data_armed, which every publish
  // reads anyway.
  bool refused() noexcept {
    if (closed || claim_open) return true;
    if (h->removed.load(std::memory_order_relaxed) != 0) [[unlikely]] {
      closed = true;
      return true;
    }
    return false;
  }

  std::uint64_t now_stamp() noexcept {
    switch (opt.timestamps) {
      case Timestamps::coarse: return detail::coarse_realtime_ns();
      case Timestamps::precise: return clock->now();
      case Timestamps::off: break;
    }
    return 0;
  }
};

void Producer::Impl::acquire_role() {
  detail::register_barrier();
  // The kernel decides who is producer: the lock is free only when no live
  // process holds the role, in any PID namespace.
  role = seg.open_role_fd();
  if (!detail::try_lock(role.get(), layout::kProducerLockByte)) {
    if (errno == EAGAIN || errno == EACCES)
      detail::fail(Errc::producer_active, seg.info().name,
                   "another producer is attached (" +
                       pid_label(static_cast<pid_t>(h->producer_pid.load(std::memory_order_relaxed)),
                                 h->producer_pid_ns.load(std::memory_order_relaxed)) +
                       ")");
    detail::fail(Errc::system, seg.info().name,
                 std::string("cannot lock the producer role: ") + std::strerror(errno));
  }
  // One that died holding the role left its owner word set.
  const bool took_over = h->producer_owner.load(std::memory_order_acquire) != 0;
  const std::uint64_t start_head = h->head.load(std::memory_order_acquire);
  // Untrusted: no bus publishes 2^62 messages (layout.hpp, kMaxSequence).
  if (start_head >= layout::kMaxSequence) {
    detail::unlock(role.get(), layout::kProducerLockByte);
    role = detail::RoleFd();
    detail::fail(Errc::corrupt, seg.info().name,
                 "head " + std::to_string(start_head) + " is impossible (at or past 2^62): not publishing on it");
  }
  const pid_t owner_pid = ::getpid();
  h->producer_pid.store(static_cast<std::uint32_t>(owner_pid), std::memory_order_relaxed);
  h->producer_start_ticks.store(detail::self_start_ticks(), std::memory_order_relaxed);
  h->producer_pid_ns.store(detail::self_pid_namespace(), std::memory_order_relaxed);
  // A label: consumers test the lock, not this word.
  h->producer_owner.store(static_cast<std::uint32_t>(owner_pid), std::memory_order_release);
  if (took_over) h->takeovers.fetch_add(1, std::memory_order_relaxed);

  // Continue after the last committed record. A producer that died between
  // committing a record and storing head left committed records past head:
  // skip them, or the sequence would repeat. A half-written record (tag not
  // yet seq + 1) is simply overwritten.
  // A committed gap marker is followed (skip_to commits the gap's lowest
  // marker last, so the whole gap is written once it is).
  std::uint64_t s = ring.committed_end(h->head.load(std::memory_order_acquire));
  s = finish_interrupted_gap(s);
  // One that died inside a span left the marks of its inside: what we write
  // there next starts records. Its span began at s, or after padding at the
  // start of the next lap.
  ring.clear_marks_after(s);
  ring.clear_marks_after((s | (cap - 1)) + 1);
  next = s;
  h->head.store(s, std::memory_order_release);
  // Also clears what a predecessor that died waiting left in the header.
  space.start(s);
  // A new stream: consumers that saw end-of-stream can read on.
  h->closed.store(0, std::memory_order_release);
}

void Producer::Impl::release_role(bool mark_closed) noexcept {
  // A forked child destroying its copy must not end its parent's stream
  // (its copy of the role's descriptor was closed at fork).
  if (!role) return;
  if (claim_open) {
    // An open claim is abandoned: its record never gets a commit mark.
    claim_open = false;
  }
  if (mark_closed) h->closed.store(1, std::memory_order_release);  // after every commit tag
  // A wait that timed out last ends with the role.
  space.leave();
  // Cleared before the lock goes: a consumer that finds the lock free loads
  // the owner again and sees a producer that left, not one that died.
  h->producer_owner.store(0, std::memory_order_release);
  detail::unlock(role.get(), layout::kProducerLockByte);
  role = detail::RoleFd();
  if (mark_closed) {
    h->data_futex.fetch_add(1, std::memory_order_release);
    detail::futex_wake(&h->data_futex, INT_MAX);
  }
}

// ---- public API ----

Producer::Producer(const Bus& bus, const ProducerOptions& options)
    : impl_(std::make_unique<Impl>(bus, options)) {
  Impl& p = *impl_;
  if (options.wait_for_readers > 0) {
    // Setup path: poll the reader table; joining readers wake space_futex.
    const std::uint64_t start = detail::monotonic_ns();
    const std::uint64_t budget = options.wait_for_readers_timeout == forever
                                     ? UINT64_MAX
                                     : static_cast<std::uint64_t>(options.wait_for_readers_timeout.count());
    const Interrupt* interrupt = options.wait.interrupt;
    while (p.space.count_live_readers() < options.wait_for_readers) {
      const std::uint64_t elapsed = detail::monotonic_ns() - start;
      if (interrupt != nullptr && interrupt->raised())
        detail::fail(Errc::timeout, bus.name(),
                     "interrupted while waiting for " + std::to_string(options.wait_for_readers) +
                         (options.wait_for_readers == 1 ? " reader (" : " readers (") +
                         std::to_string(p.space.count_live_readers()) + " attached)");
      if (elapsed >= budget)
        detail::fail(Errc::timeout, bus.name(),
                     "timed out waiting for " + std::to_string(options.wait_for_readers) +
                         (options.wait_for_readers == 1 ? " reader (" : " readers (") +
                         std::to_string(p.space.count_live_readers()) + " attached)");
      const std::uint32_t seen = p.h->space_futex.load(std::memory_order_acquire);
      detail::futex_wait(&p.h->space_futex, seen, std::min<std::uint64_t>(budget - elapsed, 10'000'000));
    }
  }
  p.acquire_role();
}

Producer::~Producer() { close(); }

Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

void Producer::detach() noexcept {
  if (impl_) impl_->leave(false, "Producer::detach");
}

PublishResult Producer::publish(std::span<const std::byte> payload, std::chrono::nanoseconds timeout) noexcept {
  Impl& p = *impl_;
  detail::OneThread::Scope in(p.calls, "Producer::publish");
  if (p.refused()) [[unlikely]] return {PublishStatus::closed, 0};
  if (payload.size() > p.max_payload) [[unlikely]] {
    if (payload.size() > p.ring.max_message()) return {PublishStatus::too_large, 0};
    return p.publish_span(payload, timeout);
  }
  const std::uint64_t s = p.next;
  if (!p.room_for(s, timeout)) return {p.no_room(), 0};
  p.write_record(s, payload, p.now_stamp());
  p.publish_head(s + 1);
  p.prefetch_ahead_of(s);  // after the commit: off the message's own latency
  return {PublishStatus::ok, s};
}

PublishResult Producer::skip_to(std::uint64_t seq, std::chrono::nanoseconds timeout) noexcept {
  Impl& p = *impl_;
  detail::OneThread::Scope in(p.calls, "Producer::skip_to");
  if (p.refused()) [[unlikely]] return {PublishStatus::closed, 0};
  const std::uint64_t from = p.next;
  if (seq < from || seq >= layout::kMaxSequence) return {PublishStatus::invalid, 0};
  if (seq == from) return {PublishStatus::ok, seq};
  // The gap [from, seq) gets a marker in each of its slots within one ring
  // of seq. In `block`, what those slots hold must have been read first:
  // for a gap shorter than the ring that is what publishing up to seq - 1
  // needs; for a longer one, every reader must have read up to `from` (the
  // markers then fill the whole ring).
  const std::uint64_t lo = seq - from > p.cap ? seq - p.cap : from;
  const std::uint64_t last_needed = std::min(seq - 1, from + p.cap - 1);
  if (!p.room_for(last_needed, timeout)) return {p.no_room(), 0};
  // A bus that never carried a message starts at seq: nothing is lost.
  const detail::Gap gap{seq, from != 0};
  p.ring.write_markers(lo, gap, p.now_stamp(), p.shared_writes());
  if (!p.overwrite) {
    if (!gap.lost) {
      // Joiners start at seq, not at markers for messages that never were.
      p.h->oldest.store(seq, std::memory_order_relaxed);
    }
    p.space.rescan_next();  // the floor moved
  }
  p.publish_head(seq);
  return {PublishStatus::ok, seq};
}

Claim Producer::claim(std::size_t size, std::chrono::nanoseconds timeout) noexcept {
  Impl& p = *impl_;
  detail::OneThread::Scope in(p.calls, "Producer::claim");
  Claim c;
  if (p.refused()) return c;  // status closed
  if (size > p.ring.max_message()) {
    c.status = PublishStatus::too_large;
    return c;
  }
  const std::uint64_t k = p.ring.records_for(size);
  const std::optional<std::uint64_t> reserved = p.reserve(k, timeout, c.status);
  if (!reserved) return c;
  const std::uint64_t s = *reserved;
  layout::RecordHeader* r = p.ring.record(s);
  p.claim_open = true;
  p.claim_seq = s;
  p.claim_size = size;
  p.claim_records = static_cast<std::uint32_t>(k);
  c.status = PublishStatus::ok;
  c.seq = s;
  c.data = std::span<std::byte>(detail::RecordRing::payload(r), size);
  return c;
}

void Producer::commit(std::size_t size) noexcept {
  Impl& p = *impl_;
  detail::OneThread::Scope in(p.calls, "Producer::commit");
  if (!p.claim_open) return;
  p.claim_open = false;
  const std::uint64_t s = p.claim_seq;
  // The records claimed, whatever the size: the inside of a span is marked.
  detail::RecordRing::finish_write(p.ring.record(s), s, static_cast<std::uint32_t>(std::min(size, p.claim_size)),
                                   p.now_stamp(), p.claim_records);
  p.publish_head(s + p.claim_records);
  p.prefetch_ahead_of(s + p.claim_records - 1);
  if (p.claim_records > 1) p.prefetch_next_span(s + p.claim_records, p.claim_records);
}

void Producer::commit() noexcept { commit(impl_ ? impl_->claim_size : 0); }

Claim Producer::open_claim() const noexcept {
  if (!impl_ || !impl_->claim_open) return {};
  const Impl& p = *impl_;
  return {PublishStatus::ok, p.claim_seq,
          std::span<std::byte>(detail::RecordRing::payload(p.ring.record(p.claim_seq)), p.claim_size)};
}

std::size_t Producer::publish_batch(std::span<const std::span<const std::byte>> payloads,
                                    std::chrono::nanoseconds timeout) noexcept {
  Impl& p = *impl_;
  detail::OneThread::Scope in(p.calls, "Producer::publish_batch");
  if (p.refused()) return 0;
  std::size_t total = payloads.size();
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (payloads[i].size() > p.ring.max_message()) {
      total = i;
      break;
    }
  }
  std::size_t done = 0;
  while (done < total) {
    if (payloads[done].size() > p.max_payload) {
      if (!p.publish_span(payloads[done], timeout)) break;
      ++done;
      continue;
    }
    // A run of one-record messages, at most half a ring at a time, so a full
    // batch never waits for itself.
    const std::uint64_t most = std::min<std::uint64_t>(total - done, std::max<std::uint64_t>(1, p.cap / 2));
    std::uint64_t n = 1;
    while (n < most && payloads[done + n].size() <= p.max_payload) ++n;
    const std::uint64_t first = p.next;
    const std::uint64_t last = first + n - 1;
    if (!p.room_for(last, timeout)) break;
    const std::uint64_t ts = p.now_stamp();
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::uint64_t s = first + k;
      p.write_record(s, payloads[done + k], ts);
      p.prefetch_ahead_of(s);
    }
    p.publish_head(first + n);
    done += n;
  }
  return done;
}

void Producer::close() noexcept {
  if (impl_) impl_->leave(true, "Producer::close");
}

std::uint32_t Producer::live_readers() const { return impl_->space.count_live_readers(); }
std::uint64_t Producer::next_seq() const noexcept { return impl_->next; }
const Bus& Producer::bus() const noexcept { return impl_->bus; }

}  // namespace shmbus
