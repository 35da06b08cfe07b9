// shmbus-chaos — the crash-detection claims of docs/design.md, tried from outside.
//
// Each round creates a bus, starts three verifying consumers and one producer
// as separate processes (this program, re-executed in another role), and at a
// random moment does one of:
//
//   kill-consumer  SIGKILL a consumer. The survivors must miss nothing, and in
//                  `block` the producer must not be held longer than the
//                  documented bound by the dead reader.
//   kill-producer  SIGKILL the producer, then start a new one, which takes the
//                  bus over and continues the sequence.
//   stop-consumer  SIGSTOP a consumer, then SIGCONT it. In `block` the
//                  producer must wait for it (and `shmbus-inspect show` must
//                  name it), unless it is the best-effort reader or the
//                  producer's hold limit lets it go; otherwise, and in
//                  `overwrite`, the producer must run on, and the continued
//                  consumer must get exact loss counts.
//
// A third of the rounds, chosen by the seeded RNG in both policies, run the
// consumers, the producers (the one taking over after a kill too) or all of
// them as containers run processes: each in a PID namespace of its own
// (util-linux `unshare --pid --fork --kill-child`), half of those with /proc
// unmounted as well. Liveness is the kernel's role locks, so none of that may
// change the outcome; every check below holds for those rounds alike. The
// driver SIGKILLs the unshare wrapper, as a container is killed (the program
// goes with it, and the round goes on once the program itself is gone), and
// sends every other signal (SIGSTOP, SIGCONT, the producer's SIGUSR1) to the
// program, by the pid it has here: the wrapper's only child. The pid a
// program prints, and the library stores as its label, is its namespace's
// (1); `shmbus-inspect show` must name a stopped reader by that label. Where
// namespaces cannot be made (not root), those rounds run unisolated, said
// once on stderr.
//
// Messages are of mixed sizes, from 1 byte to sixteen records, so most span
// records (layout.hpp, "Spans") and a killed producer often dies inside one:
// no part of it may be delivered, and the producer taking over writes its
// own message there.
//
// The three consumers read differently: one with next(), one with
// read_batch(), and the third, with either, is a best-effort reader
// (hold_producer = false) that a `block` producer never waits for. A
// stopped consumer that holds a `block` producer is, in half of those
// rounds, let go by the producer's hold limit (max_hold) and then lapped.
// Every consumer keeps its books (tests/lib/ledger.hpp): each sequence is in
// a message it was handed, in padding before a span, or in a loss it was
// told of before the message after it; delivered + padding + lost is what
// was published.
//
// Policies alternate between rounds. After each round: every surviving
// consumer received every sequence from 0 to the end exactly once (or, in
// `overwrite`, was told exactly which it lost), byte for byte; the reader
// table holds no slot once dead readers are reclaimed; `shmbus-inspect check`
// is clean. The run ends with one summary line on stderr, the namespaced
// rounds' figures last, and exits non-zero if any round failed.
//
//   shmbus-chaos --inspect PATH [--rounds N] [--max-seconds S] [--seed N] [--run-ms MS]
//
// Messages are the multi-process tests' (tests/multiprocess/payload.hpp): a
// pure function of the sequence, so a consumer checks every byte alone. The
// producer's last message is an 8-byte end marker; consumers stop there.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "isolation.hpp"
#include "ledger.hpp"
#include "payload.hpp"
#include "shmbus/shmbus.hpp"

// Without /proc, LeakSanitizer cannot list the threads it must stop at exit
// and fails the process, and no sanitizer can read its options from the
// environment (it reads /proc/self/environ): a role started without /proc
// runs without the leak check, AddressSanitizer and UBSan still on.
#if defined(__SANITIZE_ADDRESS__)  // GCC
#define CHAOS_ASAN 1
#elif defined(__has_feature)       // clang
#if __has_feature(address_sanitizer)
#define CHAOS_ASAN 1
#endif
#endif
#if defined(CHAOS_ASAN)
extern "C" const char* __asan_default_options() {
  return ::access("/proc/self/task", F_OK) == 0 ? "" : "detect_leaks=0";
}
#endif

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using shmbus::test::check_payload;
using shmbus::test::Isolation;
using shmbus::test::make_payload;

