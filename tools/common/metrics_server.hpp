// A small HTTP server for a Prometheus scraper: GET (or HEAD) /metrics (and
// /) answers with the text a render function makes afresh for each request.
//
// Every client is untrusted. The server runs on one thread and every
// connection is asynchronous with deadlines of its own, so no client can
// stall the others: a request must be complete within 5 s of the connect (a
// client that dribbles its headers a byte at a time is dropped then, while
// every other scrape is answered meanwhile), in at most 8 KiB of headers; a
// response must be taken within 10 s; beyond 64 connections at once a new
// one is closed at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace shmbus::tools {

class MetricsServer {
 public:
  // The text of one scrape. Called on the server's thread; an exception is
  // answered with status 500 and its message.
  using Render = std::function<std::string()>;

  // Binds `listen`, "HOST:PORT" (HOST an IP address, IPv6 in brackets; port
  // 0 picks a free one). `option` names the option in errors ("--listen").
  // Throws std::invalid_argument for a malformed address and
  // std::runtime_error, naming the address and the step, when it cannot
  // listen there.
  MetricsServer(const std::string& listen, std::string option, std::string program, Render render);
  ~MetricsServer();  // stops the server and joins its thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // http://HOST:PORT/metrics with the port really bound.
  std::string url() const;

  // Serves on the calling thread until SIGINT or SIGTERM (caught from the
  // moment `ready` is called, e.g. to print url()).
  void run_until_signal(const std::function<void()>& ready = {});
  // Serves on a thread of its own until destroyed.
  void start();

  std::uint64_t served() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The latest value of something one thread updates and the metrics thread
// reads (a copy under a mutex: for stats structs updated a few times a second).
template <class T>
class Latest {
 public:
  void set(const T& v) {
    std::lock_guard lock(m_);
    v_ = v;
  }
  T get() const {
    std::lock_guard lock(m_);
    return v_;
  }

 private:
  mutable std::mutex m_;
  T v_{};
};

}  // namespace shmbus::tools
