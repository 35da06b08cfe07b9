#include "nats/in.hpp"

#include <fmt/format.h>
#include <shmbus/producer.hpp>

#include <optional>
#include <functional>
#include <thread>
#include <vector>

#include "nats/headers.hpp"
#include "tools/common/program.hpp"

namespace shmbus::nats {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kSampleEvery{50};  // at most this often to InOptions::sample
constexpr std::int64_t kFetchWaitMs = 1000;  // a pull request's expiry

// A durable pull consumer read with pull requests of our own: a plain
// subscription on a fresh inbox, one request at a time to
// $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable> ({"batch": N, "expires": ns},
// replying to the inbox). Every data message that reaches the inbox is a
// delivery, whichever request it answered, so one that arrives after its
// request expired is simply taken by the next fetch; a header-only status
// message (404 no messages, 408 request expired, 409 and the like) ends a
// request. The client's own fetch (natsSubscription_Fetch, libnats 3.4.1)
// is not used: a fetch that timed out while messages were still arriving
// left them queued, and the next one returned more than it had room for.
class PullConsumer {
 public:
  PullConsumer(const Connection& c, const InOptions& o)
      : c_(c), o_(o), next_subject_(fmt::format("$JS.API.CONSUMER.MSG.NEXT.{}.{}", o.stream, o.durable)) {}
  ~PullConsumer() {
    reset();
    if (c_.connected()) natsConnection_FlushTimeout(c_.nc(), 200);  // the server has seen every unsubscribe
    for (natsSubscription* s : retired_) natsSubscription_Destroy(s);
  }
  PullConsumer(const PullConsumer&) = delete;
  PullConsumer& operator=(const PullConsumer&) = delete;

  // Unsubscribes the inbox now and destroys the subscription only with the
  // consumer: the client's reader thread may be delivering to it at this
  // moment (libnats 3.4.1 looks a subscription up, then locks it), and a
  // subscription destroyed under that delivery crashed `in` when a rewind
  // met a server restart. One retired subscription per rewind.
  void reset() noexcept {
    if (sub_ == nullptr) return;
    natsSubscription_Unsubscribe(sub_);
    retired_.push_back(sub_);
    sub_ = nullptr;
  }

  // The stream sequence after the durable's acknowledged floor (1 if it
  // does not exist yet). Throws GatewayError.
  std::uint64_t floor_next() const {
    jsConsumerInfo* ci = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus s = js_GetConsumerInfo(&ci, c_.js(), o_.stream.c_str(), o_.durable.c_str(), nullptr, &code);
    if (s == NATS_NOT_FOUND && code == JSConsumerNotFoundErr) return 1;
    if (s != NATS_OK) {
      throw GatewayError(js_error_text(fmt::format("stream '{}' consumer '{}'", o_.stream, o_.durable), s, code,
                                       c_.last_async_error()));
    }
    const std::uint64_t next = ci->AckFloor.Stream + 1;
    jsConsumerInfo_Destroy(ci);
    return next;
  }

  // (Re)creates the durable so that it delivers from stream sequence
  // `from`, on a fresh inbox (nothing meant for the old one is read).
  void subscribe_from(std::uint64_t from) {
    reset();
    const std::string what = fmt::format("stream '{}' consumer '{}'", o_.stream, o_.durable);
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus s = js_DeleteConsumer(c_.js(), o_.stream.c_str(), o_.durable.c_str(), nullptr, &code);
    if (s != NATS_OK && !(s == NATS_NOT_FOUND && code == JSConsumerNotFoundErr)) {
      throw GatewayError(js_error_text(what, s, code, c_.last_async_error()));
    }
    jsConsumerConfig cfg;
    jsConsumerConfig_Init(&cfg);
    cfg.Durable = o_.durable.c_str();
    cfg.AckPolicy = js_AckAll;
    cfg.AckWait = o_.ack_wait_ms * 1'000'000;
    cfg.MaxAckPending = 1 << 20;
    cfg.DeliverPolicy = from <= 1 ? js_DeliverAll : js_DeliverByStartSequence;
    cfg.OptStartSeq = from <= 1 ? 0 : from;
    if (!o_.subject.empty()) cfg.FilterSubject = o_.subject.c_str();
    jsConsumerInfo* ci = nullptr;
    code = static_cast<jsErrCode>(0);
    s = js_AddConsumer(&ci, c_.js(), o_.stream.c_str(), &cfg, nullptr, &code);
    if (ci != nullptr) jsConsumerInfo_Destroy(ci);
    if (s != NATS_OK) throw GatewayError(js_error_text(what, s, code, c_.last_async_error()));
    natsInbox* inbox = nullptr;
    if ((s = natsInbox_Create(&inbox)) != NATS_OK) throw GatewayError(fmt::format("{}: {}", what, status_text(s)));
    inbox_ = inbox;
    natsInbox_Destroy(inbox);
    s = natsConnection_SubscribeSync(&sub_, c_.nc(), inbox_.c_str());
    if (s != NATS_OK) {
      sub_ = nullptr;
      throw GatewayError(js_error_text(what, s, code, c_.last_async_error()));
    }
    // Deliveries are taken as fast as the bus takes them: no client-side limit.
    natsSubscription_SetPendingLimits(sub_, -1, -1);
  }

  enum class Fetch : std::uint8_t {
    done,    // the request ended (filled, expired, no messages) or its wait ran out
    rewind,  // the consumer is gone or changed: recreate it from the last committed
    failed,  // the request could not be sent (not connected)
  };

  // Asks for up to `batch` messages and appends what arrives within the
  // request's expiry to `out` (which owns them). Untrusted: a message
  // without a reply subject or a Status header is a delivery only if its
  // reply subject parses (the caller checks it); anything else is dropped.
  // Ends early, with what arrived, once `stop()` says so (within 100 ms).
  Fetch fetch(std::vector<natsMsg*>& out, int batch, natsStatus& error, const std::function<bool()>& stop) {
    const std::string body =
        fmt::format(R"({{"batch":{},"expires":{}}})", batch, kFetchWaitMs * 1'000'000);
    error = natsConnection_PublishRequest(c_.nc(), next_subject_.c_str(), inbox_.c_str(), body.data(),
                                          static_cast<int>(body.size()));
    if (error != NATS_OK) return Fetch::failed;
    // The server ends the request by its expiry; a margin covers the trip.
    const auto deadline = Clock::now() + std::chrono::milliseconds(kFetchWaitMs + 500);
    while (static_cast<int>(out.size()) < batch) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || stop()) return Fetch::done;
      natsMsg* m = nullptr;
      const natsStatus s = natsSubscription_NextMsg(&m, sub_, std::min<std::int64_t>(left, 100));
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) {
        error = s;
        return Fetch::failed;
      }
      const char* reply = natsMsg_GetReply(m);
      if (reply != nullptr && *reply != '\0') {
        out.push_back(m);
        continue;
      }
      // A status message: "404"/"408" end this request; "409" (consumer
      // deleted, leadership change, too many requests) and "503" (no
      // responders: the consumer is gone) call for a fresh consumer.
      const char* status = nullptr;
      natsMsgHeader_Get(m, "Status", &status);
      const std::string code = status != nullptr ? std::string(status).substr(0, 3) : std::string();
      natsMsg_Destroy(m);
      if (code == "404" || code == "408") return Fetch::done;
      if (code == "409" || code == "503") return Fetch::rewind;
      // Neither a delivery nor a status we know: ignored.
    }
    return Fetch::done;
  }

 private:
  const Connection& c_;
  const InOptions& o_;
  std::string next_subject_;
  std::string inbox_;
  natsSubscription* sub_ = nullptr;
  std::vector<natsSubscription*> retired_;  // unsubscribed, destroyed with the consumer (reset())
};

// Destroys the fetched messages however the batch ends.
struct FetchedBatch {
  std::vector<natsMsg*> msgs;
  ~FetchedBatch() { clear(); }
  void clear() noexcept {
    for (natsMsg* m : msgs) natsMsg_Destroy(m);
    msgs.clear();
  }
};

bool fatal_text(const std::string& what) { return is_fatal(GatewayError(what)); }

// The bus's producer role is given up without marking end-of-stream however
// `in` ends: the source has not ended, readers wait for the next `in`.
struct DetachOnExit {
  Producer& p;
  ~DetachOnExit() { p.detach(); }
};

// One run of `in` on an open bus and a subscribed durable: the fetch loop
// with its rewinds, each batch committed to the bus and then acknowledged,
// and the last acks flushed. Holds the counters, the rewind point and the
// backoff the steps share.
class InRun {
 public:
  InRun(const InOptions& o, const std::function<bool()>& stop, const std::function<void(const InStats&)>& progress,
        const Bus& bus, Producer& producer, const Connection& conn, PullConsumer& pull)
      : o_(o), stop_(stop), progress_(progress), bus_(bus), producer_(producer), conn_(conn), pull_(pull),
        max_message_(bus.info().max_message), record_size_(bus.info().record_size), capacity_(bus.info().capacity),
        seen_reconnects_(conn.reconnects()) {
    st_.max_message = max_message_;
  }

  InStats run() {
    fetch_until_done();
    if (st_.end.empty()) st_.end = "signal";
    // The last acks, while the server is there to take them: one that never
    // arrives only brings its messages again, which the next `in` skips as
    // already on the bus.
    if (conn_.connected()) natsConnection_FlushTimeout(conn_.nc(), 200);
    return snapshot();
  }

 private:
  const InStats& snapshot();
  void back_off();
  bool rewind();
  void fetch_failed(natsStatus error);
  void fetch_until_done();
  bool commit_batch();
  std::optional<AckInfo> delivery(natsMsg* m);
  bool commit(natsMsg* m);
  std::uint64_t placement(natsMsg* m, std::uint64_t seq, int len, std::uint64_t next);
  bool skip_to(std::uint64_t seq, std::uint64_t next);
  bool publish(natsMsg* m, std::uint64_t seq, int len);

  const InOptions& o_;
  const std::function<bool()>& stop_;
  const std::function<void(const InStats&)>& progress_;
  const Bus& bus_;
  Producer& producer_;
  const Connection& conn_;
  PullConsumer& pull_;
  const std::uint32_t max_message_;
  const std::uint32_t record_size_;
  const std::uint64_t capacity_;
  InStats st_;
  const Clock::time_point started_ = Clock::now();
  std::uint64_t seen_reconnects_;
  std::uint64_t last_committed_sseq_ = 0;  // stream sequence of the last message dealt with
  bool warned_invalid_ = false;
  std::chrono::milliseconds backoff_{50};
  bool need_rewind_ = false;
  FetchedBatch fetched_;
};

const InStats& InRun::snapshot() {
  st_.next_seq = producer_.next_seq();
  st_.reconnects = conn_.reconnects();
  st_.connected = conn_.connected();
  st_.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
  return st_;
}

// Waits the current backoff (less if stopped), then doubles it up to 2 s.
void InRun::back_off() {
  pause_unless(stop_, backoff_);
  backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(2000));
}

// Recreates the durable after the last message committed (at its
// acknowledged floor if none yet). False while the server is not back.
bool InRun::rewind() {
  if (!conn_.connected()) {  // a JetStream request now would wait out its whole timeout
    pause_unless(stop_, std::chrono::milliseconds(50));
    return false;
  }
  try {
    const std::uint64_t from = last_committed_sseq_ != 0 ? last_committed_sseq_ + 1 : pull_.floor_next();
    seen_reconnects_ = conn_.reconnects();
    pull_.subscribe_from(from);
    need_rewind_ = false;
    ++st_.rewinds;
    backoff_ = std::chrono::milliseconds(50);
    return true;
  } catch (const GatewayError& e) {
    if (fatal_text(e.what())) throw;
    back_off();  // the server is still coming back
    return false;
  }
}

// A pull request that could not be sent or read: fatal, or a rewind after a backoff.
void InRun::fetch_failed(natsStatus error) {
  const std::string what = fmt::format("fetch from consumer '{}': {}", o_.durable, status_text(error));
  if (fatal_text(what) && conn_.connected()) throw GatewayError(what);
  need_rewind_ = true;  // whatever was in flight comes again
  back_off();
}

// Fetches and commits until the count, the idle timeout or a stop.
void InRun::fetch_until_done() {
  Every sampling(kSampleEvery, true);
  Every reporting(o_.stats_interval, false);
  auto last_data = Clock::now();
  while (!stop_()) {
    if (o_.sample && sampling.due()) o_.sample(snapshot());
    if (o_.count != 0 && st_.published >= o_.count) {
      st_.end = "count";
      break;
    }
    if (conn_.reconnects() != seen_reconnects_) need_rewind_ = true;
    if (need_rewind_ && !rewind()) continue;
    fetched_.clear();
    natsStatus error = NATS_OK;
    const PullConsumer::Fetch f = pull_.fetch(fetched_.msgs, o_.batch, error, stop_);
    if (f == PullConsumer::Fetch::rewind) need_rewind_ = true;
    if (f == PullConsumer::Fetch::failed) {
      fetch_failed(error);
      continue;
    }
    if (fetched_.msgs.empty()) {
      if (o_.idle_timeout.count() > 0 && Clock::now() - last_data > o_.idle_timeout) {
        st_.end = "idle";
        break;
      }
    } else {
      last_data = Clock::now();
      const bool stopped = !commit_batch();
      fetched_.clear();
      backoff_ = std::chrono::milliseconds(50);
      if (stopped) break;
    }
    if (reporting.due()) progress_(snapshot());
  }
}

