#include "bridge/mirror.hpp"

#include <fmt/format.h>
#include <shmbus/producer.hpp>

#include <algorithm>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bridge/log.hpp"

namespace shmbus::bridge {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kStep{100};  // longest wait before looking at should_stop

// Failures that reconnecting cannot cure.
bool fatal(const ClientError& e) {
  if (e.code == ErrorCode::bad_token || e.code == ErrorCode::bad_version || e.code == ErrorCode::forbidden) {
    return true;
  }
  const std::string_view w = e.what();
  return w.find("not trusted") != std::string_view::npos || w.find("--tls-ca") != std::string_view::npos;
}

class Mirror {
 public:
  Mirror(const MirrorOptions& o, const std::function<bool()>& stop, std::chrono::milliseconds interval,
         const std::function<void(const MirrorStats&)>& on_stats)
      : o_(o), stop_(stop), interval_(interval), on_stats_(on_stats), next_stats_(Clock::now() + interval) {}

  MirrorEnd run() {
    auto backoff = o_.backoff_min;
    bool from_earliest = false;  // the sequence we need is gone: take what the source still has
    if (Bus::exists(o_.bus)) {
      OpenOptions oo;
      oo.trust = o_.trust;
      producer_.emplace(Bus::open(o_.bus, oo));  // takes over from a mirror that died
    }
    while (!stopping()) {
      ClientOptions co = o_.remote;
      if (producer_ && producer_->next_seq() > 0) {  // resume at the first sequence the bus lacks
        co.start = from_earliest ? StartKind::earliest : StartKind::sequence;
        co.start_seq = from_earliest ? 0 : producer_->next_seq();
      }
      try {
        Client c(co);
        ++stats_.connects;
        stats_.connected = true;
        from_earliest = false;
        attach_local(c.welcome());
        backoff = o_.backoff_min;  // only a usable stream resets it
        if (const auto end = stream(c)) return *end;
      } catch (const ClientError& e) {
        stats_.connected = false;
        ++stats_.failures;
        if (fatal(e)) throw std::runtime_error(e.what());
        if (e.code == ErrorCode::not_retained && producer_ && !from_earliest) {
          log_line(fmt::format("{}: seq {} is no longer retained by the source; resuming at its earliest",
                               where(), producer_->next_seq()));
          from_earliest = true;
          continue;
        }
        log_line(fmt::format("{}; reconnecting in {} ms", e.what(), backoff.count()));
        sleep(backoff);
        backoff = std::min(backoff * 2, o_.backoff_max);
      }
      report_stats(false);
    }
    return MirrorEnd::stopped;
  }

  MirrorStats stats() const {
    MirrorStats s = stats_;
    if (producer_) s.next_seq = producer_->next_seq();
    return s;
  }

  // Stopped or failed: give the local bus up without ending its stream, so
  // that its consumers wait for the next mirror, which continues it.
  ~Mirror() {
    if (producer_) producer_->detach();
  }

 private:
  std::string where() const { return fmt::format("{}:{}/{}", o_.remote.host, o_.remote.port, o_.remote.bus); }

  bool stopping() const { return stop_ && stop_(); }

  void sleep(std::chrono::milliseconds d) {
    const auto until = Clock::now() + d;
    while (!stopping() && Clock::now() < until) {
      std::this_thread::sleep_for(std::min<Clock::duration>(kStep, until - Clock::now()));
      report_stats(false);
    }
  }

  void report_stats(bool force) {
    if (o_.sample) o_.sample(stats());
    if (!on_stats_ || (interval_.count() <= 0 && !force)) return;
    if (!force && Clock::now() < next_stats_) return;
    next_stats_ = Clock::now() + interval_;
    if (producer_) stats_.next_seq = producer_->next_seq();
    on_stats_(stats_);
  }

