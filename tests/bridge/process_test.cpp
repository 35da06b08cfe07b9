// The real shmbus-bridge program in its own process: a million messages from
// an in-process producer, through `serve`, to a subscriber that verifies every
// sequence and payload; `serve` is SIGKILLed and restarted mid-stream and the
// subscriber resumes from the first sequence it lacks, with no gap and no
// duplicate.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <shmbus/shmbus.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client.hpp"

extern char** environ;

namespace shmbus::bridge {
namespace {

using namespace std::chrono_literals;

// A `shmbus-bridge serve` child; killed (SIGKILL) by the destructor if still running.
class ServeProcess {
 public:
  ServeProcess(const std::string& bus, std::uint16_t port) : log_(log_path()) {
    const std::string listen = "127.0.0.1:" + std::to_string(port);
    std::vector<std::string> args = {SHMBUS_BRIDGE, "serve", bus, "--listen", listen,
                                     "--stats-interval", "0"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_EQ(posix_spawn(&pid_, SHMBUS_BRIDGE, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    // Its first line says where it listens.
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      std::ifstream f(log_);
      std::string line;
      while (std::getline(f, line)) {
        const auto at = line.find(" on 127.0.0.1:");
        if (at != std::string::npos) port_ = static_cast<std::uint16_t>(std::stoi(line.substr(at + 14)));
      }
      if (port_ == 0) std::this_thread::sleep_for(10ms);
    }
  }
  ~ServeProcess() { kill(SIGKILL); ::unlink(log_.c_str()); }
  std::uint16_t port() const { return port_; }
  int kill(int sig) {
    if (pid_ <= 0) return 0;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
    return status;
  }

 private:
  static std::string log_path() {
    static int n = 0;
    return "/tmp/shmbus-bridge-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".log";
  }
  std::string log_;
  pid_t pid_ = 0;
  std::uint16_t port_ = 0;
};

std::string payload_for(std::uint64_t seq) { return "p" + std::to_string(seq * 2654435761u); }

TEST(BridgeProcess, MillionMessagesThroughServeKilledAndRestartedMidStreamNoGapNoDuplicate) {
  const std::uint64_t kCount = SHMBUS_BRIDGE_MESSAGES;
  constexpr std::uint64_t kCapacity = 1 << 16;
  const std::string name = "bt-proc-" + std::to_string(::getpid());
  Bus bus = Bus::create(name, BusOptions{kCapacity, 64, Policy::block, 8});
  struct Remove {
    std::string n;
    ~Remove() {
      try {
        Bus::remove(n);
      } catch (...) {
      }
    }
  } remove{name};

  // The producer never runs more than half a ring ahead of what the
  // subscriber has, so whatever it lacks after a crash is still retained.
  std::atomic<std::uint64_t> received{0};  // relaxed: a pacing hint only
  std::atomic<bool> give_up{false};
  std::thread producer([&] {
    Producer p(bus);
    for (std::uint64_t seq = 0; seq < kCount && !give_up.load(std::memory_order_relaxed);) {
      if (seq >= received.load(std::memory_order_relaxed) + kCapacity / 2) {
        std::this_thread::sleep_for(50us);
        continue;
      }
      const std::string s = payload_for(seq);
      if (p.publish(std::as_bytes(std::span<const char>(s.data(), s.size())), 100ms)) ++seq;
    }
  });

  auto serve = std::make_unique<ServeProcess>(name, 0);
  const std::uint16_t port = serve->port();
  ASSERT_NE(port, 0) << "shmbus-bridge serve did not start";
  ClientOptions co;
  co.port = port;
  co.bus = name;
  std::uint64_t next = 0, duplicates_or_gaps = 0, bad_payloads = 0, reconnects = 0;
  bool ended = false, killed = false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    co.start = next == 0 ? StartKind::earliest : StartKind::sequence;
    co.start_seq = next;
    try {
      Client c(co);
      if (c.welcome().first_seq != next) ++duplicates_or_gaps;
      while (true) {
        Event e = c.next();
        if (e.kind == Event::Kind::end) {
          ended = true;
          break;
        }
        ASSERT_EQ(e.kind, Event::Kind::batch) << "a loss on a lossless path";
        for (BatchMessage m : e.batch) {
          if (m.seq != next) ++duplicates_or_gaps;
          const std::string want = payload_for(m.seq);
          if (std::string_view(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()) != want) {
            ++bad_payloads;
          }
          next = m.seq + 1;
        }
        received.store(next, std::memory_order_relaxed);
        if (!killed && next >= kCount / 3) {
          killed = true;
          serve->kill(SIGKILL);  // mid-stream, without warning
          serve = std::make_unique<ServeProcess>(name, port);
        }
      }
    } catch (const ClientError& e) {
      ++reconnects;
      std::this_thread::sleep_for(20ms);
    }
  }
  give_up.store(true, std::memory_order_relaxed);
  producer.join();
  EXPECT_TRUE(ended);
  EXPECT_TRUE(killed);
  EXPECT_GE(reconnects, 1u);
  EXPECT_EQ(next, kCount);
  EXPECT_EQ(duplicates_or_gaps, 0u);
  EXPECT_EQ(bad_payloads, 0u);
  EXPECT_EQ(serve->kill(SIGTERM), 0) << "serve should exit 0 on SIGTERM";
}

}  // namespace
}  // namespace shmbus::bridge
