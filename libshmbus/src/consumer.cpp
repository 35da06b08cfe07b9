// shmbus — the consumer's public calls (shmbus/consumer.hpp). Its state
// and per-message read path are in consumer_impl.hpp.
#include "consumer_impl.hpp"

#include <algorithm>
#include <utility>

namespace shmbus {

const char* to_string(ReadStatus s) noexcept {
  switch (s) {
    case ReadStatus::message: return "message";
    case ReadStatus::timeout: return "timeout";
    case ReadStatus::end_of_stream: return "end of stream";
    case ReadStatus::lost: return "lost";
    case ReadStatus::corrupt: return "corrupt";
    case ReadStatus::evicted: return "evicted";
    case ReadStatus::let_go: return "let go";
  }
  return "?";
}

const char* to_string(EndReason r) noexcept {
  switch (r) {
    case EndReason::none: return "none";
    case EndReason::closed: return "closed";
    case EndReason::producer_died: return "producer_died";
    case EndReason::removed: return "removed";
  }
  return "?";
}

namespace {
using detail::Dest;
using detail::Step;
using layout::kMaxSequence;
}  // namespace

Consumer::Consumer(const Bus& bus, const ConsumerOptions& options)
    : impl_(std::make_unique<Impl>(bus, options)) {
  impl_->attach();
}

Consumer::~Consumer() {
  if (!impl_) return;
  detail::OneThread::Scope in(impl_->calls, "~Consumer");
  impl_->detach();
}

Consumer::Consumer(Consumer&&) noexcept = default;
Consumer& Consumer::operator=(Consumer&& o) noexcept {
  if (this != &o) {
    if (impl_) {
      detail::OneThread::Scope in(impl_->calls, "Consumer::operator=");
      impl_->detach();
    }
    impl_ = std::move(o.impl_);
  }
  return *this;
}

ReadResult Consumer::next(std::chrono::nanoseconds timeout) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::next");
  ReadResult r;
  if (c.deferred_lost != 0) [[unlikely]] {
    r.status = ReadStatus::lost;
    r.lost = std::exchange(c.deferred_lost, 0);
    r.message.seq = c.cursor;
    return r;
  }
  if (!c.slot_is_ours()) [[unlikely]] {
    c.slot_taken(r);
    return r;
  }
  c.release_if_due();
  // The common case inline: the record at the cursor is committed. Dest{}:
  // a checked reader copies into its whole buffer (read_checked() looks it
  // up, off the in-place path).
  Step s = c.try_read(r.message, Dest{});
  if (s == Step::message) [[likely]] {
    r.status = ReadStatus::message;
    c.view_from = r.message.seq;  // only this record is in hand (not a gap crossed on the way)
    return r;
  }
  if (s == Step::empty) s = c.read_one(r.message, Dest{}, timeout);
  // A message longer than any before (a checked reader's copy): room, then read it.
  while (s == Step::no_room) [[unlikely]] {
    c.grow_copy_buffer(r.message.payload.size());
    s = c.try_read(r.message, Dest{});
  }
  switch (s) {
    case Step::message:
      r.status = ReadStatus::message;
      c.view_from = r.message.seq;
      return r;
    case Step::lost:
      r.status = ReadStatus::lost;
      r.lost = c.last_lost;
      r.message = {};
      break;
    case Step::corrupt:
      r.status = ReadStatus::corrupt;
      r.message.payload = {};
      break;
    case Step::empty:
    case Step::moved:
    case Step::no_room:
    case Step::timeout: r.status = ReadStatus::timeout; break;
    case Step::eos:
      r.status = ReadStatus::end_of_stream;
      r.end_reason = c.end;
      break;
    case Step::taken: c.slot_taken(r); break;
  }
  c.view_from = c.cursor;  // nothing in hand
  return r;
}

std::span<const Message> Consumer::read_batch(std::span<Message> out, PollResult& result,
                                              std::chrono::nanoseconds timeout, bool after_messages) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::read_batch");
  result = {};
  if (after_messages && c.deferred_lost != 0) return out.first(0);
  result.lost = std::exchange(c.deferred_lost, 0);
  if (!c.slot_is_ours()) [[unlikely]] {
    c.slot_taken(result.let_go, result.evicted, result.lost, result.stale_view);
    return out.first(0);
  }
  c.view_from = c.cursor;
  c.release_if_due();
  const std::size_t max = std::min(out.size(), c.checked ? c.batch_cap : out.size());
  std::size_t n = 0;
  bool may_wait = true;
  while (n < max) {
    // Message n of the batch is copied to the n-th record's room; the first
    // may use the whole buffer (a message that spans records).
    const Dest copy_to = n == 0 || !c.copy ? Dest{} : Dest{c.copy.get() + n * c.max_payload, c.max_payload};
    Step s = may_wait ? c.read_one(out[n], copy_to, timeout) : c.try_read(out[n], copy_to);
    if (s == Step::no_room) {
      // A message that spans records: alone in its batch.
      if (n > 0) break;
      c.grow_copy_buffer(out[n].payload.size());
      s = c.try_read(out[n], Dest{});
      if (s == Step::message) {
        ++n;
        break;
      }
    }
    if (s == Step::empty || s == Step::no_room) break;
    if (s == Step::message) {
      // The first message in hand: a release during the call (crossing
      // padding or a gap after it) stops there, so that neither a view in
      // place nor a durable name's cursor goes past what the caller holds.
      if (n == 0) c.keep_from = out[0].seq;
      ++n;
      may_wait = false;
      // A copied message that spans records used the room of those after it.
      if (c.checked && out[n - 1].payload.size() > c.max_payload) break;
    } else if (s == Step::lost) {
      if (n > 0 || after_messages) {
        // Told before the message after it: by the next call.
        c.deferred_lost += c.last_lost;
        break;
      }
      result.lost += c.last_lost;
    } else if (s == Step::corrupt) {
      ++result.corrupt;
    } else {
      if (s == Step::eos) {
        result.end_of_stream = true;
        result.end_reason = c.end;
      }
      // Taken with messages in hand: they go out now, the next call says what happened.
      if (s == Step::taken && n == 0) c.slot_taken(result.let_go, result.evicted, result.lost, result.stale_view);
      break;
    }
  }
  result.count = n;
  c.keep_from = kMaxSequence;  // the next call starts by letting them go
  // What is in hand: from the first message (a gap crossed before it is not).
  c.view_from = n > 0 ? out[0].seq : c.cursor;
  return out.first(n);
}

void Consumer::retain_from(std::uint64_t seq) noexcept {
  Impl& c = *impl_;
  detail::OneThread::Scope in(c.calls, "Consumer::retain_from");
  c.retain = std::min(seq, kMaxSequence);
  c.release();  // between calls nothing is in hand
}

std::uint64_t Consumer::cursor() const noexcept { return impl_->cursor; }
std::uint64_t Consumer::delivered() const noexcept { return impl_->delivered; }
std::uint64_t Consumer::lost() const noexcept { return impl_->lost; }
std::uint32_t Consumer::slot() const noexcept { return impl_->index; }
const Bus& Consumer::bus() const noexcept { return impl_->bus; }
EndReason Consumer::end_reason() const noexcept { return impl_->end; }
bool Consumer::resumed() const noexcept { return impl_->had_bookmark && impl_->opt.start == Start::resume; }
std::uint64_t Consumer::resume_gap() const noexcept { return impl_->resume_gap; }

}  // namespace shmbus
