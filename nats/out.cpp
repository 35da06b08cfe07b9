#include "nats/out.hpp"

#include <fmt/format.h>
#include <shmbus/consumer.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "nats/headers.hpp"
#include "tools/common/program.hpp"

namespace shmbus::nats {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kSampleEvery{50};  // at most this often to OutOptions::sample

// Written by the client's ack thread, read by the publishing loop. Relaxed
// counters; `resync` is a flag the loop polls (acq_rel not needed: the loop
// waits for every publish in flight to complete, through the client's own
// locking, before it acts on anything the handler saw).
struct AckState {
  std::atomic<std::uint64_t> acked{0};
  std::atomic<std::uint64_t> duplicates{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<bool> resync{false};
  // The bus sequence after the newest message the stream acknowledged: the
  // reader keeps the ring from here (Consumer::retain_from()), so that
  // whatever a resync republishes is still there while `out` lives.
  std::atomic<std::uint64_t> acked_to{0};
  std::mutex mutex;
  std::string first_error;  // under mutex
  bool fatal = false;       // under mutex: not a transient failure
};

void on_ack(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  auto* st = static_cast<AckState*>(closure);
  if (pae != nullptr) {
    st->failed.fetch_add(1, std::memory_order_relaxed);
    const natsStatus s = pae->Err;
    // A server restarting answers with timeouts, closed connections or no
    // responders until JetStream has loaded the stream again: retried.
    const bool transient = s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS || s == NATS_CONNECTION_CLOSED ||
                           s == NATS_CONNECTION_DISCONNECTED || s == NATS_IO_ERROR || s == NATS_STALE_CONNECTION;
    {
      std::lock_guard lock(st->mutex);
      if (st->first_error.empty()) {
        st->first_error = pae->ErrText != nullptr && *pae->ErrText != '\0'
                              ? fmt::format("{} (JetStream error {})", pae->ErrText, static_cast<int>(pae->ErrCode))
                              : std::string(natsStatus_GetText(s));
      }
      // Anything else (a broken chain, JSStreamWrongLastMsgIDErr, included)
      // is resynced; a resync finds out if the stream is gone.
      (void)transient;
      if (pae->ErrCode == JSStreamNotFoundErr) st->fatal = true;
    }
    st->resync.store(true, std::memory_order_relaxed);
  } else if (pa != nullptr) {
    if (pa->Duplicate) st->duplicates.fetch_add(1, std::memory_order_relaxed);
    st->acked.fetch_add(1, std::memory_order_relaxed);
    const char* seq = nullptr;
    if (natsMsgHeader_Get(msg, kSeqHeader, &seq) == NATS_OK && seq != nullptr) {
      if (const std::optional<std::uint64_t> s = parse_seq(seq)) {
        std::uint64_t cur = st->acked_to.load(std::memory_order_relaxed);
        while (cur < *s + 1 && !st->acked_to.compare_exchange_weak(cur, *s + 1, std::memory_order_relaxed)) {
        }
      }
    }
  }
  natsMsg_Destroy(msg);
}

struct Resume {
  std::uint64_t seq = 0;
  bool found = false;       // the stream holds a message of this bus on the subject
  std::string other_bus;    // the last message came from another bus (identity)
  std::string last_id;      // Nats-Msg-Id of the stream's last message (any subject), or empty
};

// The Nats-Msg-Id of the last message in the whole stream: the first publish
// after a (re)start expects it, so nothing can land between.
std::string stream_last_id(const Connection& c, const std::string& stream) {
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, c.js(), stream.c_str(), nullptr, &code);
  if (s != NATS_OK) {
    throw GatewayError(js_error_text(fmt::format("stream '{}'", stream), s, code, c.last_async_error()));
  }
  const std::uint64_t last = si->State.Msgs == 0 ? 0 : si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  if (last == 0) return {};
  natsMsg* m = nullptr;
  s = js_GetMsg(&m, c.js(), stream.c_str(), last, nullptr, &code);
  if (s != NATS_OK) {
    throw GatewayError(js_error_text(fmt::format("stream '{}': message {}", stream, last), s, code, c.last_async_error()));
  }
  const char* id = nullptr;
  natsMsgHeader_Get(m, "Nats-Msg-Id", &id);
  std::string out = id != nullptr ? std::string(id).substr(0, 512) : std::string();
  natsMsg_Destroy(m);
  return out;
}

// The last message on the subject and what it says. Throws GatewayError if
// the stream cannot be asked or the message is not ours.
Resume find_resume(const Connection& c, const std::string& stream, const std::string& subject,
                   const std::string& identity) {
  Resume r;
  r.last_id = stream_last_id(c, stream);
  natsMsg* last = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetLastMsg(&last, c.js(), stream.c_str(), subject.c_str(), nullptr, &code);
  if (s == NATS_NOT_FOUND && code != JSStreamNotFoundErr) return r;  // nothing on the subject yet
  if (s != NATS_OK) {
    throw GatewayError(js_error_text(fmt::format("stream '{}': last message on '{}'", stream, subject), s, code,
                                     c.last_async_error()));
  }
  const char* seq_value = nullptr;
  const char* bus_value = nullptr;
  natsMsgHeader_Get(last, kSeqHeader, &seq_value);
  natsMsgHeader_Get(last, kBusHeader, &bus_value);
  const std::optional<std::uint64_t> seq = parse_seq(seq_value);
  const std::string bus = bus_value != nullptr ? std::string(bus_value).substr(0, 256) : std::string();
  const char* records_header = nullptr;
  natsMsgHeader_Get(last, kRecordsHeader, &records_header);
  const std::string records_text = records_header != nullptr ? std::string(records_header).substr(0, 32) : std::string();
  const char* records_value = records_header != nullptr ? records_text.c_str() : nullptr;
  natsMsg_Destroy(last);
  if (!seq || bus.empty()) {
    throw GatewayError(fmt::format(
        "stream '{}': the last message on '{}' has no valid {}/{} headers: it was not published by "
        "shmbus-nats out; give this bus a subject of its own (--subject)",
        stream, subject, kSeqHeader, kBusHeader));
  }
  if (bus != identity) {
    r.other_bus = bus;
    return r;
  }
  // The next message is after the last one's records (one unless it says more).
  const std::optional<std::uint64_t> records = parse_seq(records_value);
  if (records_value != nullptr && (!records || *records == 0 || *records > (std::uint64_t{1} << 31))) {
    throw GatewayError(fmt::format("stream '{}': impossible {} '{}' on the last message on '{}'", stream,
                                   kRecordsHeader, std::string(records_value).substr(0, 32), subject));
  }
  const std::uint64_t k = records.value_or(1);
  if (*seq > UINT64_MAX - k) throw GatewayError(fmt::format("stream '{}': impossible {} {}", stream, kSeqHeader, *seq));
  r.found = true;
  r.seq = *seq + k;
  return r;
}

// The bytes the headers of one message take on the wire: "NATS/1.0\r\n",
// "Key: value\r\n" for each (Shmbus-Seq, -Time, -Bus, -Records, Nats-Msg-Id,
// Nats-Expected-Last-Msg-Id, each value at most its given length) and the
// blank line, rounded up generously.
std::uint64_t headers_size(std::size_t identity, std::size_t msg_id, std::size_t prev_id) {
  const std::uint64_t fixed = 10 + 2;
  const std::uint64_t each = 4;
  return fixed + (std::string_view(kSeqHeader).size() + 20 + each) + (std::string_view(kTimeHeader).size() + 20 + each) +
         (std::string_view(kBusHeader).size() + identity + each) + (std::string_view(kRecordsHeader).size() + 20 + each) +
         (11 + msg_id + each) + (25 + prev_id + each) + 64;
}

void create_stream_if_missing(const Connection& c, const std::string& stream, const std::string& subject) {
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, c.js(), stream.c_str(), nullptr, &code);
  if (si != nullptr) jsStreamInfo_Destroy(si);
  if (s == NATS_OK) return;
  if (code != JSStreamNotFoundErr) {
    throw GatewayError(js_error_text(fmt::format("stream '{}'", stream), s, code, c.last_async_error()));
  }
  s = add_file_stream(c.js(), stream, subject, code);
  if (s != NATS_OK) {
    throw GatewayError(js_error_text(fmt::format("creating stream '{}'", stream), s, code, c.last_async_error()));
  }
}