constexpr std::uint64_t kEndMagic = 0x454e'4421'c4a0'5e11ULL;  // end marker: seq ^ this
// The bound docs/design.md states for a producer held back by a dead reader, as the
// multi-process tests assert it: the liveness check runs every 50 ms, one
// second leaves room for a loaded machine.
constexpr auto kDeadReaderBound = 1000ms;
// How long a round may take to settle before it counts as a hang.
constexpr auto kHangBound = 60s;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  std::istringstream in(line);
  std::string w;
  in >> w;
  f["kind"] = w;
  while (in >> w) {
    const auto eq = w.find('=');
    if (eq != std::string::npos) f[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return f;
}
std::uint64_t u64(const std::map<std::string, std::string>& f, const char* key) {
  const auto it = f.find(key);
  return it == f.end() ? 0 : std::strtoull(it->second.c_str(), nullptr, 10);
}

// Messages of mixed sizes: from 1 byte to sixteen records, so that most
// span records and a kill often lands inside a span. Each size is a function
// of the message's sequence, so every process knows every message: the
// longest at the first sequence of a lap (where padding before a span
// leads), a few bytes for every fifth, any other from payload_length().
struct Sizes {
  std::size_t max;
  std::uint64_t capacity;
  std::uint32_t record_size;
  explicit Sizes(const shmbus::Bus& bus)
      : max(std::min<std::size_t>(bus.info().max_message, 16 * std::size_t{bus.info().record_size} - 24)),
        capacity(bus.info().capacity),
        record_size(bus.info().record_size) {}
  std::size_t length(std::uint64_t seq) const {
    if ((seq & (capacity - 1)) == 0) return max;
    if (seq % 5 == 0) {
      const std::size_t n = 1 + (seq / 5) % 15;  // 1..15 bytes, never the end marker's 8
      return n == 8 ? 7 : n;
    }
    return shmbus::test::payload_length(seq, max);
  }
  // The payload of `seq`, length(seq) bytes, into `out`.
  std::size_t fill(std::uint64_t seq, std::byte* out) const {
    const std::size_t n = length(seq);
    if (n >= 16) return shmbus::test::make_payload_of_length(seq, n, out);
    for (std::size_t i = 0; i < n; ++i) out[i] = tiny_byte(seq, i);
    return n;
  }
  bool check(std::uint64_t seq, std::span<const std::byte> p) const {
    const std::size_t n = length(seq);
    if (n >= 16) return shmbus::test::check_payload_of_length(seq, n, p);
    if (p.size() != n) return false;
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] != tiny_byte(seq, i)) return false;
    return true;
  }
  static std::byte tiny_byte(std::uint64_t seq, std::size_t i) {
    return static_cast<std::byte>((seq * 131 + i * 7 + 3) & 0xff);
  }
  // Where the producer's next message lands when it is at `next`: there,
  // unless that message would cross the end of the ring; then the rest of
  // the lap is padding and the message is the next lap's first (the
  // longest, so it never fits where the one due at `next` did not).
  std::uint64_t landing(std::uint64_t next) const {
    const std::uint64_t k = shmbus::test::records_of(length(next), record_size);
    if ((next & (capacity - 1)) + k <= capacity) return next;
    return (next | (capacity - 1)) + 1;
  }
};

// ---------------------------------------------------------------- roles ----

// Reads until the end marker, checking every message, with next() or
// read_batch(), holding the producer or (best_effort) not. Prints (P the
// pid it sees for itself: 1 in a PID namespace of its own)
//   ready slot=S pid=P
//   done delivered=.. sequences=.. padded=.. reported_lost=.. missed=.. duplicated=.. torn=.. corrupt=.. end=..
//        eos_died=.. eos_other=.. library_lost=.. let_go=..
int run_consumer(const std::string& name, bool batch, bool best_effort) {
  shmbus::Bus bus = shmbus::Bus::open(name);
  shmbus::ConsumerOptions co;
  co.name = "chaos";
  co.start = shmbus::Start::earliest;
  co.hold_producer = !best_effort;
  shmbus::Consumer c(bus, co);
  const Sizes sizes(bus);
  const bool lossless = bus.info().policy == shmbus::Policy::block && !best_effort;
  std::printf("ready slot=%u pid=%d\n", c.slot(), static_cast<int>(::getpid()));
  std::fflush(stdout);

  shmbus::test::Ledger books(c.cursor(), sizes.capacity);
  // sequences: those the delivered messages take; padded: padding crossed.
  std::uint64_t delivered = 0, sequences = 0, reported_lost = 0, duplicated = 0, torn = 0, corrupt = 0,
                eos_died = 0, eos_other = 0, let_go = 0, end = UINT64_MAX;
  auto idle_since = Clock::now();
  // A reader let go while it read in place may have been handed a message
  // the producer then overwrote: the library says so (stale_view) with
  // let_go on the next call, and those are no failure.
  std::uint64_t torn_this_call = 0, torn_last_call = 0, torn_told = 0;
  auto on_message = [&](const shmbus::Message& m) {
    idle_since = Clock::now();
    if (end != UINT64_MAX) return;
    const std::uint64_t s = m.seq;
    if (s < books.next()) {
      ++duplicated;
      return;
    }
    books.message(s, m.records);
    const auto p = m.payload;
    std::uint64_t word = 0;
    if (p.size() == 8) {
      std::memcpy(&word, p.data(), 8);
      if ((word ^ kEndMagic) == s) {
        end = s;
        return;
      }
    }
    ++delivered;
    sequences += m.records;
    if (!sizes.check(s, p)) {
      ++torn;
      ++torn_this_call;
    }
  };
  auto on_let_go = [&](bool stale_view) {
    ++let_go;
    if (stale_view) {
      torn -= torn_last_call;
      torn_told += torn_last_call;
      torn_last_call = 0;
    }
  };
  auto on_end = [&](shmbus::EndReason why) {
    // Before the end marker the only honest reason is a dead producer:
    // wait for the one taking over. (A close is not a crash.)
    if (why == shmbus::EndReason::producer_died)
      ++eos_died;
    else
      ++eos_other;
  };
  std::vector<shmbus::Message> buf(64);
  while (end == UINT64_MAX) {
    torn_this_call = 0;
    if (batch) {
      shmbus::PollResult pr;
      const auto got = c.read_batch(buf, pr, 200ms);
      reported_lost += pr.lost;
      books.lost(pr.lost);
      for (const shmbus::Message& m : got) on_message(m);
      corrupt += pr.corrupt;
      if (pr.evicted) ++corrupt;  // a live reader must never lose its slot
      if (pr.let_go) on_let_go(pr.stale_view);
      if (pr.end_of_stream && end == UINT64_MAX) on_end(pr.end_reason);
    } else {
      const shmbus::ReadResult r = c.next(200ms);
      switch (r.status) {
        case shmbus::ReadStatus::message: on_message(r.message); break;
        case shmbus::ReadStatus::lost:
          reported_lost += r.lost;
          books.lost(r.lost);
          break;
        case shmbus::ReadStatus::corrupt: ++corrupt; break;
        case shmbus::ReadStatus::evicted:
          // A live reader must never lose its slot: a failure, counted with
          // the corrupt records.
          ++corrupt;
          break;
        case shmbus::ReadStatus::let_go: on_let_go(r.stale_view); break;
        case shmbus::ReadStatus::end_of_stream: on_end(r.end_reason); break;
        case shmbus::ReadStatus::timeout: break;
      }
    }
    // What the next call may tell of is what this one handed out.
    torn_last_call = torn_this_call;
    if (!books.error().empty()) break;
    if (Clock::now() - idle_since > kHangBound) {
      std::fprintf(stderr, "chaos consumer: nothing for %lld s at seq %" PRIu64 "\n",
                   static_cast<long long>(kHangBound.count()), books.next());
      return 3;
    }
  }
  std::uint64_t missed = 0;
  if (!books.error().empty()) {
    std::fprintf(stderr, "chaos consumer (%s%s): %s\n", batch ? "read_batch" : "next",
                 best_effort ? ", best effort" : "", books.error().c_str());
    missed = 1;
  }
  // A reader that holds a `block` producer must never be told it lost anything (unless let go).
  if (lossless && let_go == 0 && reported_lost != 0) missed += reported_lost;
  // What the books do not hold in messages or losses is padding.
  const std::uint64_t padded = end != UINT64_MAX && end >= sequences + reported_lost + books.first()
                                   ? end - sequences - reported_lost - books.first()
                                   : 0;
  std::printf("done delivered=%" PRIu64 " sequences=%" PRIu64 " padded=%" PRIu64 " reported_lost=%" PRIu64
              " missed=%" PRIu64 " duplicated=%" PRIu64
               " torn=%" PRIu64 " corrupt=%" PRIu64 " end=%" PRIu64 " eos_died=%" PRIu64 " eos_other=%" PRIu64
              " library_lost=%" PRIu64 " let_go=%" PRIu64 " first=%" PRIu64 " stale_told=%" PRIu64 "\n",
              delivered, sequences, padded, reported_lost, missed, duplicated, torn, corrupt, end, eos_died, eos_other,
              c.lost(), let_go, books.first(), torn_told);
  std::fflush(stdout);
  return 0;
}

