// shmbus — the producer: the one process that appends to a bus.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "shmbus/bus.hpp"
#include "shmbus/wait.hpp"

namespace shmbus {

// What a record's timestamp_ns holds (CLOCK_REALTIME nanoseconds, or 0).
// Off by default: any clock read per publish, even the coarse one, costs
// more than the rest of a publish inside a fast publishing loop
// (docs/bench.md, "Figures behind the defaults").
enum class Timestamps : std::uint8_t {
  off,     // 0: nothing is read per publish (the default)
  // The kernel's last tick (CLOCK_REALTIME_COARSE): resolution one tick
  // (1/HZ, 1-4 ms), lagging real time by at most about two ticks; one read
  // of the kernel's clock page per publish (no system call, no clock
  // hardware). Enough for "when was this published", the inspector's
  // last-publish age, and ordering against logs; not for latency statistics.
  coarse,
  // CLOCK_REALTIME to the nanosecond, read through the TSC where the kernel's
  // clock uses it (then without a system call). For per-message latency
  // statistics. A TSC read inside a store-heavy loop costs widely different
  // amounts on different CPUs, and on some it limits the publish rate.
  // Applications that measure latency can instead carry their own send time
  // in the payload (as shmbus-producer's synthetic messages do).
  precise,
};

struct ProducerOptions {
  // How publish() and claim() wait for space in a `block` bus.
  WaitOptions wait{};
  // What each record's timestamp holds. publish_batch() stamps a whole batch once.
  Timestamps timestamps = Timestamps::off;
  // Wait in the constructor until this many live consumers are attached
  // (so a producer that must not start before its readers loses nothing).
  std::uint32_t wait_for_readers = 0;
  std::chrono::nanoseconds wait_for_readers_timeout = forever;
  // The hold limit of a `block` bus: the longest one wait for space lasts
  // before the producer lets go of the readers it waits for. Each such
  // reader stops holding the producer from then on: it reads on as a
  // best-effort reader (ConsumerOptions::hold_producer = false) does, is
  // told so once (ReadStatus::let_go), and is lapped like one if it stays
  // behind. The inspector names it, with the time it was let go. What
  // counts is, per reader, the time this producer spends waiting for space
  // while that reader holds it and its cursor does not move: a reader that
  // keeps reading, however slowly, is never let go (that is back-pressure,
  // what `block` is for), and one that stops (a stuck or SIGSTOPped
  // process) costs the stream one stall this long. A reader makes its
  // position visible every capacity/16 messages (at most 32) and whenever it
  // waits, so choose a limit longer than 32 of its slowest messages. A
  // holder found dead meanwhile is reclaimed instead. `forever` (the
  // default): never let go; zero: at the first look. Ignored in
  // `overwrite`, where no reader holds the producer.
  std::chrono::nanoseconds max_hold = forever;
};

enum class PublishStatus : std::uint8_t {
  ok,
  too_large,  // payload longer than the bus's max payload
  timeout,    // `block` bus stayed full for the whole timeout
  closed,     // close() was called on this producer, or the bus was removed by force
  invalid,    // skip_to() a sequence below next_seq(), or at 2^62 or beyond
};

const char* to_string(PublishStatus s) noexcept;

struct PublishResult {
  PublishStatus status;
  std::uint64_t seq;  // sequence number given to the message (valid when ok)
  explicit operator bool() const noexcept { return status == PublishStatus::ok; }
};

// A record reserved by claim(): write up to data.size() bytes, then commit().
struct Claim {
  PublishStatus status = PublishStatus::closed;
  std::uint64_t seq = 0;
  std::span<std::byte> data;  // points into the shared segment (see claim() for `overwrite`)
  explicit operator bool() const noexcept { return status == PublishStatus::ok; }
};

// Producer owns the bus's producer role exclusively, through a lock the
// kernel drops when its process dies (in any PID or mount namespace; see
// Liveness in liveness.hpp). Constructing one on a bus whose producer is
// alive throws Error(Errc::producer_active) naming its pid; on a bus whose
// producer died (or left), it takes over and continues the sequence after
// the last committed record. A forked child's copy holds nothing (do not
// publish from it). Not thread-safe: one thread at a time per Producer.
class Producer {
 public:
  explicit Producer(const Bus& bus, const ProducerOptions& options = {});
  ~Producer();  // close(), unless close() or detach() was called
  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;

