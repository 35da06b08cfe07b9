// A real nats-server with JetStream for the tests: started on a free loopback
// port with its store in a temporary directory, restartable on the same port
// and store, stopped (and the directory removed) by the destructor. Plus the
// little process plumbing the gateway tests need: spawn a program with its
// stderr in a log file, wait for it with a deadline, kill it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shmbus::nats::test {

// Polls `done` until it is true or `timeout` passes; returns the last value.
// A loopback TCP port that was free a moment ago (bound to port 0, then closed).
std::uint16_t free_port();

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

class Process {
 public:
  Process() = default;
  // Starts argv[0] with the given arguments; stdout and stderr go to `log`.
  Process(const std::vector<std::string>& argv, const std::string& log);
  ~Process();  // SIGKILL if still running
  Process(Process&& o) noexcept;
  Process& operator=(Process&& o) noexcept;

  pid_t pid() const noexcept { return pid_; }
  bool running();
  // Sends `sig` and reaps it; returns the wait status.
  int kill_and_wait(int sig);
  // Waits up to `timeout` for it to exit; returns the wait status, or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  std::string log_text() const;

 private:
  pid_t pid_ = 0;
  int status_ = -1;
  std::string log_;
};

class NatsServer {
 public:
  // Fails the calling test (ADD_FAILURE) if nats-server is missing or does
  // not start. `config`: the text of a server configuration file (users,
  // permissions), or empty.
  explicit NatsServer(std::string config = {});
  ~NatsServer();
  NatsServer(const NatsServer&) = delete;
  NatsServer& operator=(const NatsServer&) = delete;

  bool ok() const noexcept { return ok_; }
  std::uint16_t port() const noexcept { return port_; }
  std::string url() const;
  // SIGTERM (JetStream flushes its store) and start again on the same port
  // and store, after `down` with no server.
  bool restart(std::chrono::milliseconds down = std::chrono::milliseconds(0));
  void stop();

  // Through the C client: create a file-storage stream on `subject`, and
  // read how many messages it holds (nullopt-like -1 when it cannot be asked).
  bool create_stream(const std::string& stream, const std::string& subject);
  std::int64_t stream_messages(const std::string& stream);

 private:
  bool start();
  std::string dir_;
  std::string config_file_;
  std::uint16_t port_ = 0;
  Process proc_;
  bool ok_ = false;
  int starts_ = 0;
};

}  // namespace shmbus::nats::test