std::atomic<bool> g_finish{false};
extern "C" void on_finish(int) { g_finish.store(true, std::memory_order_relaxed); }

// Publishes until SIGUSR1, then the end marker, then closes. Prints
//   ready first=SEQ pid=P
//   done first=.. end=.. max_wait_ns=..
int run_producer(const std::string& name, std::uint32_t wait_readers, std::uint32_t max_hold_ms) {
  struct sigaction sa{};
  sa.sa_handler = on_finish;
  ::sigaction(SIGUSR1, &sa, nullptr);
  shmbus::Bus bus = shmbus::Bus::open(name);
  shmbus::ProducerOptions po;
  po.wait_for_readers = wait_readers;
  po.wait_for_readers_timeout = 30s;
  if (max_hold_ms > 0) po.max_hold = std::chrono::milliseconds(max_hold_ms);
  shmbus::Producer p(bus, po);
  const Sizes sizes(bus);
  const std::uint64_t first = p.next_seq();
  std::printf("ready first=%" PRIu64 " pid=%d\n", first, static_cast<int>(::getpid()));
  std::fflush(stdout);
  std::vector<std::byte> buf(sizes.max);
  std::uint64_t max_wait = 0;
  while (!g_finish.load(std::memory_order_relaxed)) {
    const std::uint64_t s = sizes.landing(p.next_seq());
    const std::size_t n = sizes.fill(s, buf.data());
    const std::uint64_t t0 = now_ns();
    const shmbus::PublishResult r = p.publish(std::span<const std::byte>(buf.data(), n), kHangBound);
    max_wait = std::max(max_wait, now_ns() - t0);
    if (r.status != shmbus::PublishStatus::ok || r.seq != s) {
      std::fprintf(stderr, "chaos producer: publish of %" PRIu64 ": %s\n", s, shmbus::to_string(r.status));
      return 3;
    }
  }
  const std::uint64_t end = p.next_seq();
  const std::uint64_t word = end ^ kEndMagic;
  if (!p.publish(std::as_bytes(std::span(&word, 1)), kHangBound)) return 3;
  p.close();
  std::printf("done first=%" PRIu64 " end=%" PRIu64 " max_wait_ns=%" PRIu64 "\n", first, end, max_wait);
  std::fflush(stdout);
  return 0;
}

// --------------------------------------------------------------- driver ----

// A child process, its stdout on a pipe; killed with the driver, and killed
// and reaped when dropped.
using Child = shmbus::test::ChildProcess;

// A process running one role (this program, re-executed): `child` is the
// process started, the unshare wrapper when isolated; `pid` the program
// itself, by its pid here (the wrapper's only child); `label` the pid it
// sees for itself, as its ready line says and the bus stores it.
struct Role {
  std::unique_ptr<Child> child;
  Isolation isolation = Isolation::none;
  pid_t pid = -1;
  std::uint64_t label = 0;
  bool namespaced() const { return isolation != Isolation::none; }
};

// Runs PROGRAM ARGS..., returns its exit status and everything it printed.
std::pair<int, std::string> run_capture(const std::vector<std::string>& args) {
  Child c(args[0], args, Child::Capture::stdout_and_stderr);
  std::string out;
  for (auto l = c.line(Clock::now() + kHangBound); l; l = c.line(Clock::now() + kHangBound)) out += *l + "\n";
  if (!c.eof()) c.kill(SIGKILL);  // hung for kHangBound
  c.reap();
  const int st = c.status();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}

enum class Fault { kill_consumer, kill_producer, stop_consumer };
const char* to_string(Fault f) {
  switch (f) {
    case Fault::kill_consumer: return "kill-consumer";
    case Fault::kill_producer: return "kill-producer";
    case Fault::stop_consumer: return "stop-consumer";
  }
  return "?";
}

struct Options {
  std::string inspect;
  std::string self;         // this program, by a path that means the same inside a namespace
  bool namespaces = true;   // whether PID namespaces can be made here
  int rounds = 200;
  int max_seconds = 240;
  std::uint64_t seed = 0;
  int run_ms = 150;
  std::uint64_t capacity = 1024;
  std::uint32_t record_size = 128;
  bool verbose = false;
};

struct Totals {
  int rounds = 0, failed = 0;
  int by_fault[3] = {0, 0, 0};
  int block_rounds = 0, overwrite_rounds = 0;
  int victim_not_running = 0;
  int held_block = 0, lapped_overwrite = 0;  // stop rounds that behaved as the policy says
  int let_go = 0;                            // lapped victims the hold limit let go first
  int takeovers = 0;
  int reclaimed_by_producer = 0, reclaimed_by_gc = 0, slots_leaked = 0;
  int checks_clean = 0;
  std::uint64_t delivered = 0, reported_lost = 0, missed = 0, duplicated = 0, torn = 0, corrupt = 0;
  std::uint64_t eos_died = 0;  // consumers told the producer died, that then read on after the takeover
  std::uint64_t max_dead_reader_block_ns = 0;  // block, kill-consumer rounds
  std::uint64_t max_publish_wait_ns = 0;       // every round but stop-consumer in block
  // Rounds with processes in PID namespaces of their own: how many, their
  // processes (and how many of those had no /proc), the SIGKILLs and
  // SIGSTOPs whose victim was one of them, and the rounds that failed.
  int ns_rounds = 0, ns_processes = 0, ns_without_proc = 0, ns_kills = 0, ns_stops = 0, ns_failed = 0;
};

class Round {
 public:
  Round(const Options& o, Totals& t, int index, std::mt19937_64& rng) : o_(o), t_(t), index_(index), rng_(rng) {}

  // Runs the round; false if it failed (reasons printed).
  bool run() {
    policy_ = index_ % 2 ? shmbus::Policy::overwrite : shmbus::Policy::block;
    const int pick = static_cast<int>(rng_() % 100);
    fault_ = pick < 44 ? Fault::kill_consumer : pick < 84 ? Fault::kill_producer : Fault::stop_consumer;
    ++t_.by_fault[static_cast<int>(fault_)];
    // Half the block rounds that stop a consumer give the producer a hold
    // limit: a stopped reader that holds it is let go, then lapped.
    hold_ms_ = policy_ == shmbus::Policy::block && fault_ == Fault::stop_consumer && rng_() % 2 == 0 ? 100 : 0;
    // A third of the rounds: the consumers, the producers or all of them in
    // PID namespaces of their own. Drawn alike where namespaces cannot be
    // made, so a seed picks the same faults and moments everywhere.
    const std::uint64_t place = rng_() % 9;
    consumers_namespaced_ = place == 0 || place == 2;
    producers_namespaced_ = place == 1 || place == 2;
    if (namespaced()) ++t_.ns_rounds;
    name_ = "chaos-" + std::to_string(::getpid()) + "-" + std::to_string(index_);
    shmbus::Bus::remove(name_);
    shmbus::BusOptions bo;
    bo.capacity = o_.capacity;
    bo.record_size = o_.record_size;
    bo.policy = policy_;
    bo.max_readers = 8;
    std::optional<shmbus::Bus> bus;
    bus.emplace(shmbus::Bus::create(name_, bo));
    inspector_.emplace(shmbus::Inspector::open(name_));

    // Consumer 0 reads with next(), 1 with read_batch(), 2 best effort with either.
    const std::string third = (index_ / 2) % 2 == 0 ? "next" : "batch";
    for (int k = 0; k < 3; ++k) {
      const std::string who = "consumer " + std::to_string(k);
      consumers_.push_back(start_role(
          who, {"--role", "consumer", name_, k == 0 ? "next" : k == 1 ? "batch" : third, k == 2 ? "best-effort" : "holds"},
          consumers_namespaced_));
      const auto f = ready(consumers_.back());
      if (!f) return fail(who + " did not start");
      slots_.push_back(static_cast<std::uint32_t>(u64(*f, "slot")));
    }
    producers_.push_back(
        start_role("producer 0", {"--role", "producer", name_, "3", std::to_string(hold_ms_)}, producers_namespaced_));
    if (!producer_ready()) return fail("producer did not start");
    const auto started = Clock::now();
    const auto delay = std::chrono::microseconds(500 + rng_() % static_cast<std::uint64_t>(o_.run_ms * 700));
    std::this_thread::sleep_for(delay);

    bool ok = true;
    switch (fault_) {
      case Fault::kill_consumer: ok = kill_consumer(); break;
      case Fault::kill_producer: ok = kill_producer(); break;
      case Fault::stop_consumer: ok = stop_consumer(); break;
    }
    std::this_thread::sleep_until(started + std::chrono::milliseconds(o_.run_ms));
    // End the stream: the current producer publishes the end marker.
    ::kill(producers_.back().pid, SIGUSR1);
    ok = settle() && ok;
    ok = after_round() && ok;
    inspector_.reset();
    bus.reset();
    shmbus::Bus::remove(name_);
    return ok;
  }