  // Copies `payload` into the next record and publishes it. No allocation,
  // lock or system call unless a consumer sleeps or the ring is full.
  [[nodiscard]] PublishResult publish(std::span<const std::byte> payload,
                                      std::chrono::nanoseconds timeout = forever) noexcept;

  // Reserves the next record for `size` bytes (<= max payload) to be written
  // in place. Exactly one claim may be open; commit() publishes it.
  //
  // In an `overwrite` bus (and in a `block` bus while a best-effort reader,
  // ConsumerOptions::hold_producer = false, is attached: it may be lapped
  // the same way), writing through data is a data race by the C++
  // memory model: a consumer lapped by the producer (or the inspector) may
  // be copying the record's previous occupant at that very moment with its
  // relaxed atomic word loads, and the caller's plain stores to the same
  // bytes are not atomic. The reader does not act on the torn copy (its
  // re-check of the commit tag sees BUSY and discards it), so on x86-64 and
  // AArch64 nothing wrong is ever delivered, but the race is undefined
  // behaviour all the same, and ThreadSanitizer reports it if the reader is
  // a thread of the same process. A program that must be race-free by the
  // model uses publish() in `overwrite`: it copies the payload into the
  // record once, with relaxed atomic word stores (docs/RELIABILITY.md,
  // "claim() in an overwrite bus"; the figures are in docs/bench.md,
  // "Figures behind the defaults"). In a `block` bus whose readers all hold
  // the producer, no reader is on a record the producer may write: claim()
  // is race-free and zero-copy. A reader let go by the hold limit (max_hold)
  // is best-effort from then on, with the same race while it is attached.
  [[nodiscard]] Claim claim(std::size_t size, std::chrono::nanoseconds timeout = forever) noexcept;
  // Publishes the open claim with its first `size` bytes (<= the claimed size).
  void commit(std::size_t size) noexcept;
  void commit() noexcept;  // the whole claimed size
  // The claim open now, as claim() returned it (status ok, seq, data), or a
  // Claim with status closed when none is: the one record of what is
  // claimed, for wrappers that must refuse a second claim or a commit of
  // more than was claimed.
  [[nodiscard]] Claim open_claim() const noexcept;

  // Publishes messages in order, sharing one timestamp, one head update and
  // one wake-up check. Returns how many were published: all of them, or fewer
  // if the timeout ran out or one was too large (it and those after it are not
  // published).
  [[nodiscard]] std::size_t publish_batch(std::span<const std::span<const std::byte>> payloads,
                                          std::chrono::nanoseconds timeout = forever) noexcept;

  // The next message gets sequence `seq` (>= next_seq()); for a bus that
  // republishes another bus's messages under their own sequence numbers.
  // On a bus that has never carried a message the stream simply starts at
  // `seq`: a reader waiting at 0 or starting at the earliest record begins
  // there, nothing counted as lost. Otherwise the sequences skipped are a
  // gap: every reader crossing it reports them as lost (ReadStatus::lost,
  // PollResult::lost), exactly as if they had been overwritten. Writes a gap
  // marker into every slot of the gap within one ring of `seq` (at most
  // capacity records; no message is published). In a `block` bus it first
  // waits, like publish(), until the records it overwrites have been read.
  // Returns {ok, seq}; {invalid} if seq < next_seq() or seq >= 2^62 (no bus
  // gets that far; a consumer refuses such a head); timeout or closed as
  // publish() does. A producer killed inside skip_to: a takeover finishes
  // the gap and continues after it if any of its markers within one ring of
  // where it began was committed, else continues before it.
  [[nodiscard]] PublishResult skip_to(std::uint64_t seq, std::chrono::nanoseconds timeout = forever) noexcept;

  // Marks end-of-stream, wakes every waiter and gives up the producer role.
  // Consumers drain what was published and then see end_of_stream. The
  // destructor does this too (as does the death of the process).
  void close() noexcept;

  // Gives up the producer role WITHOUT marking end-of-stream: consumers keep
  // waiting for another producer to take the bus over and continue.
  void detach() noexcept;

  // Consumers currently attached and alive (rescans the reader table and
  // tests each one's lock: one system call per attached reader).
  std::uint32_t live_readers() const;

  // Sequence the next message will get: after a takeover, the one after the
  // last committed record (or gap).
  std::uint64_t next_seq() const noexcept;
  const Bus& bus() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmbus
