// shmbus_test_peer: one side of a multi-process test, run by the tests as a
// separate process (fork/exec).
//
//   shmbus_test_peer producer BUS COUNT [--wait-readers N] [--mode publish|claim|batch]
//                                       [--close] [--hold] [--max-hold MS]
//   shmbus_test_peer consumer BUS [--start earliest|latest|SEQ] [--expect-first SEQ]
//                                 [--name NAME] [--durable] [--poll] [--pause-after K] [--eos-rounds N]
//                                 [--nap-every N] [--best-effort]
//   shmbus_test_peer --main-thread-exits producer|consumer ...   (the role in a second thread)
//
// The producer publishes COUNT messages continuing the bus's sequence, each
// payload a function of its sequence (payload.hpp). The consumer checks every
// message (order, contents, checksum), counts losses the library reports and
// checks they equal the gaps it sees. Both talk to the test in lines on stdout:
//   attached cursor=C slot=S          consumer attached
//   paused delivered=D cursor=C       consumer stopped reading (--pause-after)
//   eos <stats>                       consumer saw end-of-stream
//   result <stats>                    consumer's final line
//   done next_seq=N                   producer finished publishing
// where <stats> is: delivered= lost= first= last= hash= errors= lib_delivered= lib_lost=
// Exit status: 0 on success, 1 when a check failed, 2 on usage errors, 3 when
// attaching failed with not_retained, 4 on other setup errors.
#include <pthread.h>
#include <unistd.h>

#include <thread>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <shmbus/shmbus.hpp>

#include "payload.hpp"

namespace {

using namespace shmbus;
using shmbus::test::check_payload;
using shmbus::test::make_payload;
using shmbus::test::StreamHash;

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "shmbus_test_peer: %s\n", why);
  std::exit(2);
}

std::uint64_t to_u64(std::string_view s) {
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) usage("not a number");
  return v;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int run_producer(const std::string& bus_name, std::uint64_t count, std::vector<std::string_view> args) {
  ProducerOptions po;
  std::string mode = "publish";
  bool close = false, hold = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--wait-readers" && i + 1 < args.size()) {
      po.wait_for_readers = static_cast<std::uint32_t>(to_u64(args[++i]));
      po.wait_for_readers_timeout = std::chrono::seconds(60);
    } else if (args[i] == "--mode" && i + 1 < args.size()) {
      mode = args[++i];
    } else if (args[i] == "--close") {
      close = true;
    } else if (args[i] == "--hold") {
      hold = true;
    } else if (args[i] == "--max-hold" && i + 1 < args.size()) {
      po.max_hold = std::chrono::milliseconds(to_u64(args[++i]));
    } else {
      usage("unknown producer option");
    }
  }
  Bus bus = Bus::open(bus_name);
  Producer p(bus, po);
  const std::size_t max = bus.info().max_payload;
  std::uint64_t seq = p.next_seq();
  const std::uint64_t end = count > ~std::uint64_t{0} - seq ? ~std::uint64_t{0} : seq + count;
  std::vector<std::byte> buf(max);
  if (mode == "publish") {
    for (; seq < end; ++seq) {
      const std::size_t n = make_payload(seq, max, buf.data());
      PublishResult r = p.publish(std::span<const std::byte>(buf.data(), n));
      if (!r || r.seq != seq) {
        std::fprintf(stderr, "producer: publish of %llu: %s (seq %llu)\n", (unsigned long long)seq,
                     to_string(r.status), (unsigned long long)r.seq);
        return 1;
      }
    }
  } else if (mode == "claim") {
    for (; seq < end; ++seq) {
      Claim c = p.claim(test::payload_length(seq, max));
      if (!c || c.seq != seq) {
        std::fprintf(stderr, "producer: claim of %llu: %s\n", (unsigned long long)seq, to_string(c.status));
        return 1;
      }
      make_payload(seq, max, c.data.data());
      p.commit();
    }
  } else if (mode == "batch") {
    constexpr std::size_t kBatch = 32;
    std::vector<std::byte> store(kBatch * max);
    std::vector<std::span<const std::byte>> spans(kBatch);
    while (seq < end) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kBatch, end - seq));
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t len = make_payload(seq + i, max, store.data() + i * max);
        spans[i] = std::span<const std::byte>(store.data() + i * max, len);
      }
      const std::size_t done = p.publish_batch(std::span(spans.data(), n));
      if (done != n) {
        std::fprintf(stderr, "producer: batch at %llu published %zu of %zu\n", (unsigned long long)seq, done, n);
        return 1;
      }
      seq += n;
    }
  } else {
    usage("unknown --mode");
  }
  say("done next_seq=" + std::to_string(p.next_seq()));
  if (close) p.close();
  if (hold) {
    for (;;) ::pause();  // a live producer that never closes, until killed
  }
  return 0;
}

