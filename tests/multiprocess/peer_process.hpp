// Runs shmbus_test_peer as a separate process (fork + exec, through
// tests/lib/child_process.hpp; isolated, if asked, through
// tests/lib/isolation.hpp) and talks to it through its stdout, one line
// at a time, with a deadline on every wait.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "child_process.hpp"
#include "isolation.hpp"

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
  using Clock = ChildProcess::Clock;

  explicit Peer(std::vector<std::string> args, Isolation iso = Isolation::none)
      : args_(isolated(iso, with_program(std::move(args)))), child_(args_[0], args_) {}
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  pid_t pid() const { return child_.pid(); }
  bool running() const { return !child_.exited(); }
  const std::vector<std::string>& lines() const { return lines_; }
  std::string describe() const {
    std::string s = "peer";
    for (std::size_t i = 1; i < args_.size(); ++i) s += " " + args_[i];
    if (args_[0] != SHMBUS_TEST_PEER) s = args_[0] + " " + s;
    s += " (pid " + std::to_string(child_.pid()) + ")";
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
      auto l = child_.line(deadline);
      if (!l) return std::nullopt;
      lines_.push_back(std::move(*l));
    }
  }

  // Waits for the process to exit (reading all of its output) and returns its
  // exit code; -signal if it was killed; fails the test after `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!child_.eof()) {
      auto l = child_.line(deadline);
      if (l) {
        lines_.push_back(std::move(*l));
      } else if (!child_.eof()) {
        ADD_FAILURE() << describe() << " did not exit within " << timeout.count() << " ms; killing it";
        child_.kill(SIGKILL);
        break;
      }
    }
    child_.reap();
    return child_.exit_code();
  }

  void kill(int sig) { child_.kill(sig); }

  // Reaps the process (blocking); a SIGKILLed process exits at once.
  void reap() { child_.reap(); }
  int exit_code() const { return child_.exit_code(); }

 private:
  static std::vector<std::string> with_program(std::vector<std::string> args) {
    args.insert(args.begin(), SHMBUS_TEST_PEER);
    return args;
  }

  std::vector<std::string> args_;
  ChildProcess child_;  // killed and reaped, if still running, when the Peer goes
  std::vector<std::string> lines_;
  std::size_t next_ = 0;
};

// Everything a peer said, for failure messages.
inline std::string dump(const Peer& p) {
  std::string s = p.describe() + " said:";
  for (const auto& l : p.lines()) s += "\n  " + l;
  return s;
}

// Waits for `p` to exit and returns its "result" line's fields; fails if it
// did not exit 0.
inline Fields result_of(Peer& p, std::chrono::milliseconds timeout) {
  const int code = p.wait_exit(timeout);
  EXPECT_EQ(code, 0) << dump(p);
  for (auto it = p.lines().rbegin(); it != p.lines().rend(); ++it)
    if (it->rfind("result ", 0) == 0) return parse_fields(*it);
  ADD_FAILURE() << "no result line; " << dump(p);
  return {};
}

#ifdef SHMBUS_TEST_MESSAGES
// 1,000,000 in a normal build; fewer under sanitizers (set by CMake), or
// whatever SHMBUS_TEST_MESSAGES in the environment says.
inline std::uint64_t message_count() {
  if (const char* env = std::getenv("SHMBUS_TEST_MESSAGES")) return std::strtoull(env, nullptr, 10);
  return SHMBUS_TEST_MESSAGES;
}
#endif

}  // namespace shmbus::test
