// A program run as a child process (fork + exec) whose stdout is read line
// by line through a pipe, with a deadline on every wait. What the
// multi-process tests' Peer (tests/multiprocess/peer_process.hpp) and the
// fault campaign's children (tests/chaos/chaos.cpp) share.
//
// A child never outlives the process that started it: it is killed
// (PR_SET_PDEATHSIG) when the starting thread's process dies, even by
// SIGKILL or a failed assertion, and the destructor kills and reaps a child
// that is still running. No GoogleTest dependency: callers report failures
// their own way. Also the state of a process as /proc shows it, for tests
// that stop one (SIGSTOP) and must know when the stop has landed.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace shmbus::test {

class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  enum class Capture { stdout_only, stdout_and_stderr };

  // Runs `path` with `args` (args[0] is argv[0]); the child's stdout (and,
  // if asked, its stderr) is the pipe read by line(); otherwise its stderr
  // is the parent's.
  ChildProcess(const std::string& path, std::vector<std::string> args, Capture capture = Capture::stdout_only) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      throw std::runtime_error("fork");
    }
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec. Killed with the
      // parent; if the parent is already gone, never start.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::dup2(fds[1], STDOUT_FILENO);
      if (capture == Capture::stdout_and_stderr) ::dup2(fds[1], STDERR_FILENO);
      ::execv(path.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  // A child still running is killed (and continued, should it be stopped)
  // and reaped: no process and no zombie is left behind.
  ~ChildProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::kill(pid_, SIGCONT);
      reap();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  void kill(int sig) const { ::kill(pid_, sig); }

  // The next line of output (without its '\n'); at end of output a last
  // unterminated line, then nullopt. nullopt also at the deadline.
  std::optional<std::string> line(Clock::time_point deadline) {
    for (;;) {
      if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      if (eof_) {
        if (buf_.empty()) return std::nullopt;
        return std::exchange(buf_, {});
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (n < 0 && errno != EINTR) return std::nullopt;
      if (n <= 0) continue;
      char tmp[4096];
      const ssize_t got = ::read(fd_, tmp, sizeof tmp);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        eof_ = true;
      else
        buf_.append(tmp, static_cast<std::size_t>(got));
    }
  }
  // Whether all of the output has been read.
  bool eof() const { return eof_; }

  // Reaps the process if it has exited; true while it has not.
  bool running() {
    if (reaped_) return false;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      reaped_ = true;
      status_ = st;
    }
    return !reaped_;
  }
  // Waits for the process to exit, up to the deadline; true if it did.
  bool wait_exit(Clock::time_point deadline) {
    while (running()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // Waits for the process to exit, however long that takes (a SIGKILLed
  // process exits at once).
  void reap() {
    if (reaped_) return;
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    status_ = st;
  }

  bool exited() const { return reaped_; }
  int status() const { return status_; }  // as from waitpid, once exited()
  // The exit code; -signal if it was killed; -1000 while not exited.
  int exit_code() const {
    if (!reaped_) return -1000;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return -WTERMSIG(status_);
    return -1000;
  }
  bool exited_ok() const { return exit_code() == 0; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
  bool eof_ = false;
  bool reaped_ = false;
  int status_ = 0;
};

// The state letter of /proc/PID/stat ('R', 'S', 'T' once a SIGSTOP has
// landed, 'Z' zombie...), or '?' if it cannot be read. The command name
// before it may hold spaces and parentheses.
inline char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

}  // namespace shmbus::test
