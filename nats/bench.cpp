// shmbus-nats-bench: bus -> JetStream through `shmbus-nats out` against the
// same C client publishing the same messages (payload and headers, Nats-Msg-Id
// and the Nats-Expected-Last-Msg-Id chain included) straight to a stream, in the same run, alternating which goes
// first. Each side gets a fresh file-storage stream; the reported rate is
// messages acknowledged by the stream per second, connection set-up included
// on both sides. scripts/nats-bench.sh starts a server and runs it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <shmbus/shmbus.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "nats/connection.hpp"
#include "nats/headers.hpp"
#include "nats/out.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/synthetic.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::nats;
using Clock = std::chrono::steady_clock;

struct Args {
  ConnectArgs connect;
  std::uint64_t count = 200000;
  std::size_t size = 64;
  int runs = 5;
  std::int64_t in_flight = 4096;
};

void add_stream(const Connection& c, const std::string& name, const std::string& subject) {
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = add_file_stream(c.js(), name, subject, code);
  if (s != NATS_OK) throw GatewayError(js_error_text("creating stream " + name, s, code, ""));
}

void delete_stream(const Connection& c, const std::string& name) {
  jsErrCode code = static_cast<jsErrCode>(0);
  js_DeleteStream(c.js(), name.c_str(), nullptr, &code);
}

std::atomic<std::uint64_t> g_acked{0};
std::atomic<std::uint64_t> g_failed{0};
void count_ack(jsCtx*, natsMsg* m, jsPubAck*, jsPubAckErr* pae, void*) {
  (pae != nullptr ? g_failed : g_acked).fetch_add(1, std::memory_order_relaxed);
  natsMsg_Destroy(m);
}

// The direct client: what an application would write to put the same
// messages on the stream itself.
double direct_run(const Args& a, const std::string& subject) {
  g_acked = 0;
  g_failed = 0;
  const auto t0 = Clock::now();
  Connection c(a.connect, a.in_flight, &count_ack, nullptr);
  const std::string identity = "direct@1";
  std::string id = identity + "#";
  const std::size_t prefix = id.size();
  std::vector<std::byte> payload(a.size);
  char seq[24], ts[24];
  std::string prev;
  prev.reserve(prefix + 24);
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = 5000;
  for (std::uint64_t i = 0; i < a.count; ++i) {
    tools::synthetic_write(payload, i, 0);
    natsMsg* m = nullptr;
    natsMsg_Create(&m, subject.c_str(), nullptr, reinterpret_cast<const char*>(payload.data()),
                   static_cast<int>(payload.size()));
    format_u64(seq, i);
    format_u64(ts, 0);
    natsMsgHeader_Set(m, kSeqHeader, seq);
    natsMsgHeader_Set(m, kTimeHeader, ts);
    natsMsgHeader_Set(m, kBusHeader, identity.c_str());
    id.resize(prefix);
    id.append(seq);
    po.MsgId = id.c_str();
    po.ExpectLastMsgId = prev.empty() ? nullptr : prev.c_str();
    natsStatus s;
    while ((s = js_PublishMsgAsync(c.js(), &m, &po)) == NATS_TIMEOUT) {
    }
    if (s != NATS_OK) throw GatewayError("direct publish: " + status_text(s));
    c.published_async();
    prev.assign(id);
  }
  jsPubOptions w;
  jsPubOptions_Init(&w);
  w.MaxWait = 60000;
  js_PublishAsyncComplete(c.js(), &w);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (g_acked.load() != a.count) throw GatewayError(fmt::format("direct: {} acked of {}", g_acked.load(), a.count));
  return static_cast<double>(a.count) / secs;
}

double gateway_run(const Args& a, const std::string& bus, const std::string& stream) {
  OutOptions o;
  o.connect = a.connect;
  o.bus = bus;
  o.stream = stream;
  o.max_in_flight = a.in_flight;
  o.count = a.count;
  o.stats_interval = std::chrono::milliseconds(0);
  const auto t0 = Clock::now();
  const OutStats s = run_out(o, [] { return false; }, [](const OutStats&) {});
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (s.acknowledged != a.count) throw GatewayError(fmt::format("gateway: {} acked of {}", s.acknowledged, a.count));
  return static_cast<double>(a.count) / secs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shmbus-nats-bench: bus -> JetStream through shmbus-nats out vs the C client publishing directly"};
  Args a;
  app.add_option("--server", a.connect.server, "NATS server with JetStream")->capture_default_str();
  app.add_option("--count", a.count, "Messages per run and side")->capture_default_str();
  app.add_option("--size", a.size, "Payload bytes (>= 24)")->check(CLI::Range(24, 4000))->capture_default_str();
  app.add_option("--runs", a.runs, "Runs (medians reported)")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_option("--max-in-flight", a.in_flight, "Unacknowledged publishes, both sides")->capture_default_str();
  return tools::run_main(app, tools::ErrorSink{"shmbus-nats-bench"}, [&] {
    app.parse(argc, argv);
    const std::string bus = fmt::format("nats-bench-{}", ::getpid());
    Bus::remove(bus);
    const std::uint32_t record = static_cast<std::uint32_t>((a.size + 24 + 63) / 64 * 64);
    Bus b = Bus::create(bus, BusOptions{std::bit_ceil(a.count), record, Policy::block, 4});
    {
      Producer p(b);
      std::vector<std::byte> payload(a.size);
      for (std::uint64_t i = 0; i < a.count; ++i) {
        tools::synthetic_write(payload, i, 0);
        if (!p.publish(payload)) throw GatewayError("filling the bus failed");
      }
    }
    Connection admin(a.connect);
    std::vector<double> direct, gateway, ratio;
    for (int r = 0; r < a.runs; ++r) {
      const std::string ds = fmt::format("BENCH_DIRECT_{}", r), gs = fmt::format("BENCH_GW_{}", r);
      const std::string dsub = fmt::format("bench.direct.{}", r);
      delete_stream(admin, ds);
      delete_stream(admin, gs);
      add_stream(admin, ds, dsub);
      add_stream(admin, gs, default_subject(bus));
      double d = 0, g = 0;
      if (r % 2 == 0) {
        d = direct_run(a, dsub);
        g = gateway_run(a, bus, gs);
      } else {
        g = gateway_run(a, bus, gs);
        d = direct_run(a, dsub);
      }
      delete_stream(admin, ds);
      delete_stream(admin, gs);
      direct.push_back(d);
      gateway.push_back(g);
      ratio.push_back(g / d);
      fmt::print("run {}: direct {:.0f} msgs/s, gateway {:.0f} msgs/s, ratio {:.2f}\n", r + 1, d, g, g / d);
    }
    Bus::remove(bus);
    fmt::print("median of {} runs, {} messages of {} bytes, {} in flight: direct {:.0f} msgs/s, gateway {:.0f} msgs/s, "
               "ratio {:.2f} (median of per-run ratios {:.2f})\n",
               a.runs, a.count, a.size, a.in_flight, median(direct), median(gateway), median(gateway) / median(direct),
               median(ratio));
    nats_Close();
    return tools::exit_ok;
  });
}
