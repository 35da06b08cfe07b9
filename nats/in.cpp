#include "in.hpp"

#include <fmt/format.h>
#include <shmbus/producer.hpp>

#include <optional>
#include <thread>

#include "headers.hpp"

namespace shmbus::nats {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kFetchWaitMs = 1000;  // see the fetch in run_in


class PullConsumer {
 public:
  PullConsumer(const Connection& c, const InOptions& o) : c_(c), o_(o) {}
  ~PullConsumer() { reset(); }
  PullConsumer(const PullConsumer&) = delete;
  PullConsumer& operator=(const PullConsumer&) = delete;

  natsSubscription* sub() const noexcept { return sub_; }
  void reset() noexcept {
    if (sub_ != nullptr) natsSubscription_Destroy(sub_);
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

  // (Re)creates the durable so that it delivers from stream sequence `from`.
  void subscribe_from(std::uint64_t from) {
    reset();
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus s = js_DeleteConsumer(c_.js(), o_.stream.c_str(), o_.durable.c_str(), nullptr, &code);
    if (s != NATS_OK && !(s == NATS_NOT_FOUND && code == JSConsumerNotFoundErr)) {
      throw GatewayError(js_error_text(fmt::format("stream '{}' consumer '{}'", o_.stream, o_.durable), s, code,
                                       c_.last_async_error()));
    }
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = o_.stream.c_str();
    so.Config.Durable = o_.durable.c_str();
    so.Config.AckPolicy = js_AckAll;
    so.Config.AckWait = o_.ack_wait_ms * 1'000'000;
    so.Config.MaxAckPending = 1 << 20;
    so.Config.DeliverPolicy = from <= 1 ? js_DeliverAll : js_DeliverByStartSequence;
    so.Config.OptStartSeq = from <= 1 ? 0 : from;
    const std::string filter = o_.subject.empty() ? std::string(">") : o_.subject;
    code = static_cast<jsErrCode>(0);
    s = js_PullSubscribe(&sub_, c_.js(), filter.c_str(), o_.durable.c_str(), nullptr, &so, &code);
    if (s != NATS_OK) {
      sub_ = nullptr;
      throw GatewayError(js_error_text(fmt::format("stream '{}' consumer '{}'", o_.stream, o_.durable), s, code,
                                       c_.last_async_error()));
    }
  }

 private:
  const Connection& c_;
  const InOptions& o_;
  natsSubscription* sub_ = nullptr;
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
  Bus bus = Bus::open_or_create(o.bus, bo);
  Producer producer(bus);  // exclusive; takes over after a crash
  DetachOnExit detach_on_exit{producer};
  const std::uint32_t max_payload = bus.info().max_payload;

  Connection conn(o.connect);
  retry_transient([&] { conn.check_stream(o.stream); }, stop);
  PullConsumer pull(conn, o);
  retry_transient([&] { pull.subscribe_from(pull.floor_next()); }, stop);

  InStats st;
  const auto started = Clock::now();
  auto snapshot = [&] {
    st.next_seq = producer.next_seq();
    st.reconnects = conn.reconnects();
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

  while (!stop()) {
    if (o.count != 0 && st.published >= o.count) {
      st.end = "count";
      break;
    }
    if (conn.reconnects() != seen_reconnects) need_rewind = true;
    if (need_rewind) {
      try {
        const std::uint64_t from = last_committed_sseq != 0 ? last_committed_sseq + 1 : pull.floor_next();
        seen_reconnects = conn.reconnects();
        pull.subscribe_from(from);
        need_rewind = false;
        ++st.rewinds;
        backoff = std::chrono::milliseconds(50);
      } catch (const GatewayError& e) {
        if (fatal_text(e.what())) throw;
        std::this_thread::sleep_for(backoff);  // the server is still coming back
        backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
        continue;
      }
    }
    natsMsgList list{};
    jsErrCode code = static_cast<jsErrCode>(0);
    // A fetch waits up to a second: one that times out while messages are
    // still arriving leaves them queued for the next fetch, and Debian's
    // client (3.4.1) can then gather more messages than the batch it
    // allocated (AddressSanitizer saw a read one past the list, a release
    // build heap corruption). With a long wait a fetch ends by filling its
    // batch while the stream flows; one that ends short is followed by a
    // fresh subscription (below), so no fetch ever finds messages queued.
    const natsStatus s = natsSubscription_Fetch(&list, pull.sub(), o.batch, kFetchWaitMs, &code);
    // Never trust the count beyond what was asked for.
    if (list.Count > o.batch) list.Count = o.batch;
    // A fetch that ended short (its wait ran out) may have left messages on
    // their way into the subscription's queue, where the next fetch would
    // meet the client's bug: start the next one on a fresh subscription,
    // from the last message committed (what was not acknowledged comes again).
    if (s == NATS_TIMEOUT || (s == NATS_OK && list.Count < o.batch)) need_rewind = true;
    if (s == NATS_TIMEOUT || (s == NATS_OK && list.Count == 0)) {
      natsMsgList_Destroy(&list);
      if (o.idle_timeout.count() > 0 && Clock::now() - last_data > o.idle_timeout) {
        st.end = "idle";
        break;
      }
    } else if (s != NATS_OK) {
      natsMsgList_Destroy(&list);
      const std::string what = js_error_text(fmt::format("fetch from consumer '{}'", o.durable), s, code,
                                             conn.last_async_error());
      if (fatal_text(what) && conn.connected()) throw GatewayError(what);
      need_rewind = true;  // whatever was in flight comes again
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
      continue;
    } else {
      last_data = Clock::now();
      natsMsg* last_msg = nullptr;  // the last message committed or skipped
      std::uint64_t handled = 0;
      for (int i = 0; i < list.Count; ++i) {
        natsMsg* m = list.Msgs[i];
        if (m == nullptr) continue;
        ++st.received;
        const char* reply = natsMsg_GetReply(m);
        const std::optional<AckInfo> ai = parse_ack_subject(reply != nullptr ? reply : "");
        if (ai && ai->delivered > 1) ++st.redelivered;
        const char* seq_value = nullptr;
        natsMsgHeader_Get(m, kSeqHeader, &seq_value);
        const std::optional<std::uint64_t> seq = parse_seq(seq_value);
        if (!seq) {
          last_msg = m;
          ++handled;
          if (ai) last_committed_sseq = ai->stream_seq;
          ++st.invalid;
          if (!warned_invalid) {
            warned_invalid = true;
            fmt::print(stderr, "shmbus-nats: stream '{}': a message on '{}' has no valid {} header; skipped "
                               "(counted as invalid)\n", o.stream, natsMsg_GetSubject(m), kSeqHeader);
          }
          continue;
        }
        const std::uint64_t next = producer.next_seq();
        if (*seq < next) {
          ++st.skipped_duplicates;
          last_msg = m;
          ++handled;
          if (ai) last_committed_sseq = ai->stream_seq;
          continue;
        }
        const int len = natsMsg_GetDataLength(m);
        if (len < 0 || static_cast<std::uint32_t>(len) > max_payload) {
          natsMsgList_Destroy(&list);
          throw GatewayError(fmt::format("bus '{}': message {} has {} bytes, more than the bus's {}-byte records hold",
                                         o.bus, *seq, len, max_payload));
        }
        if (*seq > next) {
          // Publishes under the source's sequence: the skipped ones are a
          // gap local readers count as lost (Producer::skip_to).
          PublishStatus ps = PublishStatus::timeout;
          while (ps == PublishStatus::timeout && !stop())
            ps = producer.skip_to(*seq, std::chrono::milliseconds(100)).status;
          if (ps == PublishStatus::timeout) {
            stopped = true;  // SIGTERM while the bus was full
            break;
          }
          if (ps != PublishStatus::ok) {
            natsMsgList_Destroy(&list);
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
          natsMsgList_Destroy(&list);
          throw GatewayError(fmt::format("bus '{}': publish: {}", o.bus, to_string(r.status)));
        }
        ++st.published;
        last_msg = m;
        ++handled;
        if (ai) last_committed_sseq = ai->stream_seq;
      }
      // Everything up to the last message is committed (or skipped): one ack covers it all.
      if (last_msg != nullptr) {
        if (natsMsg_Ack(last_msg, nullptr) == NATS_OK) st.acknowledged += handled;
      }
      natsMsgList_Destroy(&list);
      backoff = std::chrono::milliseconds(50);
      if (stopped) break;
    }
    if (o.stats_interval.count() > 0 && Clock::now() - last_progress >= o.stats_interval) {
      last_progress = Clock::now();
      progress(snapshot());
    }
  }
  if (st.end.empty()) st.end = "signal";
  natsConnection_Flush(conn.nc());  // the last acks
  return snapshot();
}

}  // namespace shmbus::nats
