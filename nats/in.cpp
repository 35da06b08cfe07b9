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

}  // namespace

InStats run_in(const InOptions& o, const std::function<bool()>& stop,
               const std::function<void(const InStats&)>& progress) {
  BusOptions bo = o.create;
  bo.existing = Existing::as_is;  // an existing bus keeps its own options (docs/nats.md)
  Bus bus = Bus::open_or_create(o.bus, bo);
  Producer producer(bus);  // exclusive; takes over after a crash
  DetachOnExit detach_on_exit{producer};
  const std::uint32_t max_message = bus.info().max_message;
  const std::uint32_t record_size = bus.info().record_size;
  const std::uint64_t capacity = bus.info().capacity;

  Connection conn(o.connect);
  retry_transient(
      [&] { conn.check_stream(o.stream, "`shmbus-nats out --create-stream` or `nats stream add` creates it"); }, stop);
  PullConsumer pull(conn, o);
  retry_transient([&] { pull.subscribe_from(pull.floor_next()); }, stop);

  InStats st;
  const auto started = Clock::now();
  auto snapshot = [&] {
    st.next_seq = producer.next_seq();
    st.reconnects = conn.reconnects();
    st.connected = conn.connected();
    st.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    return st;
  };

  std::uint64_t seen_reconnects = conn.reconnects();
  std::uint64_t last_committed_sseq = 0;  // stream sequence of the last message dealt with
  bool warned_invalid = false;
  auto last_progress = Clock::now();
  auto last_data = Clock::now();
  std::chrono::milliseconds backoff{50};
  bool need_rewind = false;
  bool stopped = false;
  FetchedBatch fetched;

  st.max_message = max_message;
  auto last_sample = Clock::time_point{};
  while (!stop()) {
    if (o.sample && Clock::now() - last_sample >= kSampleEvery) {
      last_sample = Clock::now();
      o.sample(snapshot());
    }
    if (o.count != 0 && st.published >= o.count) {
      st.end = "count";
      break;
    }
    if (conn.reconnects() != seen_reconnects) need_rewind = true;
    if (need_rewind) {
      if (!conn.connected()) {  // a JetStream request now would wait out its whole timeout
        pause_unless(stop, std::chrono::milliseconds(50));
        continue;
      }
      try {
        const std::uint64_t from = last_committed_sseq != 0 ? last_committed_sseq + 1 : pull.floor_next();
        seen_reconnects = conn.reconnects();
        pull.subscribe_from(from);
        need_rewind = false;
        ++st.rewinds;
        backoff = std::chrono::milliseconds(50);
      } catch (const GatewayError& e) {
        if (fatal_text(e.what())) throw;
        pause_unless(stop, backoff);  // the server is still coming back
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
    }
    fetched.clear();
    natsStatus error = NATS_OK;
    const PullConsumer::Fetch f = pull.fetch(fetched.msgs, o.batch, error, stop);
    if (f == PullConsumer::Fetch::rewind) need_rewind = true;
    if (f == PullConsumer::Fetch::failed) {
      const std::string what = fmt::format("fetch from consumer '{}': {}", o.durable, status_text(error));
      if (fatal_text(what) && conn.connected()) throw GatewayError(what);
      need_rewind = true;  // whatever was in flight comes again
      pause_unless(stop, backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      continue;
    }
    if (fetched.msgs.empty()) {
      if (o.idle_timeout.count() > 0 && Clock::now() - last_data > o.idle_timeout) {
        st.end = "idle";
        break;
      }
    } else {
      last_data = Clock::now();
      natsMsg* last_msg = nullptr;  // the last message committed or skipped
      std::uint64_t handled = 0;
      for (natsMsg* m : fetched.msgs) {
        ++st.received;
        const char* reply = natsMsg_GetReply(m);
        const std::optional<AckInfo> ai = parse_ack_subject(reply != nullptr ? reply : "");
        if (!ai || ai->stream != o.stream || ai->consumer != o.durable) {
          // Not a delivery of our consumer (anyone may publish to an inbox):
          // neither published nor acknowledged.
          ++st.invalid;
          continue;
        }
        if (ai->delivered > 1) ++st.redelivered;
        st.pending = ai->pending;
        const char* seq_value = nullptr;
        natsMsgHeader_Get(m, kSeqHeader, &seq_value);
        const std::optional<std::uint64_t> seq = parse_seq(seq_value);
        if (!seq) {
          last_msg = m;
          ++handled;
          last_committed_sseq = ai->stream_seq;
          ++st.invalid;
          if (!warned_invalid) {
            warned_invalid = true;
            tools::print_notice("shmbus-nats",
                                fmt::format("stream '{}': a message on '{}' has no valid {} header; skipped "
                                            "(counted as invalid)",
                                            o.stream, natsMsg_GetSubject(m), kSeqHeader));
          }
          continue;
        }
        const std::uint64_t next = producer.next_seq();
        if (*seq < next) {
          ++st.skipped_duplicates;
          last_msg = m;
          ++handled;
          last_committed_sseq = ai->stream_seq;
          continue;
        }
        const int len = natsMsg_GetDataLength(m);
        if (len > 0) st.largest = std::max<std::uint64_t>(st.largest, static_cast<std::uint64_t>(len));
        if (len < 0 || static_cast<std::uint32_t>(len) > max_message) {
          throw GatewayError(fmt::format("bus '{}': message {} has {} bytes, more than the {} the bus accepts "
                                         "(capacity {}, records of {} bytes): recreate it with a larger capacity",
                                         o.bus, *seq, len, max_message, capacity, record_size));
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
          throw GatewayError(fmt::format("stream '{}': message {} has an impossible {} header", o.stream, *seq,
                                         kRecordsHeader));
        }
        const std::uint64_t k = records_for(static_cast<std::uint64_t>(len), record_size);
        if (k > *source_records) {
          // The message after it would land inside it here.
          throw GatewayError(fmt::format(
              "bus '{}': message {} ({} bytes) takes {} records of {} bytes here, {} on the source bus: "
              "sequence numbers count records, so the bus needs records at least as large as the source's",
              o.bus, *seq, len, k, record_size, *source_records));
        }
        const std::uint64_t at = shmbus::place(next, k, capacity);
        if (*seq < at || (*seq > at && shmbus::place(*seq, k, capacity) != *seq)) {
          throw GatewayError(fmt::format(
              "bus '{}': message {} ({} bytes, {} records) cannot keep its sequence here: the ring (capacity {}) "
              "would put it at {}, its laps ending elsewhere than the source's; recreate the bus with the source "
              "bus's capacity",
              o.bus, *seq, len, k, capacity, *seq < at ? at : shmbus::place(*seq, k, capacity)));
        }
        if (*seq > at) {
          // Publishes under the source's sequence: the skipped ones are a
          // gap local readers count as lost (Producer::skip_to): messages
          // not in the stream, or padding the source put before a message
          // that spans records where this ring's lap does not end.
          PublishStatus ps = PublishStatus::timeout;
          while (ps == PublishStatus::timeout && !stop())
            ps = producer.skip_to(*seq, std::chrono::milliseconds(100)).status;
          if (ps == PublishStatus::timeout) {
            stopped = true;  // SIGTERM while the bus was full
            break;
          }
          if (ps != PublishStatus::ok) {
            throw GatewayError(fmt::format("bus '{}': cannot move to sequence {}: {}", o.bus, *seq, to_string(ps)));
          }
          if (bus.head() != 0 || next != 0) st.gap += *seq - next;
        }
        const auto payload = std::as_bytes(std::span<const char>(natsMsg_GetData(m), static_cast<std::size_t>(len)));
        PublishResult r{PublishStatus::timeout, 0};
        while (r.status == PublishStatus::timeout && !stop()) r = producer.publish(payload, std::chrono::milliseconds(100));
        if (r.status == PublishStatus::timeout) {
          stopped = true;
          break;
        }
        if (!r) {
          throw GatewayError(fmt::format("bus '{}': publish: {}", o.bus, to_string(r.status)));
        }
        if (r.seq != *seq) {  // the checks above rule it out; never a message under another sequence unsaid
          throw GatewayError(fmt::format("bus '{}': message {} was published at sequence {}", o.bus, *seq, r.seq));
        }
        ++st.published;
        st.bytes += payload.size();
        last_msg = m;
        ++handled;
        last_committed_sseq = ai->stream_seq;
      }
      // Everything up to the last message is committed (or skipped): one
      // ack covers it all (AckAll), sent to the delivery's reply subject.
      if (last_msg != nullptr) {
        const char* reply = natsMsg_GetReply(last_msg);
        // Only deliveries of our consumer are ever handled (checked above).
        if (reply != nullptr &&
            natsConnection_PublishString(conn.nc(), reply, "+ACK") == NATS_OK) {
          st.acknowledged += handled;
        }
      }
      fetched.clear();
      backoff = std::chrono::milliseconds(50);
      if (stopped) break;
    }
    if (o.stats_interval.count() > 0 && Clock::now() - last_progress >= o.stats_interval) {
      last_progress = Clock::now();
      progress(snapshot());
    }
  }
  if (st.end.empty()) st.end = "signal";
  // The last acks, while the server is there to take them: one that never
  // arrives only brings its messages again, which the next `in` skips as
  // already on the bus.
  if (conn.connected()) natsConnection_FlushTimeout(conn.nc(), 200);
  return snapshot();
}

}  // namespace shmbus::nats
