// shmbus-bridge — the TCP server (bridge/server.hpp): accepting
// connections, the handshake budget (how many connections may be in their
// handshake, in all and per address), the periodic tick (reaping finished
// reader threads, the stats callback), and stopping. Each connection is a
// Session (session.hpp).
#include "bridge/server.hpp"

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <fmt/format.h>

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/sockios.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <list>
#include <unordered_map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "bridge/local_peer.hpp"
#include "bridge/log.hpp"
#include "bridge/protocol.hpp"
#include "bridge/session.hpp"

namespace shmbus::bridge {

// The reader slot's name, "tcp:IP:PORT", within the reader table's 31 bytes:
// a long IPv6 address keeps its head and tail around a '~' and the port whole
// ("tcp:2001:db8:12~ae:7334:51234"), so the slot still says who it is.
std::string slot_name(const std::string& ip, std::uint16_t port) {
  constexpr std::size_t kMax = 31;
  const std::string tail = fmt::format(":{}", port);
  if (4 + ip.size() + tail.size() <= kMax) return "tcp:" + ip + tail;
  const std::size_t room = kMax - 4 - tail.size() - 1;  // for the address, beside the '~'
  const std::size_t head = room - room / 2;
  return "tcp:" + ip.substr(0, head) + "~" + ip.substr(ip.size() - room / 2) + tail;
}

std::string peer_slot_name(tcp::socket& sock) {
  boost::system::error_code ec;
  const auto ep = sock.remote_endpoint(ec);
  return ec ? std::string("tcp:?") : shmbus::bridge::slot_name(ep.address().to_string(), ep.port());
}

// The address a peer is counted under for the handshake budget and the
// token back-off: an IPv4 address (v4-mapped ones too), or an IPv6 /64,
// the block one host is usually given.
std::string address_key(const asio::ip::address& a) {
  if (a.is_v4()) return a.to_string();
  const auto v6 = a.to_v6();
  if (v6.is_v4_mapped()) return asio::ip::make_address_v4(asio::ip::v4_mapped, v6).to_string();
  auto bytes = v6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

void Server::Impl::remove(const std::shared_ptr<Session>& s) {
  sessions.remove(s);
  if (s->reader_thread.joinable()) zombies.push_back(s);
}

void Server::Impl::reap(bool wait) {
  for (auto it = zombies.begin(); it != zombies.end();) {
    Session& s = **it;
    if (wait || s.reader_done.load(std::memory_order_acquire)) {  // pairs with the reader's release
      s.reader_thread.join();
      it = zombies.erase(it);
    } else {
      ++it;
    }
  }
}

ServeStats Server::Impl::snapshot() const {
  const Counters& c = counters;
  ServeStats s;
  s.subscribers = c.subscribers.load(std::memory_order_relaxed);
  s.accepted = c.accepted.load(std::memory_order_relaxed);
  s.messages = c.messages.load(std::memory_order_relaxed);
  s.bytes = c.bytes.load(std::memory_order_relaxed);
  s.dropped = c.dropped.load(std::memory_order_relaxed);
  s.closed_slow = c.closed_slow.load(std::memory_order_relaxed);
  s.closed_idle = c.closed_idle.load(std::memory_order_relaxed);
  s.closed_protocol = c.closed_protocol.load(std::memory_order_relaxed);
  s.closed_handshake = c.closed_handshake.load(std::memory_order_relaxed);
  s.closed_refused = c.closed_refused.load(std::memory_order_relaxed);
  s.closed_peer = c.closed_peer.load(std::memory_order_relaxed);
  s.closed_end = c.closed_end.load(std::memory_order_relaxed);
  s.closed_tls = c.closed_tls.load(std::memory_order_relaxed);
  s.queued_bytes = c.queued.load(std::memory_order_relaxed);
  return s;
}

void Server::Impl::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket sock) {
    if (stopping) return;
    if (ec) {
      // Out of descriptors or similar: say so once per failure and retry shortly, without spinning.
      log_line(fmt::format("accept failed: {}", ec.message()));
      auto t = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
      t->async_wait([this, t](boost::system::error_code) {
        if (!stopping) accept();
      });
      return;
    }
    bump(counters.accepted);
    auto s = std::make_shared<Session>(*this, std::move(sock));
    enforce_handshake_budget(s->addr_key);
    sessions.push_back(s);
    s->enter_handshake_budget();
    s->start();
    accept();
  });
}