struct Checker {
  std::size_t max_payload = 0;
  std::optional<std::uint64_t> expected;  // next sequence we must see
  std::uint64_t delivered = 0, lost = 0, errors = 0;
  std::optional<std::uint64_t> first, last;
  StreamHash hash;

  void error(const std::string& what) {
    if (errors++ < 5) std::fprintf(stderr, "consumer %d: %s\n", ::getpid(), what.c_str());
  }
  // Returns the gap (messages skipped before this one).
  std::uint64_t message(const Message& m) {
    std::uint64_t gap = 0;
    if (expected && m.seq != *expected) {
      if (m.seq < *expected) {
        error("went backwards: expected seq " + std::to_string(*expected) + ", got " + std::to_string(m.seq));
      } else {
        gap = m.seq - *expected;
      }
    }
    if (!check_payload(m.seq, max_payload, m.payload))
      error("payload of seq " + std::to_string(m.seq) + " is wrong (length " + std::to_string(m.payload.size()) + ")");
    if (!first) first = m.seq;
    last = m.seq;
    expected = m.seq + 1;
    ++delivered;
    hash.add(m.seq, m.payload);
    return gap;
  }
  std::string stats(const Consumer& c) const {
    return "delivered=" + std::to_string(delivered) + " lost=" + std::to_string(lost) +
           " first=" + (first ? std::to_string(*first) : "none") + " last=" + (last ? std::to_string(*last) : "none") +
           " hash=" + std::to_string(hash.value) + " errors=" + std::to_string(errors) +
           " lib_delivered=" + std::to_string(c.delivered()) + " lib_lost=" + std::to_string(c.lost());
  }
};

