#include "nats_fixture.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nats/nats.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "nats/connection.hpp"

extern char** environ;

namespace shmbus::nats::test {

using namespace std::chrono_literals;

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = 1ms;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return done();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return true;
}

Process::Process(const std::vector<std::string>& args, const std::string& log) : log_(log) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
  const int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    ADD_FAILURE() << "cannot start " << args[0] << ": " << std::strerror(rc);
    pid_ = 0;
  }
}

Process::~Process() {
  if (pid_ > 0) kill_and_wait(SIGKILL);
}

Process::Process(Process&& o) noexcept : pid_(o.pid_), status_(o.status_), log_(std::move(o.log_)) { o.pid_ = 0; }

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0) kill_and_wait(SIGKILL);
    pid_ = o.pid_;
    status_ = o.status_;
    log_ = std::move(o.log_);
    o.pid_ = 0;
  }
  return *this;
}

bool Process::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    status_ = status;
    pid_ = 0;
    return false;
  }
  return true;
}

int Process::kill_and_wait(int sig) {
  if (pid_ <= 0) return status_;
  ::kill(pid_, sig);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = 0;
  status_ = status;
  return status;
}

int Process::wait(std::chrono::milliseconds timeout) {
  if (!wait_until([this] { return !running(); }, timeout)) return -1;
  return status_;
}

std::string Process::log_text() const {
  std::ifstream f(log_);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

NatsServer::NatsServer(std::string config) {
  const std::string bin = NATS_SERVER_BINARY;
  if (bin.empty() || ::access(bin.c_str(), X_OK) != 0) {
    ADD_FAILURE() << "nats-server not found: apt-get install nats-server (scripts/install-deps.sh installs it)";
    return;
  }
  char tmpl[] = "/tmp/shmbus-nats-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  dir_ = tmpl;
  if (!config.empty()) {
    config_file_ = dir_ + "/server.conf";
    std::ofstream(config_file_) << config;
  }
  // The free port may be taken by someone else before the server binds it:
  // then the server exits, and another port is tried.
  for (int attempt = 0; attempt < 10 && !ok_; ++attempt) {
    port_ = free_port();
    ok_ = start();
  }
  if (!ok_) ADD_FAILURE() << "nats-server did not start: " << proc_.log_text();
}

NatsServer::~NatsServer() {
  stop();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string NatsServer::url() const { return "nats://127.0.0.1:" + std::to_string(port_); }

bool NatsServer::start() {
  const std::string log = dir_ + "/server-" + std::to_string(starts_++) + ".log";
  std::vector<std::string> argv{NATS_SERVER_BINARY, "-js", "-a", "127.0.0.1", "-p", std::to_string(port_), "-sd",
                                dir_ + "/store", "--http_port", "0", "-n", "shmbus-test"};
  if (!config_file_.empty()) {
    argv.push_back("-c");
    argv.push_back(config_file_);
  }
  proc_ = Process(argv, log);
  // Ready once it logs so (and still running); an exit means a lost port race.
  bool ready = false;
  wait_until(
      [&] {
        if (!proc_.running()) return true;
        ready = proc_.log_text().find("Server is ready") != std::string::npos;
        return ready;
      },
      20s);
  if (!ready) proc_.kill_and_wait(SIGKILL);
  return ready;
}

void NatsServer::stop() { proc_.kill_and_wait(SIGTERM); }

bool NatsServer::restart(std::chrono::milliseconds down) {
  stop();
  std::this_thread::sleep_for(down);
  ok_ = start();
  return ok_;
}

namespace {

struct Js {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  explicit Js(const std::string& url) {
    if (natsConnection_ConnectTo(&nc, url.c_str()) != NATS_OK) return;
    if (natsConnection_JetStream(&js, nc, nullptr) != NATS_OK) js = nullptr;
  }
  ~Js() {
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) natsConnection_Destroy(nc);
  }
};

}  // namespace

bool NatsServer::create_stream(const std::string& stream, const std::string& subject) {
  Js c(url());
  if (c.js == nullptr) return false;
  jsErrCode code = static_cast<jsErrCode>(0);
  return shmbus::nats::add_file_stream(c.js, stream, subject, code) == NATS_OK;
}

std::int64_t NatsServer::stream_messages(const std::string& stream) {
  Js c(url());
  if (c.js == nullptr) return -1;
  jsStreamInfo* si = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  if (js_GetStreamInfo(&si, c.js, stream.c_str(), nullptr, &code) != NATS_OK) return -1;
  const auto n = static_cast<std::int64_t>(si->State.Msgs);
  jsStreamInfo_Destroy(si);
  return n;
}

}  // namespace shmbus::nats::test