  // Whether the round runs processes in PID namespaces of their own.
  bool namespaced() const { return (consumers_namespaced_ || producers_namespaced_) && o_.namespaces; }

 private:
  bool fail(const std::string& why) {
    std::fprintf(stderr, "chaos: round %d (%s, %s, bus %s%s%s): FAIL: %s\n", index_, shmbus::to_string(policy_),
                 to_string(fault_), name_.c_str(), where_.empty() ? "" : "; in own PID namespaces: ",
                 where_.c_str(), why.c_str());
    failed_ = true;
    return false;
  }

  // Starts a role, in a PID namespace of its own if `in_namespace` (and
  // namespaces can be made here), half of those without /proc.
  Role start_role(const std::string& who, std::vector<std::string> args, bool in_namespace) {
    Role r;
    if (in_namespace) {
      const bool no_proc = rng_() % 2 == 0;
      if (o_.namespaces) {
        r.isolation = no_proc ? Isolation::own_namespaces : Isolation::pid_namespace;
        ++t_.ns_processes;
        if (no_proc) ++t_.ns_without_proc;
        where_ += (where_.empty() ? "" : ", ") + who + (no_proc ? " (no /proc)" : "");
      }
    }
    args.insert(args.begin(), o_.self);
    args = shmbus::test::isolated(r.isolation, std::move(args));
    r.child = std::make_unique<Child>(args[0], args);
    return r;
  }

  // The role's ready line, once the program itself is known by its pid
  // here; nullopt if it did not start.
  std::optional<std::map<std::string, std::string>> ready(Role& r) {
    const auto l = r.child->line(Clock::now() + 30s);
    if (!l) return std::nullopt;
    auto f = fields(*l);
    if (f["kind"] != "ready") return std::nullopt;
    r.label = u64(f, "pid");
    // It has printed, so the wrapper has forked it.
    r.pid = r.namespaced() ? shmbus::test::only_child(r.child->pid()) : r.child->pid();
    if (r.pid <= 0) return std::nullopt;
    return f;
  }

  bool producer_ready() {
    const auto f = ready(producers_.back());
    if (!f) return false;
    producer_first_.push_back(u64(*f, "first"));
    return true;
  }