int run_consumer(const std::string& bus_name, std::vector<std::string_view> args) {
  ConsumerOptions co;
  co.name = "peer-" + std::to_string(::getpid());
  bool use_poll = false;
  std::optional<std::uint64_t> pause_after;
  std::uint64_t nap_every = 0, next_nap = 0;  // --nap-every: a 2 ms pause after each N messages
  std::uint64_t eos_rounds = 1;
  Checker chk;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--start" && i + 1 < args.size()) {
      const std::string_view s = args[++i];
      if (s == "earliest") {
        co.start = Start::earliest;
      } else if (s == "latest") {
        co.start = Start::latest;
      } else {
        co.start = Start::sequence;
        co.start_seq = to_u64(s);
      }
    } else if (args[i] == "--expect-first" && i + 1 < args.size()) {
      chk.expected = to_u64(args[++i]);
    } else if (args[i] == "--name" && i + 1 < args.size()) {
      co.name = args[++i];
    } else if (args[i] == "--nap-every" && i + 1 < args.size()) {
      nap_every = next_nap = to_u64(args[++i]);
    } else if (args[i] == "--durable") {
      co.durable = true;
    } else if (args[i] == "--best-effort") {
      co.hold_producer = false;
    } else if (args[i] == "--poll") {
      use_poll = true;
    } else if (args[i] == "--pause-after" && i + 1 < args.size()) {
      pause_after = to_u64(args[++i]);
    } else if (args[i] == "--eos-rounds" && i + 1 < args.size()) {
      eos_rounds = to_u64(args[++i]);
    } else {
      usage("unknown consumer option");
    }
  }
  Bus bus = Bus::open(bus_name);
  chk.max_payload = bus.info().max_payload;
  std::optional<Consumer> attached;
  try {
    attached.emplace(bus, co);
  } catch (const Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    say(std::string("attach-error ") + (e.errc() == Errc::not_retained ? "not_retained" : "other"));
    return e.errc() == Errc::not_retained ? 3 : 4;
  }
  Consumer& c = *attached;
  // With --start SEQ the first message must be SEQ; with latest, the cursor.
  if (!chk.expected && co.start != Start::earliest) chk.expected = c.cursor();
  say("attached cursor=" + std::to_string(c.cursor()) + " slot=" + std::to_string(c.slot()));

  while (eos_rounds > 0) {
    if (nap_every && chk.delivered >= next_nap) {
      // A reader slower than its producer now and then: the ring fills and
      // the producer waits for it (testing its liveness) each time.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      next_nap = chk.delivered + nap_every;
    }
    if (pause_after && chk.delivered >= *pause_after) {
      // Stop reading while holding the slot; the test kills us.
      say("paused delivered=" + std::to_string(chk.delivered) + " cursor=" + std::to_string(c.cursor()));
      for (;;) ::pause();
    }
    if (use_poll) {
      std::uint64_t gaps = 0;
      const std::size_t limit = pause_after ? static_cast<std::size_t>(*pause_after - chk.delivered) : 256;
      PollResult r = c.poll([&](const Message& m) { gaps += chk.message(m); }, limit, std::chrono::seconds(1));
      if (r.corrupt != 0) chk.error(std::to_string(r.corrupt) + " corrupt records");
      if (r.evicted) chk.error("evicted: the reader slot was taken from a live reader");
      if (r.let_go) say("let_go at seq " + std::to_string(c.cursor()) + (r.stale_view ? " stale_view" : ""));
      chk.lost += r.lost;
      if (gaps != r.lost)
        chk.error("poll reported " + std::to_string(r.lost) + " lost but the sequence skipped " + std::to_string(gaps));
      if (r.end_of_stream) {
        say("eos " + chk.stats(c));
        --eos_rounds;
      }
      continue;
    }
    ReadResult r = c.next();
    switch (r.status) {
      case ReadStatus::message:
        if (const std::uint64_t gap = chk.message(r.message); gap != 0)
          chk.error("gap of " + std::to_string(gap) + " before seq " + std::to_string(r.message.seq) +
                    " without a lost report");
        break;
      case ReadStatus::lost:
        if (r.lost == 0) chk.error("lost report of 0 messages");
        chk.lost += r.lost;
        if (chk.expected) *chk.expected += r.lost;
        break;
      case ReadStatus::corrupt:
        chk.error("corrupt record at seq " + std::to_string(r.message.seq));
        break;
      case ReadStatus::evicted:
        chk.error("evicted at seq " + std::to_string(r.message.seq) + ": the reader slot was taken from a live reader");
        break;
      case ReadStatus::let_go:
        // The producer's hold limit: from here it is lapped, and told so.
        say("let_go at seq " + std::to_string(r.message.seq) + (r.stale_view ? " stale_view" : ""));
        break;
      case ReadStatus::timeout:
        chk.error("next() with no timeout returned timeout");
        break;
      case ReadStatus::end_of_stream:
        say("eos " + chk.stats(c));
        --eos_rounds;
        break;
    }
  }
  if (chk.lost != c.lost()) chk.error("library counts " + std::to_string(c.lost()) + " lost, we saw " + std::to_string(chk.lost));
  if (chk.delivered != c.delivered())
    chk.error("library counts " + std::to_string(c.delivered()) + " delivered, we saw " + std::to_string(chk.delivered));
  say("result " + chk.stats(c));
  return chk.errors == 0 ? 0 : 1;
}

}  // namespace

int run(int argc, char** argv) {
  if (argc < 3) usage("usage: shmbus_test_peer producer|consumer BUS ...");
  const std::string_view role = argv[1];
  const std::string bus = argv[2];
  try {
    if (role == "producer") {
      if (argc < 4) usage("producer needs COUNT");
      return run_producer(bus, to_u64(argv[3]), std::vector<std::string_view>(argv + 4, argv + argc));
    }
    if (role == "consumer") return run_consumer(bus, std::vector<std::string_view>(argv + 3, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shmbus_test_peer %s: %s\n", argv[1], e.what());
    return 4;
  }
  usage("unknown role");
}

int main(int argc, char** argv) {
  // --main-thread-exits (first): the role runs in a second thread and the
  // main thread exits at once, as in a process whose main() ended with
  // pthread_exit: the process lives on without its thread group leader.
  if (argc > 1 && std::string_view(argv[1]) == "--main-thread-exits") {
    std::thread([argc, argv] {
      const int code = run(argc - 1, argv + 1);
      std::fflush(nullptr);
      ::_exit(code);
    }).detach();
    ::pthread_exit(nullptr);
  }
  return run(argc, argv);
}
