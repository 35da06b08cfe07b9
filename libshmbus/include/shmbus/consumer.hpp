// shmbus — a consumer: reads every message of a bus from its own cursor.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shmbus/bus.hpp"
#include "shmbus/wait.hpp"

namespace shmbus {

namespace detail {
struct ConsumerAccess;
}

enum class Start : std::uint8_t {
  earliest,  // the oldest record still retained
  latest,    // only messages published after attaching
  sequence,  // ConsumerOptions::start_seq; Errc::not_retained if it is gone
  resume,    // where the durable reader `name` stopped (implies durable); the
             // oldest retained record if the name has no bookmark yet. If
             // records after its bookmark are gone it starts at the oldest
             // retained one and counts them in lost() and resume_gap().
};

// Durable readers. A durable consumer holds its name exclusively while
// attached (a second one fails with Errc::name_in_use, naming the holder's
// pid) and leaves its cursor in the bus's bookmark table under that name
// when it detaches. The bookmark does not hold the producer back: in a
// `block` bus only attached readers do. After a crash the bookmark is where
// the reader last published its cursor: up to 32 messages before the last
// one it read (redelivered, never skipped). Bookmarks live as long as the
// bus; `shmbus-inspect gc --forget NAME` drops one.
struct ConsumerOptions {
  std::string name = "consumer";  // shown by shmbus-inspect; up to 31 bytes (longer: invalid_options)
  Start start = Start::earliest;
  std::uint64_t start_seq = 0;
  bool durable = false;           // remember the cursor under `name` (see above)
  // Whether this reader holds a `block` bus's producer back. true (the
  // default): the producer never overwrites a record this reader has not
  // read, waiting for it when the ring is full; nothing is ever lost, unless
  // the producer has a hold limit (ProducerOptions::max_hold) and waits
  // that long for this reader, or an administrator lets it go
  // (let_go_reader(), shmbus-inspect let-go): then it is let go
  // (ReadStatus::let_go) and goes on as a best-effort reader. false
  // (a best-effort reader, e.g. a live dashboard): the producer never waits
  // for it; if it falls a ring behind, it is lapped exactly as a reader of
  // an `overwrite` bus is: ReadStatus::lost says how many messages it
  // missed, and it goes on at the oldest record still in the ring. It reads
  // every message through a checked copy (its views point into its own
  // buffer), and while one is attached the producer writes payloads word by
  // word. On an `overwrite` bus every reader is best-effort already.
  bool hold_producer = true;
  WaitOptions wait{};
};

// Why a stream ended (ReadStatus::end_of_stream).
enum class EndReason : std::uint8_t {
  none,           // it has not ended
  closed,         // the producer closed the bus
  producer_died,  // the producer died without closing it
  removed,        // the bus was removed by force (shmbus-inspect rm --force)
};

const char* to_string(EndReason r) noexcept;

// One message. For a reader that holds a `block` bus's producer `payload`
// points into shared memory; otherwise (an `overwrite` bus, a best-effort
// reader) into the consumer's own buffer. Either way it is
// valid until the next call to next() or poll() on the same Consumer.
struct Message {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ns = 0;  // CLOCK_REALTIME at publish, or 0
  std::span<const std::byte> payload;  // one contiguous view, also of a message that spans records
  // Sequence numbers count records: a message longer than one record's
  // payload (BusInfo::max_payload) takes `records` of them, so the next
  // message's sequence is at least seq + records.
  std::uint32_t records = 1;
};

enum class ReadStatus : std::uint8_t {
  message,        // `message` holds the next message
  timeout,        // nothing new within the timeout
  end_of_stream,  // the producer closed the bus or died, and everything it
                  // committed has been read. Reported at once the first time;
                  // later calls sleep up to their timeout for a new producer
                  // to take over, and report it again if none did
  lost,           // `overwrite` bus or best-effort reader only: `lost` messages
                  // were overwritten before they could be read; the cursor
                  // moved to the oldest record
  corrupt,        // the record at `message.seq` has an impossible length,
                  // or (`block`) its commit mark was destroyed while the
                  // producer went a full ring past it; it was skipped
  evicted,        // this consumer's reader slot was taken from it (cleared
                  // by a stray store into the segment, or freed by force):
                  // the producer stopped waiting for it. It took the slot
                  // back and goes on at `message.seq`; `lost` messages
                  // before that are gone. A view from the previous call may
                  // have been overwritten meanwhile: `stale_view` says so
                  // where it can tell (`block`, in place). Never returned
                  // for a reader that merely ran slowly or was stopped.
  let_go,         // this reader held a `block` producer with a hold limit
                  // (ProducerOptions::max_hold) that long, or was let go by
                  // an administrator (let_go_reader()): it no longer holds
                  // the producer. From here it reads as a
                  // best-effort reader (hold_producer = false) does: laps
                  // are reported as `lost`. It goes on at `message.seq`;
                  // nothing is lost by this call itself. A view from the
                  // previous call may have been overwritten meanwhile:
                  // `stale_view` says so. Returned once per attachment.
};

const char* to_string(ReadStatus s) noexcept;

struct ReadResult {
  ReadStatus status = ReadStatus::timeout;
  Message message;
  std::uint64_t lost = 0;  // with ReadStatus::lost and ReadStatus::evicted
  EndReason end_reason = EndReason::none;  // with ReadStatus::end_of_stream
  bool stale_view = false;  // with ReadStatus::evicted and ReadStatus::let_go (see there)
};

struct PollResult {
  std::size_t count = 0;     // messages handed to the handler
  std::uint64_t lost = 0;    // sequences lost (overwrite, best-effort) before the first of them
  std::uint64_t corrupt = 0; // records skipped as corrupt
  bool end_of_stream = false;
  EndReason end_reason = EndReason::none;  // with end_of_stream
  bool evicted = false;      // the slot was taken from this consumer (ReadStatus::evicted);
                             // lost includes what that cost; nothing else was read
  bool let_go = false;       // the producer stopped waiting for this reader (ReadStatus::let_go);
                             // nothing else was read
  bool stale_view = false;   // with evicted or let_go: a view from the previous call was overwritten
};

// A consumer holds one reader slot of the bus for its lifetime, through a
// lock the kernel drops when its process dies (in any PID or mount
// namespace; see Liveness in liveness.hpp). The slot is released by the
// destructor, or reclaimed by the producer, a new consumer or shmbus-inspect
// once the process is gone, never while it lives. A forked child does not
// share it: its copy of a Consumer holds nothing (do not use it there). Not
// thread-safe: one thread at a time per Consumer.
class Consumer {
 public:
  // Throws Error: reader_table_full, not_retained (Start::sequence).
  explicit Consumer(const Bus& bus, const ConsumerOptions& options = {});
  ~Consumer();
  Consumer(Consumer&&) noexcept;
  Consumer& operator=(Consumer&&) noexcept;
  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // The next message, waiting up to `timeout` (zero: just look).
  [[nodiscard]] ReadResult next(std::chrono::nanoseconds timeout = forever) noexcept;

