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
#include <nlohmann/json.hpp>
#include <shmbus/inspect.hpp>
#include <shmbus/shmbus.hpp>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bridge/client.hpp"
#include "tools/common/synthetic.hpp"

extern char** environ;

namespace shmbus::bridge {
namespace {

using namespace std::chrono_literals;

// A child program with stderr in a log file and stdout on /dev/null; killed
// (SIGKILL) by the destructor if still running.
class Child {
 public:
  explicit Child(std::vector<std::string> args) : log_(log_path()) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Child() {
    kill(SIGKILL);
    ::unlink(log_.c_str());
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  // Sends `sig` and returns the wait status.
  int kill(int sig) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, sig);
    return wait();
  }
  int wait() {
    if (pid_ > 0) ::waitpid(pid_, &status_, 0);
    pid_ = 0;
    return status_;
  }
  // Waits up to `limit`; false if it is still running.
  bool wait_for(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (pid_ > 0 && std::chrono::steady_clock::now() < until) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) pid_ = 0;
      else std::this_thread::sleep_for(10ms);
    }
    return pid_ == 0;
  }
  std::string log() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  static std::string log_path() {
    static int n = 0;
    return "/tmp/shmbus-bridge-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".log";
  }
  std::string log_;
  pid_t pid_ = 0;
  int status_ = 0;
};