  // A sequence range the mirror will never get: a loss for local consumers.
  // `why` empty: not a loss (a fresh local bus starting where the source does).
  void skip_to(std::uint64_t seq, const char* why) {
    const std::uint64_t from = producer_->next_seq();
    if (seq <= from) return;
    while (true) {
      const PublishStatus s = producer_->skip_to(seq, kStep).status;
      if (s == PublishStatus::ok) break;
      if (s != PublishStatus::timeout || stopping()) {
        throw std::runtime_error(fmt::format("bus '{}': cannot skip to seq {}: {}", o_.bus, seq, to_string(s)));
      }
    }
    if (*why != '\0') {
      ++stats_.gaps;
      stats_.lost += seq - from;
      log_always(fmt::format("gap: seq {}..{} ({} messages) will never come from {} ({}); local readers see "
                           "them as lost",
                           from, seq - 1, seq - from, where(), why));
    }
  }

  // Sequence numbers count records: the local bus keeps the source's only
  // if its messages take as many records, i.e. with the same record size.
  // A local ring smaller than the source's is accepted with a warning: a
  // source of messages that fit one record mirrors into it exactly; a
  // message longer than the local bus takes, or one that spans records and
  // would cross a local lap's end where the source's did not, stops the
  // mirror (stream()).
  void check_geometry(const BusInfo& info, const Welcome& w) const {
    if (info.record_size != w.record_size) {
      throw std::runtime_error(fmt::format(
          "bus '{}': has records of {} bytes, the remote bus of {}: sequence numbers count records, so the "
          "local bus needs the remote's record size: recreate it with a record size of {}",
          o_.bus, info.record_size, w.record_size, w.record_size));
    }
    if (info.max_message < w.max_message) {
      log_always(fmt::format(
          "warning: bus '{}' accepts messages of at most {} bytes (capacity {}), the remote bus up to {}: the "
          "mirror stops at a longer one, or at a message that spans records where the local ring's lap ends "
          "and the remote's does not; a capacity of {} or more takes them all",
          o_.bus, info.max_message, info.capacity, w.max_message,
          capacity_for(w.max_message, w.record_size, info.capacity)));
    }
  }

  // Creates the local bus on the first welcome if it does not exist; aligns
  // its next sequence with the stream's first.
  void attach_local(const Welcome& w) {
    if (!producer_) {
      BusOptions bo;
      bo.capacity = o_.capacity;
      bo.record_size = w.record_size;
      bo.policy = w.policy == static_cast<std::uint32_t>(Policy::overwrite) ? Policy::overwrite : Policy::block;
      bo.max_readers = o_.max_readers;
      bo.mode = o_.mode;
      bo.trust = o_.trust;
      bo.existing = Existing::as_is;  // check_geometry() judges an existing bus's own options
      producer_.emplace(Bus::open_or_create(o_.bus, bo));
    }
    check_geometry(producer_->bus().info(), w);
    const std::uint64_t next = producer_->next_seq();
    if (w.first_seq < next) {
      // The source starts before what we already have: it was recreated or
      // rewound. Republishing would duplicate sequences; wait for it.
      throw ClientError(fmt::format("{}: the source's earliest retained seq {} is before the local bus's "
                                    "next seq {} (source recreated?)",
                                    where(), w.first_seq, next));
    }
    if (w.first_seq > next) {
      if (next == 0) {
        // A bus that never carried a message simply starts there: nothing lost.
        skip_to(w.first_seq, "");
      } else {
        skip_to(w.first_seq, "no longer retained by the source");
      }
    }
    log_line(fmt::format("mirroring {} into bus '{}' from seq {}", where(), o_.bus, w.first_seq));
  }