  // Up to `out.size()` messages available now (waiting up to `timeout` for
  // the first), without advancing past them: the views stay valid until the
  // next call. Fills `result` with counts; returns the messages read. A loss
  // in `result` comes before the first message returned: one met after
  // messages are in hand ends the batch and is told by the next call
  // (shmbus/placement.hpp).
  [[nodiscard]] std::span<const Message> read_batch(std::span<Message> out, PollResult& result,
                                                    std::chrono::nanoseconds timeout) noexcept {
    return read_batch(out, result, timeout, false);
  }

  // Calls handler(const Message&) for up to `max` messages available now
  // (waiting up to `timeout` for the first). One cursor update per batch.
  // As with read_batch(), a loss in the result comes before the first
  // message handled: one met after that is told by the next call.
  template <class Handler>
  PollResult poll(Handler&& handler, std::size_t max = 256,
                  std::chrono::nanoseconds timeout = std::chrono::nanoseconds::zero()) {
    PollResult total;
    std::array<Message, 64> buf;
    while (total.count < max) {
      PollResult r;
      const std::size_t want = std::min<std::size_t>(buf.size(), max - total.count);
      auto got = read_batch(std::span<Message>(buf.data(), want), r,
                            total.count == 0 ? timeout : std::chrono::nanoseconds::zero(), total.count > 0);
      total.lost += r.lost;
      total.corrupt += r.corrupt;
      if (r.evicted || r.let_go) {
        total.evicted = r.evicted;
        total.let_go = r.let_go;
        total.stale_view = r.stale_view;
        break;
      }
      for (const Message& m : got) handler(m);
      total.count += got.size();
      if (r.end_of_stream) {
        total.end_of_stream = true;
        total.end_reason = r.end_reason;
        break;
      }
      if (got.size() < want) break;
    }
    return total;
  }

  // Keeps what this reader has read from `seq` on: the cursor it shows the
  // producer (and leaves in a durable name's bookmark) goes no further than
  // `seq` until this is called again, so a `block` producer keeps those
  // records. For a reader that hands messages on to something slower that
  // may fail (a network publish it must be able to redo from `seq`): it
  // reads ahead of what it has finished with, and the ring still holds the
  // rest. Raising it lets the producer on at once. max_sequence (the
  // default): no floor.
  static constexpr std::uint64_t max_sequence = std::uint64_t{1} << 62;
  void retain_from(std::uint64_t seq) noexcept;

  // Sequence of the next message this consumer will read.
  std::uint64_t cursor() const noexcept;
  std::uint64_t delivered() const noexcept;
  std::uint64_t lost() const noexcept;
  // Index of this consumer's slot in the reader table.
  std::uint32_t slot() const noexcept;
  // Why the stream last ended, or EndReason::none.
  EndReason end_reason() const noexcept;
  // Start::resume: true if the name had a bookmark (false: a new name, and
  // always for any other start).
  bool resumed() const noexcept;
  // Start::resume: messages after the bookmark that were gone when it
  // resumed (also counted in lost()).
  std::uint64_t resume_gap() const noexcept;
  const Bus& bus() const noexcept;

 private:
  // `after_messages`: the caller has handed out messages since the last
  // loss it reported; a loss met now waits for the next call.
  std::span<const Message> read_batch(std::span<Message> out, PollResult& result, std::chrono::nanoseconds timeout,
                                      bool after_messages) noexcept;
  friend struct detail::ConsumerAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmbus
