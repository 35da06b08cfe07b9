// shmbus-bridge mirror, in process: a real source bus served by a Server on
// its own thread, run_mirror() on another, and a local consumer that checks
// what the mirror's local bus shows: the source's sequence numbers, no loss
// where none happened, and a gap it could not fill reported with its exact size.
#include <unistd.h>

#include <gtest/gtest.h>
#include <shmbus/shmbus.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bridge/log.hpp"
#include "bridge/mirror.hpp"
#include "bridge/server.hpp"
#include "large_payload.hpp"

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

using shmbus::test::large_payload;

struct SentMessage {
  std::uint64_t seq;
  std::size_t index, size;
};

// Publishes messages of 1 byte to 4 MiB, four rounds (the 16 MiB ring wraps
// and a span meets the end of a lap), once the mirror's subscription holds
// the source; then closes it.
std::vector<SentMessage> publish_large(Bus& src) {
  const std::uint32_t max_payload = src.info().max_payload;
  const std::vector<std::size_t> sizes = {1,       100,       max_payload, max_payload + 1, 3000,
                                          64 << 10, 1u << 20, 4u << 20,    0,               max_payload - 1};
  std::vector<SentMessage> sent;
  Producer p(src, ProducerOptions{.wait_for_readers = 1, .wait_for_readers_timeout = 10s});
  std::size_t i = 0;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t size : sizes) {
      const PublishResult r = p.publish(large_payload(i, size));
      EXPECT_TRUE(r) << size;
      sent.push_back(SentMessage{r.seq, i++, size});
    }
  }
  p.close();
  return sent;
}

struct LocalRead {
  std::vector<SentMessage> got;  // seq, index unused, size
  std::vector<std::vector<std::byte>> payloads;
  std::uint64_t lost = 0;
  bool ended = false;
};

LocalRead read_local(Consumer& local) {
  LocalRead r;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!r.ended && std::chrono::steady_clock::now() < deadline) {
    const PollResult p = local.poll(
        [&](const Message& m) {
          r.got.push_back(SentMessage{m.seq, m.records, m.payload.size()});
          r.payloads.emplace_back(m.payload.begin(), m.payload.end());
        },
        16, 100ms);
    r.lost += p.lost;
    r.ended = p.end_of_stream;
  }
  return r;
}

// A source bus of 16 MiB (records of 1 KiB) served with --slow block.
struct LargeSource {
  Names n;
  Bus src;
  Server server;
  std::thread st;
  static ServeOptions serve_options(const std::string& bus) {
    ServeOptions so;
    so.bus = bus;
    so.slow = SlowPolicy::block;  // the source waits for the mirror
    return so;
  }
  LargeSource()
      : src(Bus::create(n.src, BusOptions{16384, 1024, Policy::block, 8})), server(serve_options(n.src)) {
    st = std::thread([this] { server.run(); });
  }
  ~LargeSource() {
    server.stop();
    st.join();
  }
  MirrorOptions mirror_options() const {
    MirrorOptions mo;
    mo.remote.port = server.port();
    mo.remote.bus = n.src;
    mo.bus = n.dst;
    mo.backoff_max = 100ms;
    return mo;
  }
};

TEST(BridgeMirror, MessagesThatSpanRecordsKeepTheirSequencesAndBytes) {
  set_quiet(true);
  LargeSource s;
  // The local bus as the mirror would make it (the source's geometry), made
  // first so that a reader holds it from the first message on.
  Bus dst = Bus::create(s.n.dst, BusOptions{16384, 1024, Policy::block, 8});
  Consumer local(dst);
  RunningMirror m(s.mirror_options());
  std::vector<SentMessage> sent;
  std::thread producer([&] { sent = publish_large(s.src); });
  const LocalRead r = read_local(local);
  producer.join();
  m.t.join();
  EXPECT_TRUE(r.ended);
  EXPECT_EQ(m.end, MirrorEnd::end_of_stream);
  EXPECT_EQ(r.lost, 0u);  // the local bus pads where the source did: nothing looks lost
  EXPECT_EQ(m.last.gaps, 0u);
  ASSERT_EQ(r.got.size(), sent.size());
  std::size_t padded = 0;
  for (std::size_t k = 0; k < sent.size(); ++k) {
    EXPECT_EQ(r.got[k].seq, sent[k].seq) << k;
    EXPECT_EQ(r.got[k].index, records_for(sent[k].size, 1024)) << k;  // records
    EXPECT_TRUE(r.payloads[k] == large_payload(sent[k].index, sent[k].size)) << k;
    if (k > 0 && sent[k].seq > sent[k - 1].seq + records_for(sent[k - 1].size, 1024)) ++padded;
  }
  EXPECT_GT(padded, 0u);
}

