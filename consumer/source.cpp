#include "consumer/source.hpp"

#include <utility>

#include <shmbus/placement.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "consumer/options.hpp"
#include "tools/common/program.hpp"

namespace shmbus::consumer {

bool is_tcp_url(const std::string& s) noexcept { return s.starts_with("tcp://"); }

TcpAddress parse_tcp_url(const std::string& s) {
  const std::string rest = s.substr(6);
  const auto slash = rest.find('/');
  if (slash == std::string::npos || slash + 1 == rest.size()) {
    throw std::invalid_argument(fmt::format("'{}': expected tcp://HOST:PORT/BUS", s));
  }
  TcpAddress a;
  bridge::split_host_port(rest.substr(0, slash), "tcp://", a.host, a.port);
  a.bus = rest.substr(slash + 1);
  validate_name(a.bus);
  return a;
}

bool retryable(const bridge::ClientError& e) noexcept {
  if (e.code) {
    switch (*e.code) {
      case bridge::ErrorCode::bad_version:
      case bridge::ErrorCode::unknown_bus:
      case bridge::ErrorCode::bad_token:
      case bridge::ErrorCode::bad_request:
        return false;
      default:
        return true;
    }
  }
  // A certificate the CA does not vouch for stays so; a CA file that cannot be read too.
  const std::string_view w = e.what();
  return w.find("not trusted") == std::string_view::npos && w.find("--tls-ca") == std::string_view::npos;
}

TcpSource::TcpSource(const bridge::ClientOptions& options, const TcpFollow& follow)
    : options_(options), follow_(follow), backoff_(follow.backoff_min) {
  try {
    client_ = std::make_unique<bridge::Client>(options);
  } catch (const bridge::ClientError& e) {
    std::string code = "error";
    if (e.code == bridge::ErrorCode::unknown_bus) code = "not_found";
    if (e.code == bridge::ErrorCode::not_retained) code = "not_retained";
    throw tools::Failure(tools::exit_failure, fmt::format("{}: {}", where(), e.what()), code);
  }
  next_ = client_->welcome().first_seq;
  connected_at_ = Clock::now();
}

std::string TcpSource::where() const {
  const bool v6 = options_.host.find(':') != std::string::npos;
  return fmt::format("tcp://{}{}{}:{}/{}", v6 ? "[" : "", options_.host, v6 ? "]" : "", options_.port,
                     options_.bus);
}

tools::Failure TcpSource::failure(const bridge::ClientError& e) const {
  return tools::Failure(tools::exit_failure, e.what(), e.code == bridge::ErrorCode::slow ? "slow" : "error");
}

void TcpSource::schedule_retry() {
  const auto cap = waiting_for_producer_ ? std::min(follow_.end_poll_max, follow_.backoff_max) : follow_.backoff_max;
  backoff_ = std::clamp(backoff_, follow_.backoff_min, cap);
  retry_at_ = Clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, cap);
}

void TcpSource::lost_connection(const bridge::ClientError* e) {
  const auto now = Clock::now();
  // A connection that lasted a while was a good one: start the backoff afresh.
  if (now - connected_at_ >= follow_.backoff_max) backoff_ = follow_.backoff_min;
  client_.reset();
  left_ = 0;
  attempts_ = 0;
  down_since_ = now;
  next_notice_ = now + follow_.notice_every;
  told_not_there_ = false;
  if (e == nullptr) {
    waiting_for_producer_ = true;  // Reading reports the end; re-subscribing is quiet
    last_error_ = "end of stream";
  } else {
    waiting_for_producer_ = false;
    last_error_ = e->what();
    if (e->code && e->next_seq > next_) resume_at_ = e->next_seq;  // never before what was delivered
    tools::print_notice(program_name, fmt::format("{}: {}; reconnecting (--follow), resuming at seq {}", where(),
                                                  last_error_, std::max(next_, resume_at_)));
  }
  schedule_retry();
}