// One run of `out` on an open bus and a checked stream: where to start, the
// publish loop with its resyncs, and the final report. Holds the reader, the
// counters and the Nats-Msg-Id chain the steps share.
class OutRun {
 public:
  OutRun(const OutOptions& o, const std::function<bool()>& stop, const std::function<void(const OutStats&)>& progress,
         const std::string& subject, const Bus& bus, AckState& acks, Connection& conn)
      : o_(o), stop_(stop), progress_(progress), subject_(subject), bus_(bus),
        identity_(bus_identity(bus.name(), bus.info().creation_time_ns)), acks_(acks), conn_(conn) {
    jsPubOptions_Init(&po_);
    po_.MaxWait = o.ack_timeout_ms;
    msg_id_ = identity_ + "#";
    id_prefix_ = msg_id_.size();
    msg_id_.reserve(id_prefix_ + 24);
  }

  OutStats run() {
    start();
    finish(publish_until_done());
    return st_;
  }

 private:
  const OutStats& snapshot();
  Resume locate();
  Consumer attach(std::uint64_t seq, bool found);
  void reattach();
  void start();
  bool drain(bool for_stop);
  void take_failure();
  void relocate();
  void resync();
  bool settled();
  bool publish_until_done();
  void publish(std::span<const Message> got);
  bool fits(const Message& m, std::uint64_t max_payload);
  natsMsg* build(const Message& m);
  bool send(const Message& m);
  void finish(bool ended);