// A local ring twice the source's ends its laps elsewhere: the sequences
// the source's padding took are skipped (local readers see them as lost);
// every message keeps its sequence.
TEST(BridgeMirror, ALargerLocalRingKeepsSequencesAndCountsTheSourcesPaddingAsAGap) {
  set_quiet(true);
  LargeSource s;
  Bus dst = Bus::create(s.n.dst, BusOptions{32768, 1024, Policy::block, 8});
  Consumer local(dst);
  RunningMirror m(s.mirror_options());
  std::vector<SentMessage> sent;
  std::thread producer([&] { sent = publish_large(s.src); });
  const LocalRead r = read_local(local);
  producer.join();
  m.t.join();
  EXPECT_TRUE(r.ended);
  ASSERT_EQ(r.got.size(), sent.size());
  std::uint64_t padding = 0;
  for (std::size_t k = 0; k < sent.size(); ++k) {
    EXPECT_EQ(r.got[k].seq, sent[k].seq) << k;
    EXPECT_TRUE(r.payloads[k] == large_payload(sent[k].index, sent[k].size)) << k;
    if (k > 0) padding += sent[k].seq - (sent[k - 1].seq + records_for(sent[k - 1].size, 1024));
  }
  EXPECT_GT(padding, 0u);
  EXPECT_EQ(r.lost, padding);
  EXPECT_EQ(m.last.lost, padding);
}

// Sequence numbers count records: a local bus with other records is refused
// with both sizes.
TEST(BridgeMirror, RefusesALocalBusWithOtherRecords) {
  set_quiet(true);
  LargeSource s;
  Bus dst = Bus::create(s.n.dst, BusOptions{16384, 512, Policy::block, 8});
  try {
    run_mirror(s.mirror_options(), [] { return false; }, 0ms, {});
    ADD_FAILURE() << "mirror accepted records of 512 bytes for a source of 1024";
  } catch (const std::runtime_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("records of 512 bytes, the remote bus of 1024"), std::string::npos) << w;
  }
  EXPECT_EQ(dst.head(), 0u);
}

// A local ring half the source's takes messages up to 4 MiB - 24 bytes: the
// mirror republishes everything before the first longer one, then stops
// with both sizes and the capacity that takes it; its local bus's next
// sequence is that message's, where a mirror into a larger bus resumes.
TEST(BridgeMirror, StopsAtAMessageLongerThanTheLocalBusTakes) {
  set_quiet(true);
  LargeSource s;
  Bus dst = Bus::create(s.n.dst, BusOptions{8192, 1024, Policy::block, 8});
  std::thread producer([&] { (void)publish_large(s.src); });
  std::string error;
  std::atomic<bool> stop{false};
  std::thread watchdog([&] {  // a mirror that never stops fails the test instead of hanging it
    for (int i = 0; i < 300 && !stop; ++i) std::this_thread::sleep_for(100ms);
    stop = true;
  });
  try {
    run_mirror(s.mirror_options(), [&] { return stop.load(); }, 0ms, {});
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  stop = true;
  watchdog.join();
  s.server.stop();  // the source waits for the mirror's subscription no more
  producer.join();
  // Messages 0..6 take 1+1+1+2+3+65+1025 records; the eighth has 4 MiB.
  const std::uint64_t seq = 1 + 1 + 1 + 2 + 3 + 65 + 1025;
  EXPECT_NE(error.find(fmt::format("message at seq {} has {} bytes, more than the {} the local bus accepts "
                                   "(capacity 8192): recreate it with a capacity of 16384 or more",
                                   seq, 4u << 20, dst.info().max_message)),
            std::string::npos)
      << error;
  EXPECT_EQ(dst.head(), seq);
}

}  // namespace
}  // namespace shmbus::bridge