bool TcpSource::reconnect(Clock::time_point deadline, PollResult& r) {
  auto now = Clock::now();
  if (now < retry_at_) {
    std::this_thread::sleep_for(std::min(retry_at_, deadline) - now);
    now = Clock::now();
    if (now < retry_at_) return false;
  }
  ++attempts_;
  bridge::ClientOptions co = options_;
  // What the server no longer holds is asked for from its oldest (a
  // sequence it names would be gone again on a busy bus by the time we ask).
  co.start = from_earliest_ ? bridge::StartKind::earliest : bridge::StartKind::sequence;
  co.start_seq = from_earliest_ ? 0 : std::max(next_, resume_at_);
  try {
    client_ = std::make_unique<bridge::Client>(co);
  } catch (const bridge::ClientError& e) {
    if (!retryable(e)) throw tools::Failure(tools::exit_failure, fmt::format("{}: {}", where(), e.what()), "error");
    last_error_ = e.what();
    if (waiting_for_producer_) {
      // Asking for a later producer's messages, and the server is gone too: say so.
      waiting_for_producer_ = false;
      down_since_ = Clock::now();
      next_notice_ = down_since_ + follow_.notice_every;
      tools::print_notice(program_name, fmt::format("{}: {}; reconnecting (--follow), resuming at seq {}", where(),
                                                    last_error_, co.start_seq));
    }
    if (e.code == bridge::ErrorCode::not_retained) {
      if (co.start == bridge::StartKind::sequence && e.next_seq > co.start_seq) {
        // Gone from the server's ring: go on at its oldest, at once the
        // first few times, then with backoff; the sequences in between are
        // counted as lost when it welcomes us.
        from_earliest_ = true;
        if (++chases_ <= 3) {
          retry_at_ = Clock::now();
          return false;
        }
      } else if (!told_not_there_) {  // the server's bus is behind what was delivered (recreated?)
        told_not_there_ = true;
        tools::print_notice(program_name,
                            fmt::format("{}: seq {} is not on the server's bus (its next is {}); waiting for it",
                                        where(), co.start_seq, e.next_seq));
      }
    }
    now = Clock::now();
    if (!waiting_for_producer_ && now >= next_notice_) {
      next_notice_ = now + follow_.notice_every;
      tools::print_notice(
          program_name,
          fmt::format("{}: still reconnecting after {} in {:.1f} s: {}", where(), tools::plural(attempts_, "attempt"),
                      std::chrono::duration<double>(now - down_since_).count(), last_error_));
    }
    schedule_retry();
    return false;
  }
  const std::uint64_t first = client_->welcome().first_seq;
  connected_at_ = Clock::now();
  if (!waiting_for_producer_) {
    ++reconnects_;
    tools::print_notice(program_name,
                        fmt::format("{}: reconnected after {} in {:.1f} s; resuming at seq {}", where(),
                                    tools::plural(attempts_, "attempt"),
                                    std::chrono::duration<double>(connected_at_ - down_since_).count(), first));
  }
  if (first > next_) {
    // What the server cannot send any more: an exact loss, as a loss frame would say.
    const std::uint64_t gone = first - next_;
    tools::print_notice(program_name, fmt::format("{}: seq {}..{} ({}) no longer retained by the server: counted "
                                                  "as lost",
                                                  where(), next_, first - 1, tools::plural(gone, "message")));
    r.lost += gone;
    lost_ += gone;
    next_ = first;
  }
  resume_at_ = 0;
  chases_ = 0;
  from_earliest_ = false;
  return true;
}

std::uint64_t TcpSource::capacity() const noexcept {
  if (!client_) return 0;
  const bridge::Welcome& w = client_->welcome();
  return capacity_for_max_message(w.max_message, w.record_size);
}

PollResult TcpSource::poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) {
  PollResult r;
  // As a bus's poll: a loss comes before the first message of the poll it is told in.
  r.lost = std::exchange(pending_lost_, 0);
  const auto deadline = Clock::now() + timeout;
  while (r.count < max) {
    if (left_ > 0) {
      const bridge::BatchMessage bm = *it_;
      ++it_;
      --left_;
      if (bm.seq < next_) continue;  // delivered before (a server that repeats itself)
      Message m;
      m.seq = bm.seq;
      m.timestamp_ns = bm.timestamp_ns;
      m.payload = bm.payload;
      m.records = bm.records;
      handler(m);
      ++r.count;
      next_ = bm.seq + bm.records;
      continue;
    }
    const bool have = r.count > 0 || r.lost > 0;
    if (!client_) {
      if (!follow_.enabled || have || !reconnect(deadline, r)) {
        if (ended_ && !follow_.enabled) {
          r.end_of_stream = true;
          r.end_reason = EndReason::closed;
        }
        break;
      }
      continue;
    }
    // Only what is here now once something was read.
    auto wait = std::chrono::milliseconds::zero();
    if (!have) {
      wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      wait = std::max(wait, std::chrono::milliseconds::zero());
    }
    bridge::Event ev;
    try {
      ev = client_->next(wait);
    } catch (const bridge::ClientError& e) {
      if (!follow_.enabled || !retryable(e)) throw failure(e);
      lost_connection(&e);
      continue;
    }
    if (ev.kind == bridge::Event::Kind::none) break;
    if (ev.kind == bridge::Event::Kind::batch) {
      batch_ = ev.batch;
      it_ = batch_.begin();
      left_ = batch_.count();
      waiting_for_producer_ = false;
      backoff_ = follow_.backoff_min;  // the stream moves: the next outage starts afresh
    } else if (ev.kind == bridge::Event::Kind::loss) {
      const std::uint64_t end = ev.loss.first + ev.loss.count;
      if (end > next_) {
        const std::uint64_t n = end - std::max(next_, ev.loss.first);
        lost_ += n;
        next_ = end;
        if (r.count > 0) {
          pending_lost_ += n;
          break;
        }
        r.lost += n;
      }
      waiting_for_producer_ = false;
      backoff_ = follow_.backoff_min;
    } else {
      ended_ = true;
      r.end_of_stream = true;
      r.end_reason = EndReason::closed;
      if (follow_.enabled) {
        lost_connection(nullptr);  // then subscribe again for a later producer
      } else {
        client_.reset();  // the server closes after end
      }
      break;
    }
  }
  return r;
}

}  // namespace shmbus::consumer