  const OutOptions& o_;
  const std::function<bool()>& stop_;
  const std::function<void(const OutStats&)>& progress_;
  const std::string& subject_;
  const Bus& bus_;
  const std::string identity_;
  AckState& acks_;
  Connection& conn_;
  OutStats st_;
  const Clock::time_point started_ = Clock::now();
  Resume where_;                      // the stream's end, as last looked up
  std::optional<Consumer> consumer_;  // attached by start()
  std::uint64_t attached_at_ = 0;     // where the reader was last attached
  jsPubOptions po_;
  std::string msg_id_;                // identity '#' sequence of the message being published
  std::size_t id_prefix_ = 0;
  // Each publish expects the previous one to be the stream's last message
  // (Nats-Expected-Last-Msg-Id): if a publish is lost (a connection dropped
  // with it in flight) every later one is refused, never stored after a
  // hole; the resync then starts again from the stream's real end.
  std::string prev_id_;
  std::array<char, 24> seq_text_{};
  std::array<char, 24> time_text_{};
  std::array<char, 24> records_text_{};
  std::array<Message, 256> batch_{};
};

const OutStats& OutRun::snapshot() {
  st_.acknowledged = acks_.acked.load(std::memory_order_relaxed);
  st_.duplicates = acks_.duplicates.load(std::memory_order_relaxed);
  st_.failed = acks_.failed.load(std::memory_order_relaxed);
  const std::uint64_t answered = st_.acknowledged + st_.failed;
  st_.in_flight = st_.published > answered ? st_.published - answered : 0;
  st_.reconnects = conn_.reconnects();
  st_.connected = conn_.connected();
  st_.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  return st_;
}

// The stream's end, with a notice when its last message came from another bus.
Resume OutRun::locate() {
  const Resume r = find_resume(conn_, o_.stream, subject_, identity_);
  if (!r.other_bus.empty()) {
    tools::print_notice("shmbus-nats", fmt::format("the last message on '{}' came from bus {}, not {}; starting at "
                                                   "the earliest record",
                                                   subject_, r.other_bus, identity_));
  }
  return r;
}

