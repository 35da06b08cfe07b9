// shmbus-bridge mirror, in process: a real source bus served by a Server on
// its own thread, run_mirror() on another, and a local consumer that checks
// what the mirror's local bus shows: the source's sequence numbers, no loss
// where none happened, and a gap it could not fill reported with its exact size.
#include <unistd.h>

#include <gtest/gtest.h>
#include <shmbus/shmbus.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "bridge/log.hpp"
#include "bridge/mirror.hpp"
#include "bridge/server.hpp"

namespace shmbus::bridge {
namespace {

using namespace std::chrono_literals;

struct Names {
  std::string src = "bt-mir-src-" + std::to_string(::getpid());
  std::string dst = "bt-mir-dst-" + std::to_string(::getpid());
  ~Names() {
    for (const auto& n : {src, dst}) {
      try {
        Bus::remove(n);
      } catch (...) {
      }
    }
  }
};

void publish(Producer& p, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::string s = "m" + std::to_string(p.next_seq());
    ASSERT_TRUE(p.publish(std::as_bytes(std::span<const char>(s.data(), s.size()))));
  }
}

// run_mirror on a thread until it returns, or until stop().
struct RunningMirror {
  std::atomic<bool> stop_flag{false};
  std::atomic<bool> done{false};
  MirrorEnd end = MirrorEnd::stopped;
  MirrorStats last;
  std::thread t;
  explicit RunningMirror(MirrorOptions o) {
    t = std::thread([this, o] {
      end = run_mirror(o, [this] { return stop_flag.load(); }, std::chrono::milliseconds(0),
                       [this](const MirrorStats& s) { last = s; });
      done = true;
    });
  }
  void stop() {
    stop_flag = true;
    if (t.joinable()) t.join();
  }
  ~RunningMirror() { stop(); }
};

TEST(BridgeMirror, KeepsSourceSequencesAndReportsAGapItCannotFillAsAnExactLoss) {
  set_quiet(true);
  Names n;
  constexpr std::uint64_t kRing = 1024;
  Bus src = Bus::create(n.src, BusOptions{kRing, 128, Policy::block, 8});
  ServeOptions so;
  so.bus = n.src;
  Server server(so);
  std::thread st([&] { server.run(); });

  Producer p(src);
  publish(p, 2000);  // nobody reads: the source keeps only its newest records

  MirrorOptions mo;
  mo.remote.port = server.port();
  mo.remote.bus = n.src;
  mo.bus = n.dst;
  mo.backoff_max = 100ms;
  std::uint64_t stage1 = 0;
  {
    // A fresh local bus starts where the source does: nothing lost.
    RunningMirror m(mo);
    for (int i = 0; i < 500 && !(Bus::exists(n.dst) && Bus::open(n.dst).head() == 2000); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    m.stop();
    EXPECT_EQ(m.last.gaps, 0u);
    EXPECT_EQ(m.last.lost, 0u);
    stage1 = m.last.messages;  // what the source still retained
    EXPECT_GT(stage1, 0u);
    EXPECT_LE(stage1, kRing);
  }
  Bus dst = Bus::open(n.dst);
  ASSERT_EQ(dst.head(), 2000u);
  ConsumerOptions co;
  co.start = Start::earliest;
  Consumer local(dst, co);

  // The mirror is away while the source moves on past what it retains.
  publish(p, 3000);  // 2000..4999, of which the source keeps the newest
  RunningMirror m(mo);
  p.close();  // the stream ends; the mirror forwards the end and returns
  std::uint64_t got = 0, lost = 0, expect = 2000 - stage1, lost_before_first = 0;
  std::uint64_t first_after_gap = 0;
  bool in_order = true, ended = false;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    const PollResult r = local.poll(
        [&](const Message& msg) {
          if (got == 0) lost_before_first = lost;
          if (msg.seq >= 2000 && first_after_gap == 0) first_after_gap = msg.seq;
          in_order &= msg.seq == expect || (msg.seq > expect && expect == 2000);
          const std::string want = "m" + std::to_string(msg.seq);
          in_order &= std::string_view(reinterpret_cast<const char*>(msg.payload.data()), msg.payload.size()) == want;
          expect = msg.seq + 1;
          ++got;
        },
        256, 100ms);
    lost += r.lost;
    ended = r.end_of_stream;
  }
  m.t.join();
  EXPECT_TRUE(ended);
  EXPECT_TRUE(in_order);  // the source's sequences and payloads, in order, the gap the only jump
  EXPECT_EQ(m.end, MirrorEnd::end_of_stream);
  EXPECT_EQ(lost_before_first, 0u);  // the fresh bus's start was not a loss
  ASSERT_GT(first_after_gap, 2000u);
  EXPECT_EQ(got, stage1 + (5000 - first_after_gap));
  EXPECT_EQ(lost, first_after_gap - 2000);  // exactly the gap
  EXPECT_EQ(m.last.gaps, 1u);
  EXPECT_EQ(m.last.lost, first_after_gap - 2000);
  EXPECT_EQ(m.last.next_seq, 5000u);
  server.stop();
  st.join();
}

}  // namespace
}  // namespace shmbus::bridge