// Commits the fetched deliveries to the bus in order, then acknowledges
// them with one ack. False if stopped while the bus was full.
bool InRun::commit_batch() {
  natsMsg* last_msg = nullptr;  // the last message committed or skipped
  std::uint64_t handled = 0;
  bool stopped = false;
  for (natsMsg* m : fetched_.msgs) {
    ++st_.received;
    const std::optional<AckInfo> ai = delivery(m);
    if (!ai) continue;
    if (!commit(m)) {
      stopped = true;
      break;
    }
    last_msg = m;
    ++handled;
    last_committed_sseq_ = ai->stream_seq;
  }
  // Everything up to the last message is committed (or skipped): one
  // ack covers it all (AckAll), sent to the delivery's reply subject.
  if (last_msg != nullptr) {
    const char* reply = natsMsg_GetReply(last_msg);
    // Only deliveries of our consumer are ever handled (checked above).
    if (reply != nullptr &&
        natsConnection_PublishString(conn_.nc(), reply, "+ACK") == NATS_OK) {
      st_.acknowledged += handled;
    }
  }
  return !stopped;
}

// What the reply subject of `m` says, if it is a delivery of our consumer.
// Anything else (anyone may publish to an inbox) is counted invalid and
// neither published nor acknowledged.
std::optional<AckInfo> InRun::delivery(natsMsg* m) {
  const char* reply = natsMsg_GetReply(m);
  const std::optional<AckInfo> ai = parse_ack_subject(reply != nullptr ? reply : "");
  if (!ai || ai->stream != o_.stream || ai->consumer != o_.durable) {
    ++st_.invalid;
    return std::nullopt;
  }
  if (ai->delivered > 1) ++st_.redelivered;
  st_.pending = ai->pending;
  return ai;
}

// Publishes one delivery under its Shmbus-Seq, or skips it (no valid
// header, or already on the bus). False if stopped while the bus was full.
bool InRun::commit(natsMsg* m) {
  const char* seq_value = nullptr;
  natsMsgHeader_Get(m, kSeqHeader, &seq_value);
  const std::optional<std::uint64_t> seq = parse_seq(seq_value);
  if (!seq) {
    ++st_.invalid;
    if (!warned_invalid_) {
      warned_invalid_ = true;
      tools::print_notice("shmbus-nats",
                          fmt::format("stream '{}': a message on '{}' has no valid {} header; skipped "
                                      "(counted as invalid)",
                                      o_.stream, natsMsg_GetSubject(m), kSeqHeader));
    }
    return true;
  }
  const std::uint64_t next = producer_.next_seq();
  if (*seq < next) {
    ++st_.skipped_duplicates;
    return true;
  }
  const int len = natsMsg_GetDataLength(m);
  const std::uint64_t at = placement(m, *seq, len, next);
  if (*seq > at && !skip_to(*seq, next)) return false;
  return publish(m, *seq, len);
}