// A consumer positioned at `seq`, or at the oldest record if `seq` is gone.
Consumer OutRun::attach(std::uint64_t seq, bool found) {
  ConsumerOptions co;
  co.name = "nats-out";
  if (!found) {
    co.start = Start::earliest;
    return Consumer(bus_, co);
  }
  co.start = Start::sequence;
  co.start_seq = seq;
  try {
    return Consumer(bus_, co);
  } catch (const Error& e) {
    if (e.errc() != Errc::not_retained) throw;
    if (seq > bus_.head()) {
      throw GatewayError(fmt::format(
          "bus '{}': the stream already holds sequence {} but the bus has only reached {}", o_.bus, seq - 1,
          bus_.head()));
    }
  }
  // The oldest record may lie inside a message whose start is gone: the
  // reader lands on the next whole message, and everything before it is
  // lost (what a reader of the stream will see as the jump in Shmbus-Seq).
  co.start = Start::earliest;
  Consumer c(bus_, co);
  const std::uint64_t at = c.cursor();
  const std::uint64_t gone = at > seq ? at - seq : 0;
  st_.lost += gone;
  tools::print_notice("shmbus-nats",
                      fmt::format("bus '{}': sequences {}..{} are no longer retained; {} lost, resuming at {}",
                                  o_.bus, seq, at - 1, gone, at));
  return c;
}

// The reader at the stream's end (where_), the next publish chained to the
// stream's last message. What the stream has not acknowledged stays in the
// ring (a `block` producer waits for it, as for any lossless reader): a
// publish refused or lost with a server restart is republished from the bus.
void OutRun::reattach() {
  consumer_ = attach(where_.seq, where_.found);
  st_.next_seq = consumer_->cursor();
  attached_at_ = consumer_->cursor();
  consumer_->retain_from(attached_at_);
  prev_id_.assign(where_.last_id);
}

void OutRun::start() {
  where_ = retry_transient([this] { return locate(); }, stop_);
  reattach();
  st_.first_seq = st_.next_seq;
  prev_id_.reserve(std::max<std::size_t>(prev_id_.size(), id_prefix_ + 24));
}

// Waits until every publish in flight is answered (or the user insists).
// Stopped by a signal, briefly: whatever is left unanswered is still in
// the bus, and the next `out` republishes it (the stream drops what it
// already holds by Nats-Msg-Id).
bool OutRun::drain(bool for_stop) {
  jsPubOptions wait;
  jsPubOptions_Init(&wait);
  wait.MaxWait = for_stop && stop_() ? 50 : 200;
  const auto limit = Clock::now() + (for_stop && stop_() ? std::chrono::milliseconds(100)
                                                         : std::chrono::milliseconds(o_.ack_timeout_ms * 2 + 1000));
  while (true) {
    const natsStatus s = js_PublishAsyncComplete(conn_.js(), &wait);
    if (s == NATS_OK) return true;
    if (s != NATS_TIMEOUT) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // not connected
    if (for_stop && Clock::now() > limit) return false;
    if (!for_stop && stop_()) return false;
  }
}

// The failure that called for a resync: fatal if the stream is gone,
// otherwise told and forgotten.
void OutRun::take_failure() {
  std::lock_guard lock(acks_.mutex);
  if (acks_.fatal) throw GatewayError(fmt::format("stream '{}': publish refused: {}", o_.stream, acks_.first_error));
  tools::print_notice("shmbus-nats", fmt::format("publish failed ({}); resuming after the stream's last message",
                                                 acks_.first_error));
  acks_.first_error.clear();
}

