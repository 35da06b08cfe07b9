// shmbus-nats end to end against a real nats-server -js: shmbus-producer ->
// bus A -> `shmbus-nats out` -> stream -> `shmbus-nats in` -> bus B ->
// shmbus-consumer --verify (each payload carries its own sequence, so B must
// hold every message under the source's sequence, once). Then the same with
// `out` SIGKILLed, `in` SIGKILLed and the server restarted mid-stream; and
// the errors a user meets first.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <shmbus/inspect.hpp>
#include <shmbus/shmbus.hpp>

#include <algorithm>
#include <bit>
#include <string>
#include <thread>
#include <vector>

#include "nats_fixture.hpp"
#include "large_payload.hpp"

namespace shmbus::nats::test {
namespace {

using namespace std::chrono_literals;

const std::string kNats = SHMBUS_NATS;
const std::string kProducer = SHMBUS_PRODUCER;
const std::string kConsumer = SHMBUS_CONSUMER;
constexpr std::uint64_t kMessages = SHMBUS_NATS_MESSAGES;

std::string log_path(const std::string& what) {
  static int n = 0;
  return "/tmp/shmbus-nats-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + "-" + what + ".log";
}

std::uint64_t head_of(const std::string& bus) {
  try {
    return Inspector::open(bus).snapshot().head;
  } catch (const Error&) {
    return 0;
  }
}

bool exited_ok(int status) { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Everything one pipeline needs: names, the server, the processes.
// What a pipeline's buses and producer look like.
struct Shape {
  std::uint64_t capacity = 0;   // A's and B's ring; 0: A holds every message
  std::uint32_t record_size = 64;
  std::string size = "40";      // the producer's --size
  std::string rate;             // the producer's --rate, if any
};

class Pipeline {
 public:
  explicit Pipeline(std::uint64_t count, Shape shape = {})
      : count_(count), shape_(std::move(shape)), tag_(std::to_string(::getpid()) + "-" + std::to_string(serial_++)) {
    a_ = "nt-a-" + tag_;
    b_ = "nt-b-" + tag_;
    stream_ = "NT" + tag_;
    subject_ = "shmbus." + a_;
    // By default A holds every message, so whatever `out` has not published
    // when it is killed is still there when it comes back; B's consumer
    // attaches before `in` starts. B has A's records and ring, so that every
    // message keeps its sequence.
    const std::uint64_t cap = shape_.capacity != 0 ? shape_.capacity : std::bit_ceil(count_);
    Bus::create(a_, BusOptions{cap, shape_.record_size, Policy::block, 8});
    Bus::create(b_, BusOptions{shape_.capacity != 0 ? cap : 1 << 16, shape_.record_size, Policy::block, 8});
  }
  ~Pipeline() {
    for (const auto& n : {a_, b_}) {
      try {
        Bus::remove(n);
      } catch (...) {
      }
    }
    for (const auto& l : logs_) ::unlink(l.c_str());
  }

  NatsServer server;

  bool create_stream() { return server.create_stream(stream_, subject_); }

  Process start_out() {
    return spawn({kNats, "out", a_, "--server", server.url(), "--stream", stream_, "--stats-interval", "0",
                  "--ack-timeout", "1000"},
                 "out");
  }
  Process start_in() {
    return spawn({kNats, "in", b_, "--server", server.url(), "--stream", stream_, "--durable", "gw", "--stats-interval",
                  "0"},
                 "in");
  }
  Process start_producer() {
    std::vector<std::string> args = {kProducer, a_, "--count", std::to_string(count_), "--size", shape_.size};
    if (!shape_.rate.empty()) args.insert(args.end(), {"--rate", shape_.rate});
    return spawn(args, "producer");
  }
  Process start_consumer() {
    Process p = spawn({kConsumer, b_, "--verify", "--follow", "--count", std::to_string(count_), "--format", "none",
                       "--json"},
                      "consumer");
    // Attached before anything is published to B.
    EXPECT_TRUE(wait_until(
        [&] {
          try {
            return !Inspector::open(b_).snapshot().readers.empty();
          } catch (const Error&) {
            return false;
          }
        },
        10s));
    return p;
  }
  std::uint64_t head_a() const { return head_of(a_); }
  std::uint64_t head_b() const { return head_of(b_); }
  std::int64_t stream_messages() { return server.stream_messages(stream_); }
  const std::string& stream() const { return stream_; }
  std::uint64_t count() const { return count_; }

 private:
  Process spawn(const std::vector<std::string>& argv, const std::string& what) {
    logs_.push_back(log_path(what));
    return Process(argv, logs_.back());
  }
  static inline int serial_ = 0;
  std::uint64_t count_;
  Shape shape_;
  std::string tag_, a_, b_, stream_, subject_;
  std::vector<std::string> logs_;
};

// Waits for the consumer's verdict and checks what every run must end with:
// the stream holds each message once, B holds them all under their own
// sequences, the consumer verified them.
void expect_exactly_once(Pipeline& p, Process& consumer, Process& in) {
  const int cs = consumer.wait(60s);
  EXPECT_TRUE(exited_ok(cs)) << "shmbus-consumer --verify: " << consumer.log_text();
  if (p.head_a() == p.count()) {
    EXPECT_EQ(p.head_b(), p.count()) << "bus B";  // one record a message
  }
  EXPECT_EQ(p.head_b(), p.head_a()) << "bus B ends where bus A does";
  EXPECT_EQ(p.stream_messages(), static_cast<std::int64_t>(p.count())) << "stream";
  EXPECT_TRUE(exited_ok(in.kill_and_wait(SIGTERM))) << "shmbus-nats in on SIGTERM: " << in.log_text();
}

TEST(NatsGateway, MessagesThroughJetStreamKeepTheirSequencesExactlyOnce) {
  Pipeline p(kMessages);
  ASSERT_TRUE(p.server.ok());
  ASSERT_TRUE(p.create_stream());
  Process consumer = p.start_consumer();
  Process in = p.start_in();
  Process out = p.start_out();
  Process producer = p.start_producer();
  EXPECT_TRUE(exited_ok(producer.wait(60s))) << producer.log_text();
  // The producer closed A: `out` publishes the rest, waits for the acks, exits 0.
  const int os = out.wait(60s);
  EXPECT_TRUE(exited_ok(os)) << "shmbus-nats out: " << out.log_text();
  // Every message went out and none was given up on. A JetStream ack that
  // times out on a loaded machine is answered by a resync, not by a loss:
  // the stream check below says whether each message is there exactly once.
  EXPECT_NE(out.log_text().find("published=" + std::to_string(kMessages) + " "), std::string::npos) << out.log_text();
  EXPECT_NE(out.log_text().find(" lost=0 "), std::string::npos) << out.log_text();
  expect_exactly_once(p, consumer, in);
}

TEST(NatsGateway, OutAndInKilledAndServerRestartedMidStreamStillExactlyOnce) {
  const std::uint64_t n = kMessages / 4;
  Pipeline p(n);
  ASSERT_TRUE(p.server.ok());
  ASSERT_TRUE(p.create_stream());
  Process consumer = p.start_consumer();
  Process in = p.start_in();
  Process out = p.start_out();
  Process producer = p.start_producer();

  // `out` SIGKILLed with publishes in flight; its successor resumes after the
  // stream's last message (Nats-Msg-Id drops anything republished).
  ASSERT_TRUE(wait_until([&] { return p.stream_messages() >= static_cast<std::int64_t>(n / 5); }, 30s));
  out.kill_and_wait(SIGKILL);
  const std::int64_t at_out_kill = p.stream_messages();
  out = p.start_out();
  // One event at a time: the new `out` is publishing before the next one.
  ASSERT_TRUE(wait_until([&] { return p.stream_messages() > at_out_kill; }, 30s));

  // `in` SIGKILLed with a fetched batch half committed; its successor takes
  // B over and skips what B already holds.
  ASSERT_TRUE(wait_until([&] { return p.head_b() >= 2 * n / 5; }, 30s));
  in.kill_and_wait(SIGKILL);
  const std::uint64_t at_in_kill = p.head_b();
  in = p.start_in();
  ASSERT_TRUE(wait_until([&] { return p.head_b() > at_in_kill; }, 30s));

  // The server restarted (its file store persists): both reconnect with backoff.
  ASSERT_TRUE(wait_until([&] { return p.stream_messages() >= static_cast<std::int64_t>(3 * n / 5); }, 30s));
  ASSERT_TRUE(p.server.restart());

  EXPECT_TRUE(exited_ok(producer.wait(60s))) << producer.log_text();
  EXPECT_TRUE(exited_ok(out.wait(60s))) << "shmbus-nats out: " << out.log_text();
  expect_exactly_once(p, consumer, in);
}

// The same on a ring sized as by default (65,536 records of 128 bytes)
// with messages of 64 bytes to 3,000 (up to 24 records, padding at every
// lap's end), most of a ring in flight: while `out` lives the ring keeps
// what the stream has not acknowledged (a restarting server costs
// nothing), and B's readers cross whatever `in` skips at once. Killed, `out`
// holds nothing: it comes back well within the ring's time (about 1.5 s at
// 3,000 messages a second).
TEST(NatsGateway, MixedSizesOnADefaultSizedRingAcrossOutInAndServerRestartsExactlyOnce) {
  const std::uint64_t n = 12000;  // 4 s at 3,000 a second, and the restarts
  Pipeline p(n, Shape{65536, 128, "64..3000", "3000"});
  ASSERT_TRUE(p.server.ok());
  ASSERT_TRUE(p.create_stream());
  Process consumer = p.start_consumer();
  Process in = p.start_in();
  Process out = p.start_out();
  Process producer = p.start_producer();
  const auto fraction = [&](std::uint64_t k) { return static_cast<std::int64_t>(k * n / 6); };

  ASSERT_TRUE(wait_until([&] { return p.stream_messages() >= fraction(1); }, 30s));
  out.kill_and_wait(SIGKILL);
  const std::int64_t at_out_kill = p.stream_messages();
  out = p.start_out();
  ASSERT_TRUE(wait_until([&] { return p.stream_messages() > at_out_kill; }, 30s));

  ASSERT_TRUE(wait_until([&] { return p.stream_messages() >= fraction(2); }, 30s));
  in.kill_and_wait(SIGKILL);
  in = p.start_in();

  // The server away for two seconds: more than a ring of messages comes
  // meanwhile, and the producer waits for `out`.
  ASSERT_TRUE(wait_until([&] { return p.stream_messages() >= fraction(3); }, 30s));
  ASSERT_TRUE(p.server.restart(2s));

  EXPECT_TRUE(exited_ok(producer.wait(90s))) << producer.log_text();
  EXPECT_TRUE(exited_ok(out.wait(60s))) << "shmbus-nats out: " << out.log_text();
  EXPECT_NE(out.log_text().find(" lost=0 "), std::string::npos) << out.log_text();
  expect_exactly_once(p, consumer, in);
}

// Runs `args` and expects exit `code` with exactly one line on stderr that
// starts with "shmbus-nats: " and contains `needle`.
void expect_one_line_exit(const std::vector<std::string>& args, int code, const std::string& needle,
                          std::chrono::seconds timeout) {
  const std::string log = log_path("error");
  Process p(args, log);
  const int st = p.wait(timeout);
  const std::string text = p.log_text();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == code) << args[1] << ": " << text;
  EXPECT_EQ(text.rfind("shmbus-nats: ", 0), 0u) << text;
  EXPECT_NE(text.find(needle), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  ::unlink(log.c_str());
}

// `out` and `in` on `bus` against the server at `url`, stream `stream`.
std::vector<std::vector<std::string>> both_directions(const std::string& bus, const std::string& url,
                                                      const std::string& stream) {
  return {{kNats, "out", bus, "--server", url, "--stream", stream},
          {kNats, "in", bus, "--server", url, "--stream", stream, "--durable", "d"}};
}

TEST(NatsGateway, UnreachableServerIsOneLineAndExit1) {
  const std::string bus = "nt-u-" + std::to_string(::getpid());
  Bus::create(bus, BusOptions{1024, 64, Policy::block, 4});
  // A port nobody listens on: bound, then closed.
  const std::string url = "nats://127.0.0.1:" + std::to_string(free_port());
  for (const auto& args : both_directions(bus, url, "S")) {
    expect_one_line_exit(args, 1, "shmbus-nats: cannot connect to " + url, 20s);
  }
  Bus::remove(bus);
}

TEST(NatsGateway, MissingStreamIsOneLineAndExit1) {
  NatsServer server;
  ASSERT_TRUE(server.ok());
  const std::string bus = "nt-m-" + std::to_string(::getpid());
  Bus::create(bus, BusOptions{1024, 64, Policy::block, 4});
  for (const auto& args : both_directions(bus, server.url(), "NOPE")) {
    expect_one_line_exit(args, 1, "shmbus-nats: stream 'NOPE': stream not found", 20s);
  }
  Bus::remove(bus);
}

// A user the server forbids to publish anywhere (so to call JetStream's API):
// one line naming the refusal, exit 1, for both directions.
TEST(NatsGateway, PermissionDeniedIsOneLineAndExit1) {
  NatsServer server(R"(authorization {
  users = [ { user: "locked", password: "out", permissions: { publish: { deny: [">"] } } } ]
})");
  ASSERT_TRUE(server.ok());
  const std::string bus = "nt-p-" + std::to_string(::getpid());
  Bus::create(bus, BusOptions{1024, 64, Policy::block, 4});
  const std::string url = "nats://locked:out@127.0.0.1:" + std::to_string(server.port());
  for (const auto& args : both_directions(bus, url, "S")) {
    expect_one_line_exit(args, 1, "permission denied by the server", 30s);
  }
  Bus::remove(bus);
}

using shmbus::test::large_payload;

std::uint64_t records_of(std::size_t size) { return size + 24 <= 1024 ? 1 : (size + 24 + 1023) / 1024; }

// Messages longer than one record (up to ~1 MB, under the server's default
// max_payload) through `out`, the stream and `in`: bus B holds each one byte
// for byte under the sequence it had on bus A, the padding A put before a
// span at the end of a lap included (B has A's geometry, so it pads there too).
TEST(NatsGateway, MessagesThatSpanRecordsKeepTheirSequencesAndBytes) {
  NatsServer server;
  ASSERT_TRUE(server.ok());
  const std::string tag = std::to_string(::getpid());
  const std::string a = "nt-sa-" + tag, b = "nt-sb-" + tag, stream = "NTS" + tag;
  ASSERT_TRUE(server.create_stream(stream, "shmbus." + a));
  Bus bus_a = Bus::create(a, BusOptions{4096, 1024, Policy::block, 8});  // 4 MiB ring
  Bus bus_b = Bus::create(b, BusOptions{4096, 1024, Policy::block, 8});
  const std::vector<std::size_t> sizes = {1, 1000, 1001, 3000, 64 << 10, 500000, 1000000, 0};
  constexpr int kRounds = 4;  // ~6,000 records: A's ring wraps and a span meets the end of a lap
  const std::string out_log = log_path("span-out"), in_log = log_path("span-in");
  Process out({kNats, "out", a, "--server", server.url(), "--stream", stream, "--stats-interval", "0"}, out_log);
  struct Sent {
    std::uint64_t seq;
    std::size_t index, size;
  };
  std::vector<Sent> sent;
  {
    // `out`'s reader holds A: nothing is overwritten before it is published.
    Producer p(bus_a, ProducerOptions{.wait_for_readers = 1, .wait_for_readers_timeout = 20s});
    std::size_t i = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (std::size_t size : sizes) {
        const PublishResult r = p.publish(large_payload(i, size), 30s);
        ASSERT_TRUE(r) << size;
        sent.push_back(Sent{r.seq, i++, size});
      }
    }
    p.close();
  }
  EXPECT_TRUE(exited_ok(out.wait(60s))) << "shmbus-nats out: " << out.log_text();
  EXPECT_EQ(server.stream_messages(stream), static_cast<std::int64_t>(sent.size()));
  std::size_t padded = 0;
  for (std::size_t k = 1; k < sent.size(); ++k) padded += sent[k].seq > sent[k - 1].seq + records_of(sent[k - 1].size);
  EXPECT_GT(padded, 0u);

  Consumer local(bus_b);  // attached before anything is published to B
  Process in({kNats, "in", b, "--server", server.url(), "--stream", stream, "--durable", "gw", "--stats-interval", "0",
              "--count", std::to_string(sent.size())},
             in_log);
  std::size_t k = 0;
  std::uint64_t lost = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (k < sent.size() && std::chrono::steady_clock::now() < deadline) {
    const ReadResult r = local.next(100ms);
    if (r.status == ReadStatus::lost) lost += r.lost;
    if (r.status != ReadStatus::message) continue;
    EXPECT_EQ(r.message.seq, sent[k].seq) << k;
    EXPECT_EQ(r.message.records, records_of(sent[k].size)) << k;
    const auto want = large_payload(sent[k].index, sent[k].size);
    EXPECT_TRUE(std::equal(r.message.payload.begin(), r.message.payload.end(), want.begin(), want.end()))
        << "message " << k << ", " << sent[k].size << " bytes";
    ++k;
  }
  EXPECT_EQ(k, sent.size());
  EXPECT_EQ(lost, 0u);
  EXPECT_TRUE(exited_ok(in.wait(30s))) << "shmbus-nats in: " << in.log_text();
  for (const auto& n : {a, b}) Bus::remove(n);
  ::unlink(out_log.c_str());
  ::unlink(in_log.c_str());
}

// A bus message above the server's max_payload (1 MiB by default): `out`
// publishes what comes before it, then stops with one line naming both
// sizes and what to do, exit 1; a restart meets it again (nothing skipped).
TEST(NatsGateway, AMessageAboveTheServersMaxPayloadStopsOutWithOneLine) {
  NatsServer server;
  ASSERT_TRUE(server.ok());
  const std::string a = "nt-big-" + std::to_string(::getpid()), stream = "NTB" + std::to_string(::getpid());
  ASSERT_TRUE(server.create_stream(stream, "shmbus." + a));
  Bus bus_a = Bus::create(a, BusOptions{4096, 1024, Policy::block, 8});  // messages up to 2 MiB - 24
  {
    Producer p(bus_a);
    ASSERT_TRUE(p.publish(large_payload(0, 5000)));
    ASSERT_TRUE(p.publish(large_payload(1, 1536 << 10)));  // at seq 5
    ASSERT_TRUE(p.publish(large_payload(2, 10)));
    p.close();
  }
  const std::vector<std::string> args = {kNats, "out", a, "--server", server.url(), "--stream", stream};
  for (int run = 0; run < 2; ++run) {
    expect_one_line_exit(args, 1,
                         "bus '" + a + "': message 5 has 1572864 bytes, which with the gateway's", 30s);
    EXPECT_EQ(server.stream_messages(stream), 1);
  }
  const std::string log = log_path("big");
  Process p(args, log);
  p.wait(30s);
  const std::string text = p.log_text();
  EXPECT_NE(text.find("is more than the NATS server's max_payload of 1048576: raise max_payload in the "
                      "nats-server configuration, or publish smaller messages"),
            std::string::npos)
      << text;
  ::unlink(log.c_str());
  Bus::remove(a);
}

// A bad command line: one line, exit 2, nothing attempted.
TEST(NatsGateway, UsageErrorIsOneLineAndExit2) {
  expect_one_line_exit({kNats, "out", "some-bus"}, 2, "--stream is required", 10s);
  expect_one_line_exit({kNats, "in", "some-bus", "--stream", "S"}, 2, "--durable is required", 10s);
  expect_one_line_exit({kNats, "sideways"}, 2, "subcommand", 10s);
}

}  // namespace
}  // namespace shmbus::nats::test
