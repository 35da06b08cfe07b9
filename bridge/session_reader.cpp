// shmbus-bridge — a subscriber's bus reader (session.hpp): the thread that
// reads the bus from the subscriber's start and queues its frames (messages,
// losses, the end), bounded by the subscriber's buffer.
#include "bridge/session.hpp"

#include <fmt/format.h>

#include "bridge/log.hpp"

namespace shmbus::bridge {

void Session::told_lost(const Loss& l) {
  append_loss(pending, l);
  bump(srv.counters.dropped, l.count);
}

void Session::reader(Consumer& c, const Welcome& w) {
  std::vector<Message> batch(srv.opt.batch_messages);
  std::uint64_t next = w.first_seq;  // next sequence the subscriber should get
  std::uint64_t owed = 0;            // lost by the reads, not yet in a loss frame
  Clock::time_point last_sent = Clock::now();
  BatchBuilder builder;
  const std::size_t limit = srv.opt.buffer_bytes;
  const std::uint32_t max_body = w.max_frame;
  while (true) {
    PollResult r;
    // Wakes for the heartbeat when it is due (and at least every 100 ms,
    // to see stop_reader), so the period is the one welcome announced.
    const auto since = Clock::now() - last_sent;
    const std::chrono::nanoseconds until_beat =
        since >= srv.opt.heartbeat ? std::chrono::nanoseconds::zero()
                                   : std::chrono::duration_cast<std::chrono::nanoseconds>(srv.opt.heartbeat - since);
    const auto got =
        c.read_batch(batch, r, std::min<std::chrono::nanoseconds>(std::chrono::milliseconds(100), until_beat));
    std::unique_lock lk(m);
    if (stop_reader) return;
    const std::size_t need = got.size() * kMessageHeader + [&] {
      std::size_t n = 0;
      for (const Message& msg : got) n += msg.payload.size();
      return n;
    }();
    if (!got.empty() && !pending.empty() && pending.size() + need > limit) {
      if (srv.opt.slow == SlowPolicy::block) {
        // Not consuming: the views stay valid and the bus's producer waits for this slot.
        space.wait(lk, [&] { return stop_reader || pending.size() + need <= limit || pending.empty(); });
        if (stop_reader) return;
      } else {
        // The socket is full: stop reading the bus for this subscriber
        // (its reader does not hold the producer) until there is room, or
        // until the producer laps it and it has really lost messages.
        const Bus& bus = c.bus();
        const std::uint64_t cap = bus.info().capacity;
        bool lapped = false;
        while (!stop_reader && pending.size() + need > limit && !pending.empty()) {
          space.wait_for(lk, std::chrono::milliseconds(50));
          // The batch in hand is a copy (a best-effort reader's own
          // buffer); what follows it is gone once head is a ring past it.
          if (bus.head() >= c.cursor() + cap) {
            lapped = true;
            break;
          }
        }
        if (stop_reader) return;
        if (lapped && srv.opt.slow == SlowPolicy::disconnect) {
          // Everything queued is sent first, then the error: the
          // subscriber resumes at `next` with nothing missing in between.
          append_error(pending, ErrorCode::slow, next,
                       fmt::format("subscriber too slow: the bus went a whole ring ({} messages) past it; "
                                   "resume at seq {}",
                                   cap, next));
          finish_after_flush = true;
          stop_reader = true;
          end_kind = End::slow;
          end_seq = next;
          count_pending();
          lk.unlock();
          // A stalled peer never takes the error frame: begin_closing bounds the wait.
          asio::post(srv.io, [self = shared_from_this()] { self->slow_close(); });
          return;
        }
        if (lapped) {
          // --slow skip: the batch in hand goes too; the reads that
          // follow report what the producer overwrote, and the loss
          // frame (counted in `dropped`) goes out with the next batch, or
          // at once if none comes.
          owed += c.cursor() - next;  // the batch dropped: lost to the subscriber
          continue;  // `next` stays: the next frame queued starts with a loss frame
        }
      }
    }
    owed += r.lost;
    if (!got.empty()) {
      // Sequences count records: a message takes msg.records of them. The
      // consumer tells a loss before the first message after it, and it
      // covers everything from the message before (shmbus/placement.hpp):
      // a jump before the first message after a loss is that loss (a loss
      // frame), any other jump is the padding a bus puts before a message
      // that spans records, and goes by silently.
      builder.begin(pending);
      for (const Message& msg : got) {
        if (msg.seq > next && owed > 0) {
          builder.finish(pending);
          told_lost(Loss{next, msg.seq - next});
          owed = 0;
          builder.begin(pending);
        }
        if (builder.body_size(pending) + kMessageHeader + msg.payload.size() > max_body) {
          builder.finish(pending);
          builder.begin(pending);
        }
        builder.add(pending, msg.seq, msg.timestamp_ns, msg.payload, msg.records);
        next = msg.seq + msg.records;
      }
      builder.finish(pending);
      resume_seq = next;
      bump(srv.counters.messages, got.size());
      last_sent = Clock::now();
    } else if (owed > 0 && c.cursor() > next) {
      told_lost(Loss{next, c.cursor() - next});
      owed = 0;
      next = c.cursor();
      resume_seq = next;
    }
    if (r.end_of_stream) {
      // Padding crossed at the end (its message never came) lost nothing.
      if (c.cursor() > next && owed > 0) told_lost(Loss{next, c.cursor() - next});
      append_seq_frame(pending, FrameType::end, c.cursor());
      finish_after_flush = true;
      stop_reader = true;
      end_kind = End::eos;
    } else if (got.empty() && Clock::now() - last_sent >= srv.opt.heartbeat) {
      append_seq_frame(pending, FrameType::heartbeat, next);
      last_sent = Clock::now();
    }
    count_pending();
    if (!pending.empty() && !writing && !kick_posted) {
      kick_posted = true;
      lk.unlock();
      asio::post(srv.io, [self = shared_from_this()] { self->kick(); });
    }
    if (stop_reader) return;
  }
}

}  // namespace shmbus::bridge