// Looks the stream's end up again into where_; returns once found, or stopped.
void OutRun::relocate() {
  // The server may still be loading the stream: retry the lookup with backoff.
  std::chrono::milliseconds backoff{50};
  while (!stop_()) {
    if (!conn_.connected()) {  // a JetStream request now would wait out its whole timeout
      pause_unless(stop_, std::chrono::milliseconds(50));
      continue;
    }
    try {
      where_ = locate();
      return;
    } catch (const GatewayError& e) {
      const std::string what = e.what();
      if (what.find("not found") != std::string::npos || what.find("permission") != std::string::npos) throw;
      pause_unless(stop_, backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
  }
}

// After a failed publish: wait for the rest, find where the stream ends, go on from there.
void OutRun::resync() {
  drain(false);
  take_failure();
  acks_.resync.store(false, std::memory_order_relaxed);
  relocate();
  if (stop_()) return;
  reattach();
  ++st_.resyncs;
}

// Done only when the stream has answered every publish with success: a
// publish that failed at the end (a server restarting under the last
// batch) is republished after a resync, never left for a restart. False
// while a resync is due; true if told to stop.
bool OutRun::settled() {
  if (acks_.resync.load(std::memory_order_relaxed)) return false;
  if (!drain(false)) return true;
  return !acks_.resync.load(std::memory_order_relaxed);
}

// Reads the bus and publishes until the count, the bus's end (unless
// follow), the idle timeout or a stop. True when it ended with every
// publish answered (count, the bus's end).
bool OutRun::publish_until_done() {
  Every sampling(kSampleEvery, true);
  Every reporting(o_.stats_interval, false);
  auto last_data = Clock::now();
  while (!stop_()) {
    if (o_.sample && sampling.due()) o_.sample(snapshot());
    if (acks_.resync.load(std::memory_order_relaxed)) {
      resync();
      continue;
    }
    // Messages the stream holds from this run on (a resync moves next_seq
    // back to the stream's real end, so a failed publish is not counted).
    const std::uint64_t done = st_.next_seq > st_.first_seq ? st_.next_seq - st_.first_seq : 0;
    if (o_.count != 0 && done >= o_.count) {
      if (!settled()) continue;  // resync, then republish what failed
      if (stop_()) break;
      st_.end = "count";
      return true;
    }
    consumer_->retain_from(std::max(attached_at_, acks_.acked_to.load(std::memory_order_relaxed)));
    PollResult pr;
    std::size_t want = batch_.size();
    if (o_.count != 0) want = static_cast<std::size_t>(std::min<std::uint64_t>(want, o_.count - done));
    const auto got = consumer_->read_batch(std::span<Message>(batch_.data(), want), pr, std::chrono::milliseconds(100));
    st_.lost += pr.lost;
    publish(got);
    if (!got.empty()) last_data = Clock::now();
    if (pr.end_of_stream && !o_.follow) {
      if (!settled()) continue;
      if (stop_()) break;
      st_.end = to_string(pr.end_reason);
      return true;
    }
    if (o_.idle_timeout.count() > 0 && got.empty() && Clock::now() - last_data > o_.idle_timeout) {
      st_.end = "idle";
      break;
    }
    if (reporting.due()) progress_(snapshot());
  }
  return false;
}

// Publishes what was read, in order, up to the first message that cannot
// go now (a resync is due first, or a stop).
void OutRun::publish(std::span<const Message> got) {
  // The largest message (payload and headers) the server takes: its
  // max_payload, as it announced it when (re)connecting.
  const std::uint64_t max_payload =
      static_cast<std::uint64_t>(std::max<std::int64_t>(natsConnection_GetMaxPayload(conn_.nc()), 0));
  st_.max_payload = max_payload;
  for (const Message& m : got) {
    if (!fits(m, max_payload)) break;
    if (!send(m)) break;  // the rest of the batch is republished after the resync
    ++st_.published;
    st_.bytes += m.payload.size();
    st_.next_seq = m.seq + m.records;
    prev_id_.assign(msg_id_);
  }
}

// The server refuses a message (payload and headers) above its
// max_payload. Nothing is lost silently: `out` stops before it with
// everything earlier acknowledged, and a restart resumes at it. False while
// that cannot be said yet (a resync is due first, or a stop).
bool OutRun::fits(const Message& m, std::uint64_t max_payload) {
  const std::uint64_t header_bytes = headers_size(identity_.size(), msg_id_.size() + 20, prev_id_.size());
  st_.largest = std::max<std::uint64_t>(st_.largest, m.payload.size() + header_bytes);
  if (max_payload == 0 || m.payload.size() + header_bytes <= max_payload) return true;  // 0: not connected now
  if (!settled()) return false;  // a failed publish before it: resync first, then meet it again
  if (stop_()) return false;
  throw GatewayError(fmt::format(
      "bus '{}': message {} has {} bytes, which with the gateway's {} bytes of headers is more than the "
      "NATS server's max_payload of {}: raise max_payload in the nats-server configuration, or publish "
      "smaller messages; everything before it is in stream '{}', and `out` resumes at it",
      o_.bus, m.seq, m.payload.size(), header_bytes, max_payload, o_.stream));
}

// The message with its headers (headers.hpp); msg_id_ becomes its Nats-Msg-Id.
natsMsg* OutRun::build(const Message& m) {
  natsMsg* msg = nullptr;
  natsStatus s = natsMsg_Create(&msg, subject_.c_str(), nullptr, reinterpret_cast<const char*>(m.payload.data()),
                                static_cast<int>(m.payload.size()));
  format_u64(seq_text_.data(), m.seq);
  format_u64(time_text_.data(), m.timestamp_ns);
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, kSeqHeader, seq_text_.data());
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, kTimeHeader, time_text_.data());
  if (s == NATS_OK) s = natsMsgHeader_Set(msg, kBusHeader, identity_.c_str());
  if (s == NATS_OK && m.records > 1) {
    format_u64(records_text_.data(), m.records);
    s = natsMsgHeader_Set(msg, kRecordsHeader, records_text_.data());
  }
  if (s != NATS_OK) {
    natsMsg_Destroy(msg);
    throw GatewayError(fmt::format("cannot build a message: {}", status_text(s)));
  }
  msg_id_.resize(id_prefix_);
  msg_id_.append(seq_text_.data());
  return msg;
}