// A `shmbus-bridge serve` child.
class ServeProcess {
 public:
  ServeProcess(const std::string& bus, std::uint16_t port, std::vector<std::string> extra = {})
      : child_(args(bus, port, std::move(extra))) {
    // Its first line says where it listens.
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      std::istringstream log(child_.log());
      std::string line;
      while (std::getline(log, line)) {
        const auto at = line.find(" on 127.0.0.1:");
        if (at != std::string::npos) port_ = static_cast<std::uint16_t>(std::stoi(line.substr(at + 14)));
      }
      if (port_ == 0) std::this_thread::sleep_for(10ms);
    }
  }
  std::uint16_t port() const { return port_; }
  int kill(int sig) { return child_.kill(sig); }
  std::string log() const { return child_.log(); }

 private:
  static std::vector<std::string> args(const std::string& bus, std::uint16_t port, std::vector<std::string> extra) {
    std::vector<std::string> a = {SHMBUS_BRIDGE, "serve", bus, "--listen", "127.0.0.1:" + std::to_string(port),
                                  "--stats-interval", "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  Child child_;
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

struct RemoveBus {
  std::string n;
  ~RemoveBus() {
    try {
      Bus::remove(n);
    } catch (...) {
    }
  }
};

std::size_t live_readers(const std::string& bus) {
  std::size_t n = 0;
  for (const ReaderView& r : Inspector::open(bus).snapshot().readers) n += r.liveness == Liveness::alive;
  return n;
}

// producer -> source bus -> serve -> mirror -> local bus -> shmbus-consumer --verify,
// optionally SIGKILLing and restarting serve (at a third: the mirror must
// reconnect) and then the mirror (once it has moved on after that: the new one
// must resume mid-stream). The consumer checks every sequence and payload.
void mirror_pipeline(bool kill_mirror, bool kill_serve) {
  const std::uint64_t kCount = SHMBUS_BRIDGE_MESSAGES;
  constexpr std::uint64_t kCapacity = 1 << 16;
  const std::string src = "bt-msrc-" + std::to_string(::getpid());
  const std::string dst = "bt-mdst-" + std::to_string(::getpid());
  Bus src_bus = Bus::create(src, BusOptions{kCapacity, 128, Policy::block, 8});
  RemoveBus rm_src{src};
  // Made here so that the consumer is attached before anything arrives.
  Bus dst_bus = Bus::create(dst, BusOptions{kCapacity, 128, Policy::block, 8});
  RemoveBus rm_dst{dst};

  Child consumer({SHMBUS_CONSUMER, dst, "--verify", "--follow", "--count", std::to_string(kCount), "--format",
                  "none", "--json"});
  for (int i = 0; i < 500 && live_readers(dst) == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(live_readers(dst), 1u) << consumer.log();

  // The producer never runs more than half a ring ahead of what the local
  // bus has, so whatever the mirror lacks after a crash is still retained.
  std::atomic<bool> give_up{false};
  std::thread producer([&] {
    Producer p(src_bus);
    std::vector<std::byte> buf(64);
    for (std::uint64_t seq = 0; seq < kCount && !give_up.load(std::memory_order_relaxed);) {
      if (seq >= dst_bus.head() + kCapacity / 2) {
        std::this_thread::sleep_for(50us);
        continue;
      }
      tools::synthetic_write(buf, seq, 0);
      if (p.publish(buf, 100ms)) ++seq;
      // Paced, so that the loop below (which looks every 5 ms) sees each
      // kill point pass before the stream is over, however fast the bridge.
      if (seq % 500 == 0) std::this_thread::sleep_for(1ms);
    }
  });

  auto serve = std::make_unique<ServeProcess>(src, 0, std::vector<std::string>{"--slow", "block"});
  const std::uint16_t port = serve->port();
  ASSERT_NE(port, 0) << "shmbus-bridge serve did not start";
  const std::vector<std::string> mirror_args = {SHMBUS_BRIDGE, "mirror", "--connect",
                                                "127.0.0.1:" + std::to_string(port), "--remote-bus", src,
                                                "--bus", dst, "--stats-interval", "0", "--backoff-max", "200ms"};
  auto mirror = std::make_unique<Child>(mirror_args);
  bool mirror_killed = false, serve_killed = false;
  std::uint64_t head_after_serve = 0;
  std::string first_mirror_log;  // the mirror that lived through serve's death
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!consumer.wait_for(5ms) && std::chrono::steady_clock::now() < deadline) {
    const std::uint64_t have = dst_bus.head();
    if (kill_serve && !serve_killed && have >= kCount / 3) {
      serve_killed = true;
      serve->kill(SIGKILL);  // mid-stream, without warning
      serve = std::make_unique<ServeProcess>(src, port, std::vector<std::string>{"--slow", "block"});
      head_after_serve = dst_bus.head();
    }
    const std::uint64_t mirror_at = kill_serve ? head_after_serve + kCount / 20 : kCount / 3;
    if (kill_mirror && !mirror_killed && (serve_killed || !kill_serve) && have >= mirror_at) {
      mirror_killed = true;
      first_mirror_log = mirror->log();
      mirror->kill(SIGKILL);  // the local bus's producer dies with it
      mirror = std::make_unique<Child>(mirror_args);
    }
  }
  if (first_mirror_log.empty()) first_mirror_log = mirror->log();
  give_up.store(true, std::memory_order_relaxed);
  producer.join();
  const int status = consumer.wait();
  const std::string log = consumer.log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  EXPECT_EQ(kill_mirror, mirror_killed);
  EXPECT_EQ(kill_serve, serve_killed);
  const auto line = log.substr(log.rfind("\n{") + 1);  // the JSON summary is the last line
  const auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << log;
  EXPECT_EQ(j["messages"], kCount) << log;
  EXPECT_EQ(j["first_seq"], 0u) << log;
  EXPECT_EQ(j["last_seq"], kCount - 1) << log;
  EXPECT_EQ(j["lost"], 0u) << log;
  EXPECT_EQ(j["verify"]["ok"], true) << log;
  EXPECT_EQ(j["verify"]["problems"], 0u) << log;
  // The source ended its stream: the mirror forwards the end and exits 0.
  EXPECT_TRUE(mirror->wait_for(10s)) << mirror->log();
  const int ms = mirror->wait();
  EXPECT_TRUE(WIFEXITED(ms) && WEXITSTATUS(ms) == 0) << mirror->log();
  EXPECT_EQ(mirror->log().find("gap:"), std::string::npos) << mirror->log();
  // The restarted mirror resumed mid-stream, and lived through serve's death.
  if (kill_mirror) {
    EXPECT_EQ(mirror->log().find("from seq 0\n"), std::string::npos) << mirror->log();
  }
  if (kill_serve) {
    EXPECT_NE(first_mirror_log.find("reconnecting in"), std::string::npos) << first_mirror_log;
  }
  std::printf("%s", mirror->log().c_str());
}

TEST(BridgeProcess, MirrorRepublishesAMillionMessagesWithTheirSequenceNumbers) {
  mirror_pipeline(false, false);
}

TEST(BridgeProcess, MirrorAndServeSigkilledMidStreamResumeWithNoGapNoDuplicate) {
  mirror_pipeline(true, true);
}

// shmbus-consumer tcp:// through the real `serve`: synthetic messages of 24
// bytes to 4 MiB (several spanning records) arrive whole, each under its own
// sequence (--verify checks every payload's sequence and checksum, and that
// nothing is missing between sequences that count records).
TEST(BridgeProcess, ConsumerOverTcpVerifiesMessagesThatSpanRecords) {
  const std::string src = "bt-lsrc-" + std::to_string(::getpid());
  Bus src_bus = Bus::create(src, BusOptions{16384, 1024, Policy::block, 8});  // 16 MiB: no lap ends in this run
  RemoveBus rm_src{src};
  const std::size_t max_payload = src_bus.info().max_payload;
  const std::vector<std::size_t> sizes = {24, 100, max_payload, max_payload + 1, 3000, 64 << 10, 1u << 20, 4u << 20,
                                          max_payload - 1, 24};
  ServeProcess serve(src, 0, {"--slow", "block"});
  ASSERT_NE(serve.port(), 0) << "shmbus-bridge serve did not start";
  Child consumer({SHMBUS_CONSUMER, "tcp://127.0.0.1:" + std::to_string(serve.port()) + "/" + src, "--verify",
                  "--count", std::to_string(sizes.size()), "--format", "none", "--json"});
  std::uint64_t last = 0;
  {
    // The subscriber's reader slot holds the bus: nothing is overwritten unread.
    Producer p(src_bus, ProducerOptions{.wait_for_readers = 1, .wait_for_readers_timeout = 10s});
    for (std::size_t size : sizes) {
      std::vector<std::byte> buf(size);
      tools::synthetic_write(buf, p.next_seq(), 0);
      const PublishResult r = p.publish(buf, 10s);
      ASSERT_TRUE(r) << size;
      last = r.seq;
    }
  }
  ASSERT_TRUE(consumer.wait_for(30s)) << consumer.log();
  const int status = consumer.wait();
  const std::string log = consumer.log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  const auto line = log.substr(log.rfind("\n{") + 1);  // the JSON summary is the last line
  const auto j = nlohmann::json::parse(line, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << log;
  EXPECT_EQ(j["messages"], sizes.size()) << log;
  EXPECT_EQ(j["first_seq"], 0u) << log;
  EXPECT_EQ(j["last_seq"], last) << log;
  EXPECT_GT(last, sizes.size());  // sequences count records
  EXPECT_EQ(j["lost"], 0u) << log;
  EXPECT_EQ(j["verify"]["ok"], true) << log;
  EXPECT_EQ(j["verify"]["problems"], 0u) << log;
}

}  // namespace
}  // namespace shmbus::bridge
