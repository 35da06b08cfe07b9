// The metrics HTTP server (Boost.Beast): see metrics_server.hpp. One thread
// runs one io_context; every connection reads its request and writes its
// response asynchronously under deadlines of its own, so a slow client
// waits alone.
#include "tools/common/metrics_server.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <optional>
#include <stdexcept>
#include <thread>

namespace shmbus::tools {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// "HOST:PORT" (HOST an IPv4 address, or [IPv6]).
tcp::endpoint parse_listen(const std::string& s, const std::string& option) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) {
    throw std::invalid_argument(option + " wants HOST:PORT, e.g. 127.0.0.1:9464, not '" + s + "'");
  }
  std::string host = s.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned long port = 0;
  try {
    std::size_t used = 0;
    port = std::stoul(s.substr(colon + 1), &used);
    if (used != s.size() - colon - 1) throw std::invalid_argument("port");
  } catch (const std::exception&) {
    throw std::invalid_argument(option + ": not a port number in '" + s + "'");
  }
  if (port > 65535) throw std::invalid_argument(option + ": port out of range in '" + s + "'");
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  if (ec) throw std::invalid_argument(option + ": not an IP address: '" + host + "'");
  return {addr, static_cast<unsigned short>(port)};
}

// Deadlines of one connection: the whole request, however slowly it comes
// (a client that dribbles a header byte every few seconds is dropped at
// it), and the whole response.
constexpr std::chrono::seconds kRequestDeadline{5};
constexpr std::chrono::seconds kResponseDeadline{10};
// Connections at once; one more is closed at once (a flood of idle
// connections costs at most this many sockets and buffers).
constexpr std::size_t kMaxConnections = 64;

}  // namespace

struct MetricsServer::Impl {
  // Declared before io: sessions that io still owns when it is destroyed
  // use them.
  std::string option, program;
  Render render;
  std::size_t connections = 0;  // the server's thread only
  std::atomic<std::uint64_t> served{0};
  boost::asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;

  void accept_next();
};

namespace {

// One connection: read a request, answer it, close. Every step is
// asynchronous on the server's one thread, so a slow client waits alone.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, MetricsServer::Impl& server) : stream_(std::move(socket)), server_(server) {
    ++server_.connections;
  }
  ~Session() { --server_.connections; }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    parser_.header_limit(8192);
    parser_.body_limit(0);
    stream_.expires_after(kRequestDeadline);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec) return close();  // timed out, malformed, too large, or gone
    const auto& req = parser_.get();
    res_.version(req.version());
    res_.keep_alive(false);
    res_.set(http::field::server, server_.program);
    const auto target = req.target();
    const bool known = target == "/metrics" || target == "/";
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res_.result(http::status::method_not_allowed);
      res_.set(http::field::allow, "GET, HEAD");
      res_.body() = "only GET\n";
    } else if (!known) {
      res_.result(http::status::not_found);
      res_.body() = server_.program + " serves /metrics\n";
    } else {
      res_.result(http::status::ok);
      res_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      try {
        res_.body() = server_.render();
      } catch (const std::exception& e) {
        res_.result(http::status::internal_server_error);
        res_.body() = std::string(e.what()) + "\n";
      }
    }
    res_.prepare_payload();
    serializer_.emplace(res_);
    stream_.expires_after(kResponseDeadline);
    const auto done = [self = shared_from_this()](beast::error_code wec, std::size_t) {
      if (!wec) self->server_.served.fetch_add(1, std::memory_order_relaxed);
      self->close();
    };
    if (req.method() == http::verb::head) {
      http::async_write_header(stream_, *serializer_, done);
    } else {
      http::async_write(stream_, *serializer_, done);
    }
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  MetricsServer::Impl& server_;
  beast::flat_buffer buffer_{16384};
  http::request_parser<http::empty_body> parser_;
  http::response<http::string_body> res_;
  std::optional<http::response_serializer<http::string_body>> serializer_;
};

}  // namespace

void MetricsServer::Impl::accept_next() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == boost::asio::error::operation_aborted) return;  // stopping
    if (!ec) {
      if (connections >= kMaxConnections) {
        socket.close(ec);
      } else {
        std::make_shared<Session>(std::move(socket), *this)->start();
      }
    }
    // A failed accept (out of descriptors, a connection reset before it was
    // taken) drops that one connection; the server goes on.
    accept_next();
  });
}

MetricsServer::MetricsServer(const std::string& listen, std::string option, std::string program, Render render)
    : impl_(std::make_unique<Impl>()) {
  impl_->option = std::move(option);
  impl_->program = std::move(program);
  impl_->render = std::move(render);
  const tcp::endpoint ep = parse_listen(listen, impl_->option);
  tcp::acceptor& acceptor = impl_->acceptor;
  boost::system::error_code ec;
  // Every step names the address: a port in use fails at bind, or at
  // listen when another socket took it in between.
  const auto check = [&](const char* step) {
    if (!ec) return;
    throw std::runtime_error(fmt::format("{} {}: cannot {}: {}{}", impl_->option, listen, step, ec.message(),
                                         ec == boost::asio::error::address_in_use
                                             ? " (another program listens there; choose another port)"
                                             : ""));
  };
  acceptor.open(ep.protocol(), ec);
  check("open a socket");
  acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  check("set SO_REUSEADDR");
  acceptor.bind(ep, ec);
  check("bind");
  acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  check("listen");
  impl_->accept_next();
}

MetricsServer::~MetricsServer() {
  if (impl_->thread.joinable()) {
    boost::asio::post(impl_->io, [impl = impl_.get()] {
      boost::system::error_code ignored;
      impl->acceptor.close(ignored);
      impl->io.stop();
    });
    impl_->thread.join();
  }
}

std::string MetricsServer::url() const {
  boost::system::error_code ec;
  const tcp::endpoint bound = impl_->acceptor.local_endpoint(ec);
  const std::string host =
      bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  return fmt::format("http://{}:{}/metrics", host, bound.port());
}

void MetricsServer::run_until_signal(const std::function<void()>& ready) {
  // Before `ready` (which tells the address): a script that reads it and
  // sends SIGTERM at once still gets a clean stop.
  boost::asio::signal_set signals(impl_->io, SIGINT, SIGTERM);
  if (ready) ready();
  signals.async_wait([this](beast::error_code, int) {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->io.stop();
  });
  impl_->io.run();
}

void MetricsServer::start() {
  // SIGINT and SIGTERM go to the program's other threads: a stop signal
  // must interrupt what they block in, not the server's wait.
  sigset_t stop_signals, before;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &before);
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

std::uint64_t MetricsServer::served() const noexcept { return impl_->served.load(std::memory_order_relaxed); }

}  // namespace shmbus::tools