// Hands one message to the client, chained to the previous one. False if
// the client did not take it: a resync is then due.
bool OutRun::send(const Message& m) {
  natsMsg* msg = build(m);
  po_.MsgId = msg_id_.c_str();
  po_.ExpectLastMsgId = prev_id_.empty() ? nullptr : prev_id_.c_str();
  // With max_in_flight publishes unanswered the client stalls up to its
  // StallWait and reports a timeout: wait on, unless told to stop.
  natsStatus s = NATS_OK;
  while (true) {
    s = js_PublishMsgAsync(conn_.js(), &msg, &po_);
    if (s == NATS_OK) {
      conn_.published_async();
      break;
    }
    if (s == NATS_TIMEOUT && !stop_() && !acks_.resync.load(std::memory_order_relaxed)) continue;
    break;
  }
  if (s == NATS_OK) return true;
  // The connection dropped (I/O error, reconnecting) or the client is
  // stalled: whatever happens to the publishes in flight, the resync
  // starts again from the stream's real end.
  natsMsg_Destroy(msg);
  {
    std::lock_guard lock(acks_.mutex);
    if (acks_.first_error.empty()) acks_.first_error = status_text(s);
  }
  acks_.resync.store(true, std::memory_order_relaxed);
  return false;
}

// Why it stopped, the last answers (waited for briefly after a stop), and
// a notice of what is left unanswered.
void OutRun::finish(bool ended) {
  if (st_.end.empty()) st_.end = "signal";
  if (!ended) drain(true);
  // Answers that arrived after the last drain are counted too.
  snapshot();
  if (st_.in_flight > 0 || acks_.resync.load(std::memory_order_relaxed)) {
    std::lock_guard lock(acks_.mutex);
    if (st_.in_flight > 0 || !acks_.first_error.empty()) {
      tools::print_notice(
          "shmbus-nats",
          fmt::format("{} publishes unanswered and {} failed at the end{}; the next `out` republishes them from the "
                      "bus (the stream keeps one of each)",
                      st_.in_flight, st_.failed, acks_.first_error.empty() ? "" : " (" + acks_.first_error + ")"));
    }
  }
}

}  // namespace

OutStats run_out(const OutOptions& o, const std::function<bool()>& stop,
                 const std::function<void(const OutStats&)>& progress) {
  const std::string subject = o.subject.empty() ? default_subject(o.bus) : o.subject;
  OpenOptions oo;
  oo.trust = o.trust;
  Bus bus = Bus::open(o.bus, oo);

  AckState acks;
  Connection conn(o.connect, o.max_in_flight, &on_ack, &acks);
  if (o.create_stream) retry_transient([&] { create_stream_if_missing(conn, o.stream, subject); }, stop);
  retry_transient([&] { conn.check_stream(o.stream, "give --create-stream to create it"); }, stop);

  OutRun run(o, stop, progress, subject, bus, acks, conn);
  return run.run();
}

}  // namespace shmbus::nats
