#include "consumer/source.hpp"

#include <fmt/format.h>

#include <stdexcept>

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

TcpSource::TcpSource(const bridge::ClientOptions& options) {
  try {
    client_ = std::make_unique<bridge::Client>(options);
  } catch (const bridge::ClientError& e) {
    std::string code = "error";
    if (e.code == bridge::ErrorCode::unknown_bus) code = "not_found";
    if (e.code == bridge::ErrorCode::not_retained) code = "not_retained";
    throw tools::Failure(tools::exit_failure,
                         fmt::format("tcp://{}:{}/{}: {}", options.host, options.port, options.bus, e.what()), code);
  }
  next_ = client_->welcome().first_seq;
}

PollResult TcpSource::poll(const MessageHandler& handler, std::size_t max, std::chrono::nanoseconds timeout) {
  PollResult r;
  if (ended_) {
    r.end_of_stream = true;
    r.end_reason = EndReason::closed;
    return r;
  }
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  while (r.count < max) {
    if (left_ > 0) {
      const bridge::BatchMessage bm = *it_;
      Message m;
      m.seq = bm.seq;
      m.timestamp_ns = bm.timestamp_ns;
      m.payload = bm.payload;
      handler(m);
      ++it_;
      --left_;
      ++r.count;
      next_ = bm.seq + 1;
      continue;
    }
    if (r.count > 0 || r.lost > 0) wait = std::chrono::milliseconds::zero();  // only what is here now
    bridge::Event ev;
    try {
      ev = client_->next(wait);
    } catch (const bridge::ClientError& e) {
      throw tools::Failure(tools::exit_failure, e.what(), e.code == bridge::ErrorCode::slow ? "slow" : "error");
    }
    if (ev.kind == bridge::Event::Kind::none) break;
    if (ev.kind == bridge::Event::Kind::batch) {
      batch_ = ev.batch;
      it_ = batch_.begin();
      left_ = batch_.count();
    } else if (ev.kind == bridge::Event::Kind::loss) {
      r.lost += ev.loss.count;
      lost_ += ev.loss.count;
      next_ = ev.loss.first + ev.loss.count;
    } else {
      ended_ = true;
      r.end_of_stream = true;
      r.end_reason = EndReason::closed;
      break;
    }
  }
  return r;
}

}  // namespace shmbus::consumer