// Where the producer puts message `seq` of `len` bytes, after checking that
// the bus takes it there under that sequence (GatewayError otherwise).
std::uint64_t InRun::placement(natsMsg* m, std::uint64_t seq, int len, std::uint64_t next) {
  if (len > 0) st_.largest = std::max<std::uint64_t>(st_.largest, static_cast<std::uint64_t>(len));
  if (len < 0 || static_cast<std::uint32_t>(len) > max_message_) {
    throw GatewayError(fmt::format("bus '{}': message {} has {} bytes, more than the {} the bus accepts "
                                   "(capacity {}, records of {} bytes): recreate it with a larger capacity",
                                   o_.bus, seq, len, max_message_, capacity_, record_size_));
  }
  // Sequence numbers count records: the message takes `k` here and
  // took Shmbus-Records (1 if absent) on the source. It goes where
  // the producer puts it: at its next sequence, or at the start of
  // the next lap if it would cross the ring's end.
  const char* records_value = nullptr;
  natsMsgHeader_Get(m, kRecordsHeader, &records_value);
  const std::optional<std::uint64_t> source_records = records_value != nullptr ? parse_seq(records_value)
                                                                               : std::optional<std::uint64_t>(1);
  if (!source_records || *source_records == 0 || *source_records > (std::uint64_t{1} << 31)) {
    throw GatewayError(fmt::format("stream '{}': message {} has an impossible {} header", o_.stream, seq,
                                   kRecordsHeader));
  }
  const std::uint64_t k = records_for(static_cast<std::uint64_t>(len), record_size_);
  if (k > *source_records) {
    // The message after it would land inside it here.
    throw GatewayError(fmt::format(
        "bus '{}': message {} ({} bytes) takes {} records of {} bytes here, {} on the source bus: "
        "sequence numbers count records, so the bus needs records at least as large as the source's",
        o_.bus, seq, len, k, record_size_, *source_records));
  }
  const std::uint64_t at = shmbus::place(next, k, capacity_);
  if (seq < at || (seq > at && shmbus::place(seq, k, capacity_) != seq)) {
    throw GatewayError(fmt::format(
        "bus '{}': message {} ({} bytes, {} records) cannot keep its sequence here: the ring (capacity {}) "
        "would put it at {}, its laps ending elsewhere than the source's; recreate the bus with the source "
        "bus's capacity",
        o_.bus, seq, len, k, capacity_, seq < at ? at : shmbus::place(seq, k, capacity_)));
  }
  return at;
}

// Moves the bus on to `seq`, the source's sequence: the skipped ones are a
// gap local readers count as lost (Producer::skip_to): messages not in the
// stream, or padding the source put before a message that spans records
// where this ring's lap does not end. False if stopped while the bus was full.
bool InRun::skip_to(std::uint64_t seq, std::uint64_t next) {
  PublishStatus ps = PublishStatus::timeout;
  while (ps == PublishStatus::timeout && !stop_()) ps = producer_.skip_to(seq, std::chrono::milliseconds(100)).status;
  if (ps == PublishStatus::timeout) return false;  // SIGTERM while the bus was full
  if (ps != PublishStatus::ok) {
    throw GatewayError(fmt::format("bus '{}': cannot move to sequence {}: {}", o_.bus, seq, to_string(ps)));
  }
  if (bus_.head() != 0 || next != 0) st_.gap += seq - next;
  return true;
}

// Publishes the payload of `m`, which lands at `seq`. False if stopped while the bus was full.
bool InRun::publish(natsMsg* m, std::uint64_t seq, int len) {
  const auto payload = std::as_bytes(std::span<const char>(natsMsg_GetData(m), static_cast<std::size_t>(len)));
  PublishResult r{PublishStatus::timeout, 0};
  while (r.status == PublishStatus::timeout && !stop_()) r = producer_.publish(payload, std::chrono::milliseconds(100));
  if (r.status == PublishStatus::timeout) return false;
  if (!r) {
    throw GatewayError(fmt::format("bus '{}': publish: {}", o_.bus, to_string(r.status)));
  }
  if (r.seq != seq) {  // the checks above rule it out; never a message under another sequence unsaid
    throw GatewayError(fmt::format("bus '{}': message {} was published at sequence {}", o_.bus, seq, r.seq));
  }
  ++st_.published;
  st_.bytes += payload.size();
  return true;
}

}  // namespace

InStats run_in(const InOptions& o, const std::function<bool()>& stop,
               const std::function<void(const InStats&)>& progress) {
  BusOptions bo = o.create;
  bo.existing = Existing::as_is;  // an existing bus keeps its own options (docs/nats.md)
  Bus bus = Bus::open_or_create(o.bus, bo);
  Producer producer(bus);  // exclusive; takes over after a crash
  DetachOnExit detach_on_exit{producer};

  Connection conn(o.connect);
  retry_transient(
      [&] { conn.check_stream(o.stream, "`shmbus-nats out --create-stream` or `nats stream add` creates it"); }, stop);
  PullConsumer pull(conn, o);
  retry_transient([&] { pull.subscribe_from(pull.floor_next()); }, stop);

  InRun run(o, stop, progress, bus, producer, conn, pull);
  return run.run();
}

}  // namespace shmbus::nats