  // Republishes until the stream ends (returned), the connection fails
  // (ClientError), or should_stop (returned).
  std::optional<MirrorEnd> stream(Client& c) {
    std::vector<std::span<const std::byte>> payloads;
    while (true) {
      if (stopping()) return MirrorEnd::stopped;
      report_stats(false);
      const Event ev = c.next(kStep);
      switch (ev.kind) {
        case Event::Kind::none:
          continue;
        case Event::Kind::loss:
          skip_to(ev.loss.first + ev.loss.count, "the server reported them lost");
          continue;
        case Event::Kind::end:
          stats_.next_seq = producer_->next_seq();
          producer_->close();
          producer_.reset();
          log_line(fmt::format("{}: end of stream after seq {}; closed bus '{}'", where(),
                               ev.seq == 0 ? std::string("(none)") : std::to_string(ev.seq - 1), o_.bus));
          return MirrorEnd::end_of_stream;
        case Event::Kind::batch:
          break;
      }
      // Each message goes where the local producer puts it: its next
      // sequence, or the start of the next lap when a message that spans
      // records would cross the ring's end (the bus pads the rest of the
      // lap). That is the source's sequence when the source's lap ends are
      // the local ones; a message further on is republished there after a
      // skip_to (sequences the source's padding took on a ring whose laps
      // end elsewhere, or that a bad server skipped); one the local bus
      // would place later than the source did cannot keep its sequence.
      const std::uint64_t cap = producer_->bus().info().capacity;
      const std::uint32_t record_size = producer_->bus().info().record_size;
      std::uint64_t at = producer_->next_seq();
      payloads.clear();
      const std::uint32_t max_message = producer_->bus().info().max_message;
      for (BatchMessage m : ev.batch) {
        if (m.payload.size() > max_message) {
          if (const auto end = publish_all(c, payloads)) return *end;
          throw std::runtime_error(fmt::format(
              "bus '{}': the remote's message at seq {} has {} bytes, more than the {} the local bus accepts "
              "(capacity {}): recreate it with a capacity of {} or more (the remote bus takes up to {})",
              o_.bus, m.seq, m.payload.size(), max_message, cap,
              capacity_for(c.welcome().max_message, record_size, cap), c.welcome().max_message));
        }
        const std::uint64_t k = records_for(m.payload.size(), record_size);
        const std::uint64_t place = shmbus::place(at, k, cap);
        if (m.seq < place) {
          throw std::runtime_error(fmt::format(
              "bus '{}': the remote's message at seq {} ({} bytes, {} records) can only go at seq {} here: the "
              "local ring (capacity {}) ends its laps elsewhere than the remote's; recreate it with the "
              "remote's capacity",
              o_.bus, m.seq, m.payload.size(), k, place, cap));
        }
        if (m.seq > place) {
          if (const auto end = publish_all(c, payloads)) return *end;
          payloads.clear();
          skip_to(m.seq, "passed over by the remote without a loss frame: padding before a message that spans "
                         "records, where the local ring's lap does not end");
        }
        payloads.push_back(m.payload);
        at = m.seq + k;
      }
      if (const auto end = publish_all(c, payloads)) return *end;
    }
  }

  // Publishes `payloads` in order, waiting for room (with heartbeats to the
  // server meanwhile). Returns a value when it should stop instead.
  std::optional<MirrorEnd> publish_all(Client& c, const std::vector<std::span<const std::byte>>& payloads) {
    std::size_t done = 0;
    while (done < payloads.size()) {
      c.keep_alive();  // a long wait for local readers must not look like a dead subscriber
      report_stats(false);
      const std::size_t k = producer_->publish_batch(std::span(payloads).subspan(done), kStep);
      done += k;
      if (k == 0) {  // full for a whole step (a slow local reader), or worse: ask why
        const PublishResult r = producer_->publish(payloads[done], kStep);
        if (r) {
          ++done;
        } else if (r.status != PublishStatus::timeout) {
          throw std::runtime_error(
              fmt::format("bus '{}': cannot publish seq {}: {}", o_.bus, producer_->next_seq(), to_string(r.status)));
        }
      }
      if (done < payloads.size() && stopping()) return MirrorEnd::stopped;
    }
    stats_.messages += payloads.size();
    for (const auto& p : payloads) stats_.bytes += p.size();
    return std::nullopt;
  }

  const MirrorOptions& o_;
  const std::function<bool()>& stop_;
  std::chrono::milliseconds interval_;
  const std::function<void(const MirrorStats&)>& on_stats_;
  Clock::time_point next_stats_;
  std::optional<Producer> producer_;
  MirrorStats stats_;
};

}  // namespace

MirrorEnd run_mirror(const MirrorOptions& options, const std::function<bool()>& should_stop,
                     std::chrono::milliseconds stats_interval,
                     const std::function<void(const MirrorStats&)>& on_stats) {
  Mirror m(options, should_stop, stats_interval, on_stats);
  const MirrorEnd end = m.run();
  MirrorStats s = m.stats();
  s.ended = true;
  if (on_stats) on_stats(s);  // the final line
  return end;
}

}  // namespace shmbus::bridge
