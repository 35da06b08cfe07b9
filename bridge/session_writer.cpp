// shmbus-bridge — writing to a subscriber and closing (session.hpp): the
// queued frames into the socket piece by piece, the closing watch that gives
// a peer a bounded time to take the last frame, and every way a session ends.
#include "bridge/session.hpp"

#include <fmt/format.h>

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>

#include "bridge/log.hpp"

namespace shmbus::bridge {

void Session::kick() {
  if (state == State::closed) return;
  bool flushed = false;
  {
    std::lock_guard lk(m);
    kick_posted = false;
    if (writing) return;
    if (pending.empty()) {
      flushed = finish_after_flush;
      finish_after_flush = false;
    }
  }
  if (flushed) return all_queued_written();  // everything up to the final frame
  {
    std::lock_guard lk(m);
    if (writing || pending.empty()) return;
    sending.swap(pending);
    pending.clear();
    count_pending();
    writing = true;
  }
  sending_off = 0;
  count_sending();
  space.notify_all();
  write_some();
}

void Session::write_some() {
  with_stream([&](auto& st) {
    st.async_write_some(asio::buffer(sending.data() + sending_off, sending.size() - sending_off),
                        [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
                          self->on_written(ec, n);
                        });
  });
}

void Session::on_written(boost::system::error_code ec, std::size_t n) {
  bump(srv.counters.bytes, n);
  written += n;
  sending_off += n;
  count_sending();
  if (!ec && state != State::closed && sending_off < sending.size()) return write_some();
  sending.clear();
  sending_off = 0;
  count_sending();
  {
    std::lock_guard lk(m);
    writing = false;
  }
  space.notify_all();
  if (state == State::closed) return;
  if (ec) return peer_gone(ec);
  kick();
}

void Session::all_queued_written() {
  if (state == State::streaming) {
    End why;
    {
      std::lock_guard lk(m);
      why = end_kind;
    }
    if (why == End::slow) {
      slow_close();  // the reader's slow error went out before slow_close() ran
    } else {
      bump(srv.counters.closed_end);
      srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
      log_line(fmt::format("{}: closed: end of stream forwarded", peer));
      state = State::closing;  // the read in flight drains from now on
      watch_closing();
    }
  }
  if (state != State::closing) return;
  // A FIN follows the data; the socket is closed once the peer has taken
  // (acknowledged) everything, or closes itself, or stops making progress.
  boost::system::error_code ignored;
  socket().shutdown(tcp::socket::shutdown_send, ignored);
  fin_sent = true;
  close_if_taken();
  if (state == State::closing) arm_watch();  // looks again soon, not only at the window's end
}

std::uint64_t Session::unacked() {
  int n = 0;
  if (::ioctl(socket().native_handle(), SIOCOUTQ, &n) != 0 || n < 0) return 0;
  return static_cast<std::uint64_t>(n);
}

std::uint64_t Session::left_to_take() {
  std::size_t queued;
  {
    std::lock_guard lk(m);
    queued = pending.size();
  }
  return queued + (sending.size() - sending_off) + unacked();
}

void Session::close_if_taken() {
  if (state == State::closing && fin_sent && unacked() == 0) close_now();
}

void Session::watch_closing() {
  window_start = Clock::now();
  window_left = left_to_take();
  window_taken = written - std::min<std::uint64_t>(written, unacked());
  arm_watch();
}

void Session::arm_watch() {
  // Once the FIN is queued, look often: the socket closes as soon as the
  // peer has everything. Before that, once per window.
  const auto window_end = window_start + std::chrono::seconds(1);
  const auto now = Clock::now();
  auto next = window_end;
  if (fin_sent) next = std::min(window_end, now + std::chrono::milliseconds(20));
  timer.expires_at(std::max(next, now));
  timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->state != State::closing) return;
    self->on_watch();
  });
}

void Session::on_watch() {
  close_if_taken();
  if (state == State::closed) return;
  const auto now = Clock::now();
  if (now - window_start < std::chrono::seconds(1)) return arm_watch();
  const std::uint64_t out = unacked();
  const std::uint64_t taken = written - std::min<std::uint64_t>(written, out);
  const std::uint64_t progress = taken - std::min(taken, window_taken);
  const std::uint64_t need = std::min<std::uint64_t>(srv.opt.closing_min_rate, window_left);
  if (need == 0) return close_now();  // nothing was left a second ago: nothing to wait for
  if (progress < need) {
    log_line(fmt::format("{}: cut off: took {} bytes in the last second while closing ({} left; at least {} "
                         "a second are needed)",
                         peer, progress, window_left - std::min(window_left, progress), need));
    return close_now();
  }
  window_start = now;
  window_taken = taken;
  window_left = left_to_take();
  arm_watch();
}

void Session::slow_close() {
  if (state != State::streaming) return;
  begin_closing(ErrorCode::slow, fmt::format("too slow, buffer full; resume at seq {}", end_seq),
                &srv.counters.closed_slow, /*queue_error=*/false);
}

void Session::fail(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter) {
  if (state == State::closed || state == State::closing) return;
  if (tls && !tls_ready) {  // no channel to send the error on yet
    log_line(fmt::format("{}: closed: {}: {}", peer, to_string(code), reason));
    if (counter) bump(*counter);
    return close_now();
  }
  begin_closing(code, reason, counter, /*queue_error=*/true);
}

void Session::begin_closing(ErrorCode code, const std::string& reason, std::atomic<std::uint64_t>* counter,
                            bool queue_error) {
  log_line(fmt::format("{}: closed: {}: {}", peer, to_string(code), reason));
  if (counter) bump(*counter);
  if (state == State::streaming) srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
  state = State::closing;
  {
    std::lock_guard lk(m);
    // `end` already queued is the stream's last frame: nothing follows it.
    if (queue_error && end_kind != End::eos) {
      append_error(pending, code, resume_seq, reason);
      count_pending();
      finish_after_flush = true;
    }
    stop_reader = true;
  }
  space.notify_all();
  watch_closing();
  kick();
}

void Session::peer_gone(boost::system::error_code ec) {
  if (state == State::closed) return;
  if (state != State::closing) {
    const bool eof = ec == asio::error::eof || ec == asio::error::connection_reset;
    log_line(fmt::format("{}: closed: {}", peer, eof ? "peer disconnected" : ec.message()));
    bump(srv.counters.closed_peer);
    if (state == State::streaming) srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
    // Counted and logged here: close_now() must not count the same
    // subscriber again as an end of stream.
    state = State::closing;
  }
  close_now();
}

void Session::close_now() {
  if (state == State::closed) return;
  if (state == State::streaming) {
    End why;
    {
      std::lock_guard lk(m);
      why = end_kind;
    }
    if (why == End::slow) {
      // Flushed the slow error before slow_close() ran.
      slow_close();
    } else {
      bump(srv.counters.closed_end);
      srv.counters.subscribers.fetch_sub(1, std::memory_order_relaxed);
      log_line(fmt::format("{}: closed: end of stream forwarded", peer));
    }
  }
  state = State::closed;
  leave_handshake_budget();
  {
    std::lock_guard lk(m);
    stop_reader = true;
  }
  space.notify_all();
  boost::system::error_code ignored;
  timer.cancel();
  hold.cancel();
  socket().close(ignored);
  srv.remove(shared_from_this());
}

}  // namespace shmbus::bridge