  // SIGKILLs the role as its container would be: the wrapper, which takes
  // the program with it. True once the program itself is gone (its role
  // locks dropped): reaped, or an orphan whose state reads 'Z'.
  bool kill_role(Role& r) {
    if (r.namespaced()) ++t_.ns_kills;
    ::kill(r.child->pid(), SIGKILL);
    const auto deadline = Clock::now() + 10s;
    if (!r.child->wait_exit(deadline)) return false;
    if (!r.namespaced()) return true;
    for (;;) {
      const char st = shmbus::test::process_state(r.pid);
      if (st == 'Z' || st == 'X' || st == '?') return true;
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
  }

  // The victim counts as running if its process has not exited and the
  // stream has not ended (a consumer exits only after the end marker).
  bool victim_running(Role& v) {
    const bool r = v.child->running() && !inspector_->snapshot().producer.closed;
    if (!r) ++t_.victim_not_running;
    return r;
  }

  bool kill_consumer() {
    victim_ = static_cast<int>(rng_() % consumers_.size());
    Role& c = consumers_[static_cast<std::size_t>(victim_)];
    victim_running(c);
    if (!kill_role(c)) return fail("killed consumer did not exit");
    return true;
  }

  bool kill_producer() {
    Role& p = producers_.back();
    victim_running(p);
    if (!kill_role(p)) return fail("killed producer did not exit");
    // A new producer takes the bus over and continues the sequence.
    producers_.push_back(
        start_role("producer 1", {"--role", "producer", name_, "0", std::to_string(hold_ms_)}, producers_namespaced_));
    if (!producer_ready()) return fail("the new producer did not start (takeover failed?)");
    const auto s = inspector_->snapshot();
    if (s.producer.takeovers != 1) return fail("takeovers counter is " + std::to_string(s.producer.takeovers));
    return true;
  }

  std::optional<shmbus::ReaderView> reader(std::uint32_t slot) {
    for (const auto& r : inspector_->snapshot().readers)
      if (r.slot == slot) return r;
    return std::nullopt;
  }

  // Whether a stopped victim is lapped rather than waited for.
  bool victim_lapped() const {
    return policy_ == shmbus::Policy::overwrite || victim_ == 2 || hold_ms_ > 0;
  }

  bool stop_consumer() {
    victim_ = static_cast<int>(rng_() % consumers_.size());
    Role& c = consumers_[static_cast<std::size_t>(victim_)];
    const std::uint32_t slot = slots_[static_cast<std::size_t>(victim_)];
    victim_running(c);
    // To the program itself: a stopped wrapper would stop nothing.
    if (c.namespaced()) ++t_.ns_stops;
    ::kill(c.pid, SIGSTOP);
    stopped_ = true;
    bool ok = true;
    const auto deadline = Clock::now() + 10s;
    // kill() returns before the stop lands: a victim waiting for a CPU stays
    // runnable, and one running on the other CPU reads on until the signal
    // reaches it. Until then it may still move its cursor, ending a wait
    // the producer began on it; judge only a reader that is really stopped.
    while (shmbus::test::process_state(c.pid) != 'T') {
      if (Clock::now() >= deadline) return fail("the consumer did not stop within 10 s of SIGSTOP");
      std::this_thread::sleep_for(1ms);
    }
    if (!victim_lapped()) {
      // The producer fills the ring and waits, naming the stopped reader.
      // Only a ring full up to the stopped reader's cursor holds it: a wait
      // seen earlier may be one on readers' lazily published cursors that
      // is about to end (the producer not yet run on a busy machine).
      constexpr std::uint64_t longest = 16;  // records of the longest message (see the top)
      shmbus::Snapshot s;
      for (;;) {
        s = inspector_->snapshot();
        const auto held = std::find_if(s.readers.begin(), s.readers.end(),
                                       [&](const shmbus::ReaderView& r) { return r.slot == slot; });
        if (s.producer.waiting_for_space && s.producer.blocked_on_slot == slot && held != s.readers.end() &&
            s.head + longest > held->cursor + o_.capacity)
          break;
        if (Clock::now() >= deadline) {
          ok = fail("the producer is not held back by the stopped reader in slot " + std::to_string(slot));
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
      if (ok) {
        const auto [rc, out] = run_capture({o_.inspect, "show", name_, "--interval", "0"});
        // By the pid it sees for itself (the only one the bus knows), said
        // to be another PID namespace's when it is and could tell (a
        // process without /proc cannot name its namespace).
        const std::string want = "held back by reader " + std::to_string(slot);
        const std::string pid = "(pid " + std::to_string(c.label) +
                                (c.isolation == Isolation::pid_namespace ? " in another PID namespace," : ",");
        bool named = false;
        std::istringstream lines(out);
        for (std::string l; std::getline(lines, l);)
          if (l.find(want) != std::string::npos && l.find(pid) != std::string::npos) named = true;
        if (rc != 0 || !named) ok = fail("shmbus-inspect show does not name the stopped reader:\n" + out);
        // While it is stopped, nothing it has not read is overwritten.
        const auto r = reader(slot);
        const std::uint64_t h0 = inspector_->snapshot().head;
        std::this_thread::sleep_for(20ms);
        const std::uint64_t h1 = inspector_->snapshot().head;
        if (!r || h1 != h0 || h1 > r->cursor + o_.capacity)
          ok = fail("head moved past the stopped reader: " + std::to_string(h0) + " -> " + std::to_string(h1));
        if (ok) ++t_.held_block;
      }
    } else {
      // The producer does not wait (overwrite, a best-effort reader, or one
      // let go after the hold limit): it laps the stopped reader twice.
      const auto r = reader(slot);
      for (;;) {
        const auto s = inspector_->snapshot();
        if (r && s.head >= r->cursor + 2 * o_.capacity) break;
        if (Clock::now() >= deadline) {
          ok = fail("the producer did not lap the stopped reader (head " + std::to_string(s.head) + ")");
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
      if (ok) ++t_.lapped_overwrite;
    }
    ::kill(c.pid, SIGCONT);
    return ok;
  }

  // Waits for every process to finish and checks what each consumer saw.
  bool settle() {
    bool ok = true;
    const auto deadline = Clock::now() + kHangBound;
    Child& prod = *producers_.back().child;
    std::optional<std::string> done;
    for (auto l = prod.line(deadline); l; l = prod.line(deadline))
      if (fields(*l)["kind"] == "done") done = *l;
    if (!prod.wait_exit(deadline) || !prod.exited_ok() || !done) return fail("producer did not finish cleanly");
    const auto pf = fields(*done);
    const std::uint64_t end = u64(pf, "end");
    const std::uint64_t wait_ns = u64(pf, "max_wait_ns");
    if (!(policy_ == shmbus::Policy::block && fault_ == Fault::stop_consumer)) {
      t_.max_publish_wait_ns = std::max(t_.max_publish_wait_ns, wait_ns);
      if (std::chrono::nanoseconds(wait_ns) > kDeadReaderBound)
        ok = fail("a publish waited " + std::to_string(wait_ns / 1000000) + " ms (bound " +
                  std::to_string(kDeadReaderBound.count()) + " ms)");
      if (policy_ == shmbus::Policy::block && fault_ == Fault::kill_consumer)
        t_.max_dead_reader_block_ns = std::max(t_.max_dead_reader_block_ns, wait_ns);
    }
    if (fault_ == Fault::kill_producer) {
      // Continuous across the takeover: the new producer starts where the
      // committed sequence ends, never below what the old one published first.
      if (producer_first_.back() < producer_first_.front())
        ok = fail("the new producer started at " + std::to_string(producer_first_.back()));
      ++t_.takeovers;
    }
    for (std::size_t k = 0; k < consumers_.size(); ++k) {
      if (fault_ == Fault::kill_consumer && static_cast<int>(k) == victim_) continue;
      Child& c = *consumers_[k].child;
      std::optional<std::string> cd;
      for (auto l = c.line(deadline); l; l = c.line(deadline))
        if (fields(*l)["kind"] == "done") cd = *l;
      if (!c.wait_exit(deadline) || !c.exited_ok() || !cd) {
        ok = fail("consumer " + std::to_string(k) + " did not finish cleanly");
        continue;
      }
      const auto f = fields(*cd);
      const std::uint64_t delivered = u64(f, "delivered"), lost = u64(f, "reported_lost");
      t_.delivered += delivered;
      t_.reported_lost += lost;
      t_.missed += u64(f, "missed");
      t_.duplicated += u64(f, "duplicated");
      t_.torn += u64(f, "torn");
      t_.corrupt += u64(f, "corrupt");
      t_.eos_died += u64(f, "eos_died");
      std::string problem;
      if (u64(f, "missed") || u64(f, "duplicated") || u64(f, "torn") || u64(f, "corrupt"))
        problem = "missed, duplicated, torn or corrupt messages";
      else if (u64(f, "end") != end)
        problem = "ended at " + std::to_string(u64(f, "end")) + ", the producer at " + std::to_string(end);
      else if (u64(f, "first") + u64(f, "sequences") + u64(f, "padded") + lost != end)
        problem = "from " + f.at("first") + ", delivered " + std::to_string(delivered) + " messages of " +
                  f.at("sequences") + " sequences + " + f.at("padded") + " of padding + lost " + std::to_string(lost) +
                  " != " + std::to_string(end);
      else if (u64(f, "library_lost") != lost)
        problem = "the consumer's lost() says " + f.at("library_lost");
      else if (u64(f, "eos_other") != 0)
        problem = "end-of-stream for another reason than a dead producer, before the end marker";
      else if (fault_ != Fault::kill_producer && u64(f, "eos_died") != 0)
        problem = "told the producer died, but it was not killed";
      else if (fault_ == Fault::stop_consumer && victim_lapped() && static_cast<int>(k) == victim_ &&
               lost < o_.capacity / 2)
        problem = "lapped while stopped, but told of only " + std::to_string(lost) + " lost";
      else if (u64(f, "let_go") != 0 && (hold_ms_ == 0 || k == 2))
        problem = "let go by a producer without a hold limit";
      else if (hold_ms_ > 0 && static_cast<int>(k) == victim_ && victim_ != 2 && u64(f, "let_go") != 1)
        problem = "stopped past the hold limit, but not told it was let go";
      if (problem.empty() && hold_ms_ > 0 && static_cast<int>(k) == victim_ && victim_ != 2) ++t_.let_go;
      if (!problem.empty()) ok = fail("consumer " + std::to_string(k) + ": " + problem + ": " + *cd);
      if (o_.verbose) std::fprintf(stderr, "chaos: round %d consumer %zu: %s\n", index_, k, cd->c_str());
    }
    return ok;
  }

  // The reader table and the segment after everyone is gone.
  bool after_round() {
    bool ok = true;
    const auto before = inspector_->snapshot();
    const std::uint64_t by_producer = before.counters.readers_reclaimed;
    const auto reclaimed = shmbus::reclaim_dead_readers(name_);
    t_.reclaimed_by_producer += static_cast<int>(by_producer);
    t_.reclaimed_by_gc += static_cast<int>(reclaimed.size());
    const int dead = fault_ == Fault::kill_consumer ? 1 : 0;
    if (static_cast<int>(by_producer + reclaimed.size()) != dead)
      ok = fail(std::to_string(by_producer) + " slots reclaimed by the producer and " +
                std::to_string(reclaimed.size()) + " by gc, expected " + std::to_string(dead));
    const auto after = inspector_->snapshot();
    if (!after.readers.empty()) {
      t_.slots_leaked += static_cast<int>(after.readers.size());
      ok = fail(std::to_string(after.readers.size()) + " reader slots still in use after every reader left");
    }
    const auto [rc, out] = run_capture({o_.inspect, "check", name_});
    if (rc == 0)
      ++t_.checks_clean;
    else
      ok = fail("shmbus-inspect check exited " + std::to_string(rc) + ":\n" + out);
    return ok;
  }

  const Options& o_;
  Totals& t_;
  int index_;
  std::mt19937_64& rng_;
  shmbus::Policy policy_ = shmbus::Policy::block;
  Fault fault_ = Fault::kill_consumer;
  std::uint32_t hold_ms_ = 0;  // the producers' hold limit, 0 for none
  std::string name_;
  std::optional<shmbus::Inspector> inspector_;
  bool consumers_namespaced_ = false, producers_namespaced_ = false;
  std::string where_;  // the processes in PID namespaces of their own, for failure reports
  std::vector<Role> consumers_;
  std::vector<std::uint32_t> slots_;
  std::vector<Role> producers_;
  std::vector<std::uint64_t> producer_first_;
  int victim_ = -1;
  bool stopped_ = false;
  bool failed_ = false;
};

int usage() {
  std::fprintf(stderr,
               "usage: shmbus-chaos --inspect PATH [--rounds N] [--max-seconds S] [--seed N] [--run-ms MS] "
               "[--verbose]\n");
  return 2;
}

// A driver killed mid-round (SIGKILL, a ctest timeout) takes its children
// with it (PR_SET_PDEATHSIG) but leaves that round's bus in /dev/shm: remove
// the buses of drivers that are gone.
void remove_buses_of_dead_drivers() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string file = e.path().filename().string();
    const std::string prefix = "shmbus.chaos-";
    if (file.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(file.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      try {
        shmbus::Bus::remove(file.substr(std::string("shmbus.").size()));
      } catch (const std::exception&) {
      }
    }
  }
}

int run_driver(Options o) {
  remove_buses_of_dead_drivers();
  o.self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (const std::string why = shmbus::test::isolation_unavailable(); !why.empty()) {
    o.namespaces = false;
    std::fprintf(stderr, "shmbus-chaos: %s: the rounds meant for own PID namespaces run unisolated\n", why.c_str());
  }
  std::mt19937_64 rng(o.seed);
  Totals t;
  const auto start = Clock::now();
  const auto budget = start + std::chrono::seconds(o.max_seconds);
  for (int i = 0; i < o.rounds && Clock::now() < budget; ++i) {
    Round r(o, t, i, rng);
    bool ok = false;
    try {
      ok = r.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "chaos: round %d: FAIL: %s\n", i, e.what());
    }
    ++t.rounds;
    if (!ok) ++t.failed;
    if (!ok && r.namespaced()) ++t.ns_failed;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr,
               "shmbus-chaos: %d rounds in %.1f s (seed %" PRIu64 ", %d block, %d overwrite), %d failed; "
               "kills: %d consumer, %d producer (%d takeovers, %" PRIu64 " 'producer died' ends followed across "
               "them); held: %d stopped consumers (%d held a block "
               "producer, %d lapped: overwrite, best effort or let go, %d of them let go); victim not running: %d; messages: %" PRIu64
               " delivered, %" PRIu64 " lost (reported exactly: overwrite, best effort, let go), %" PRIu64 " missed, %" PRIu64
               " duplicated, %" PRIu64 " torn, %" PRIu64 " corrupt; max block by a dead reader %.1f ms "
               "(bound %lld ms), max publish wait %.1f ms; slots: %d reclaimed by the producer, %d by gc, "
               "%d leaked; inspect check clean %d/%d; in own PID namespaces: %d rounds (%d processes, %d of them "
               "without /proc; %d kills, %d stops), %d failed\n",
               t.rounds, secs, o.seed, (t.rounds + 1) / 2, t.rounds / 2, t.failed, t.by_fault[0], t.by_fault[1],
               t.takeovers, t.eos_died, t.by_fault[2], t.held_block, t.lapped_overwrite, t.let_go, t.victim_not_running, t.delivered,
               t.reported_lost, t.missed, t.duplicated, t.torn, t.corrupt, t.max_dead_reader_block_ns / 1e6,
               static_cast<long long>(kDeadReaderBound.count()), t.max_publish_wait_ns / 1e6,
               t.reclaimed_by_producer, t.reclaimed_by_gc, t.slots_leaked, t.checks_clean, t.rounds, t.ns_rounds,
               t.ns_processes, t.ns_without_proc, t.ns_kills, t.ns_stops, t.ns_failed);
  if (t.rounds < o.rounds) {
    std::fprintf(stderr, "shmbus-chaos: only %d of %d rounds within the %d s budget\n", t.rounds, o.rounds,
                 o.max_seconds);
    return 1;
  }
  return t.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 3 && args[0] == "--role") {
      if (args[1] == "consumer")
        return run_consumer(args[2], args.size() > 3 && args[3] == "batch", args.size() > 4 && args[4] == "best-effort");
      if (args[1] == "producer")
        return run_producer(args[2], args.size() > 3 ? static_cast<std::uint32_t>(std::stoul(args[3])) : 0,
                            args.size() > 4 ? static_cast<std::uint32_t>(std::stoul(args[4])) : 0);
      return usage();
    }
    Options o;
    o.seed = static_cast<std::uint64_t>(std::random_device{}());
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= args.size()) throw std::invalid_argument(a + " needs a value");
        return args[++i];
      };
      if (a == "--inspect") o.inspect = value();
      else if (a == "--rounds") o.rounds = std::stoi(value());
      else if (a == "--max-seconds") o.max_seconds = std::stoi(value());
      else if (a == "--seed") o.seed = std::stoull(value());
      else if (a == "--run-ms") o.run_ms = std::stoi(value());
      else if (a == "--verbose") o.verbose = true;
      else if (a == "--help" || a == "-h") {
        usage();
        return 0;
      } else return usage();
    }
    if (o.inspect.empty() || o.rounds <= 0 || o.run_ms <= 0) return usage();
    return run_driver(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shmbus-chaos: %s\n", e.what());
    return 1;
  }
}
