// Runs shmbus_test_peer as a separate process (fork + exec) and talks to it
// through its stdout, one line at a time, with a deadline on every wait.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace shmbus::test {

// "key=value key2=value2" after the first word of a line.
using Fields = std::map<std::string, std::string>;
inline Fields parse_fields(const std::string& line) {
  Fields f;
  std::istringstream in(line);
  std::string word;
  in >> word;  // the line's kind
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq != std::string::npos) f[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return f;
}
inline std::uint64_t u64(const Fields& f, const std::string& key) {
  const auto it = f.find(key);
  if (it == f.end() || it->second == "none") {
    ADD_FAILURE() << "missing field " << key;
    return ~std::uint64_t{0};
  }
  return std::stoull(it->second);
}

class Peer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Peer(std::vector<std::string> args) : args_(std::move(args)) {
    args_.insert(args_.begin(), SHMBUS_TEST_PEER);
    std::vector<char*> argv;
    for (auto& a : args_) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec. A peer must not
      // outlive a test process that crashed or failed an assertion.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::dup2(fds[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
  }
  ~Peer() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      reap();
    }
    if (out_ >= 0) ::close(out_);
  }
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return !status_; }
  const std::vector<std::string>& lines() const { return lines_; }
  std::string describe() const {
    std::string s = "peer";
    for (std::size_t i = 1; i < args_.size(); ++i) s += " " + args_[i];
    s += " (pid " + std::to_string(pid_) + ")";
    return s;
  }

  // The next stdout line starting with `kind` (earlier lines are kept in
  // lines()), or nullopt after `timeout` or at end of output.
  std::optional<std::string> wait_line(const std::string& kind, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      while (next_ < lines_.size()) {
        const std::string& l = lines_[next_++];
        if (l.rfind(kind, 0) == 0) return l;
      }
      if (!read_more(deadline)) return std::nullopt;
    }
  }

  // Waits for the process to exit (reading all of its output) and returns its
  // exit code; -signal if it was killed; fails the test after `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!eof_) {
      if (!read_more(deadline) && !eof_) {
        ADD_FAILURE() << describe() << " did not exit within " << timeout.count() << " ms; killing it";
        ::kill(pid_, SIGKILL);
        break;
      }
    }
    reap();
    return exit_code();
  }

  void kill(int sig) { ::kill(pid_, sig); }

  // Reaps the process (blocking); a SIGKILLed process exits at once.
  void reap() {
    if (status_) return;
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    status_ = st;
  }
  int exit_code() const {
    if (!status_) return -1000;
    if (WIFEXITED(*status_)) return WEXITSTATUS(*status_);
    if (WIFSIGNALED(*status_)) return -WTERMSIG(*status_);
    return -1000;
  }

 private:
  // Reads what is available before `deadline`; false on timeout or EOF.
  bool read_more(Clock::time_point deadline) {
    if (eof_) return false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out_, POLLIN, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof_ = true;
        if (!partial_.empty()) lines_.push_back(std::move(partial_));
        return false;
      }
      partial_.append(buf, static_cast<std::size_t>(n));
      bool got = false;
      for (auto nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n')) {
        lines_.push_back(partial_.substr(0, nl));
        partial_.erase(0, nl + 1);
        got = true;
      }
      if (got) return true;
    }
  }

  std::vector<std::string> args_;
  pid_t pid_ = -1;
  int out_ = -1;
  bool eof_ = false;
  std::string partial_;
  std::vector<std::string> lines_;
  std::size_t next_ = 0;
  std::optional<int> status_;
};

}  // namespace shmbus::test