// Makes room for one more connection from `key` in the handshake budget:
// the oldest connection in handshake from that address goes, or, when the
// total is reached, the oldest of all. The oldest rather than the newest:
// a client that means to subscribe sends its hello at once, so the
// connection that has waited longest is the likeliest to be one that never
// will (a dribbler), and a client behind the same address still gets in by
// connecting; refusing the newest would let a few held-open connections
// keep everyone out for good.
void Server::Impl::enforce_handshake_budget(const std::string& key) {
  Session* victim = nullptr;
  std::string why;
  if (const auto it = handshakes_from.find(key);
      it != handshakes_from.end() && it->second >= std::max<std::uint32_t>(opt.max_handshakes_per_address, 1)) {
    for (Session* h : handshaking) {
      if (h->addr_key == key) {
        victim = h;
        break;
      }
    }
    why = fmt::format("{} connections from {} in handshake (--max-handshakes-per-address): the oldest is closed",
                      it->second, key);
  } else if (!handshaking.empty() && handshaking.size() >= std::max<std::uint32_t>(opt.max_handshakes, 1)) {
    victim = handshaking.front();
    why = fmt::format("{} connections in handshake (--max-handshakes): the oldest is closed", handshaking.size());
  }
  if (!victim) return;
  const auto now = Clock::now();
  if (now - budget_logged >= std::chrono::seconds(1)) {
    log_line(fmt::format("{}: closed: too-many-subscribers: {}{}", victim->peer, why,
                         budget_unlogged ? fmt::format(" ({} more closed so in the last second)", budget_unlogged)
                                         : std::string()));
    budget_logged = now;
    budget_unlogged = 0;
  } else {
    ++budget_unlogged;
  }
  const auto keep = victim->shared_from_this();  // close_now() removes it from `sessions`
  victim->evict(why);
}

void Server::Impl::on_tick() {
  reap(false);  // reader threads that have ended are joined here, off the hot path
  if (should_stop && should_stop()) shutdown();
  if (stopping) return;
  if (stats_fn && stats_interval.count() > 0 && Clock::now() >= next_stats) {
    next_stats = Clock::now() + stats_interval;
    stats_fn(snapshot());
  }
  tick.expires_after(std::chrono::milliseconds(100));
  tick.async_wait([this](boost::system::error_code ec) {
    if (!ec) on_tick();
  });
}

void Server::Impl::shutdown() {
  if (stopping) return;
  stopping = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  tick.cancel();
  auto all = sessions;
  for (auto& s : all) s->fail(ErrorCode::shutdown, "server stopping", nullptr);
}

Server::Server(ServeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(impl_->opt.host, ec);
  if (ec) throw std::runtime_error(fmt::format("--listen: '{}' is not an IP address", impl_->opt.host));
  const tcp::endpoint ep(addr, impl_->opt.port);
  if (!impl_->opt.tls_cert.empty() || !impl_->opt.tls_key.empty()) {
    if (impl_->opt.tls_cert.empty() || impl_->opt.tls_key.empty()) {
      throw std::runtime_error("TLS needs both --tls-cert and --tls-key");
    }
    auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
    ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    ctx->use_certificate_chain_file(impl_->opt.tls_cert, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("--tls-cert {}: cannot load a PEM certificate chain: {}",
                                           impl_->opt.tls_cert, ec.message()));
    }
    ctx->use_private_key_file(impl_->opt.tls_key, asio::ssl::context::pem, ec);
    if (ec) {
      throw std::runtime_error(fmt::format("--tls-key {}: cannot load a PEM private key matching the "
                                           "certificate: {}", impl_->opt.tls_key, ec.message()));
    }
    impl_->tls = std::move(ctx);
  }
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error(
        fmt::format("cannot listen on {}:{}: {}", impl_->opt.host, impl_->opt.port, ec.message()));
  }
}

Server::~Server() = default;

std::uint16_t Server::port() const noexcept {
  boost::system::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void Server::run(const std::function<bool()>& should_stop) {
  impl_->should_stop = should_stop;
  impl_->next_stats = Clock::now() + impl_->stats_interval;
  impl_->accept();
  impl_->on_tick();
  impl_->io.run();
  // Every session is closed; its reader thread ends within one read timeout.
  for (auto& s : impl_->sessions) {
    {
      std::lock_guard lk(s->m);
      s->stop_reader = true;
    }
    s->space.notify_all();
    if (s->reader_thread.joinable()) impl_->zombies.push_back(s);
  }
  impl_->sessions.clear();
  impl_->reap(true);
}

void Server::stop() {
  asio::post(impl_->io, [this] { impl_->shutdown(); });
}

ServeStats Server::stats() const { return impl_->snapshot(); }

void Server::on_stats(std::chrono::milliseconds interval, std::function<void(const ServeStats&)> f) {
  impl_->stats_interval = interval;
  impl_->stats_fn = std::move(f);
}

}  // namespace shmbus::bridge

