// shmbus-inspect against live buses: the real binary, real producer and
// consumer processes (actor.cpp), real SIGKILLs, and segments corrupted at the
// byte offsets documented in layout.hpp.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <shmbus/shmbus.hpp>

#include "child_process.hpp"
#include "layout.hpp"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

// Polls `pred` until it holds or `limit` passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 15s) {
  const auto deadline = Clock::now() + limit;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

using shmbus::test::process_state;

struct Result {
  int status = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
};

int decode_status(int ws) {
  if (WIFEXITED(ws)) return WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) return 128 + WTERMSIG(ws);
  return -1;
}

// Waits for `pid` to exit, at most `limit`; kills it past that.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    int ws = 0;
    const pid_t r = ::waitpid(pid, &ws, WNOHANG);
    if (r == pid) return decode_status(ws);
    if (r < 0) return -1;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &ws, 0);
      return -1;
    }
    std::this_thread::sleep_for(2ms);
  }
}

class InspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "shmbus-inspect-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    std::ofstream(stop_file()).put('\n');
    for (pid_t pid : children_) ::kill(pid, SIGCONT);
    for (pid_t pid : children_) wait_exit(pid, 5s);
    for (const std::string& b : buses_) {
      try {
        shmbus::Bus::remove(b);
      } catch (...) {
      }
      ::unlink(shmbus::segment_path(b).c_str());
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string prefix() const { return "inspect-test-" + std::to_string(::getpid()) + "-"; }

  // A bus name no other test process uses; removed at the end of the test.
  std::string bus_name(const std::string& tag) {
    buses_.push_back(prefix() + tag);
    return buses_.back();
  }

  std::string tmp(const std::string& name) const { return dir_ + "/" + name; }
  std::string stop_file() const { return tmp("stop"); }

  static pid_t spawn(const std::vector<std::string>& argv, const std::string& out = {},
                     const std::string& err = {}) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (!out.empty()) {
        const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fd, STDOUT_FILENO);
      }
      if (!err.empty()) {
        const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ::dup2(fd, STDERR_FILENO);
      }
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    return pid;
  }

  // Runs shmbus-inspect with `args`; stdout and stderr captured.
  Result inspect(const std::vector<std::string>& args) {
    std::vector<std::string> argv{SHMBUS_INSPECT_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = tmp("out-" + std::to_string(runs_)),
                      err = tmp("err-" + std::to_string(runs_));
    ++runs_;
    Result r;
    r.status = wait_exit(spawn(argv, out, err), 30s);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Runs `inspect ... --json` and parses stdout.
  json inspect_json(std::vector<std::string> args, int expect_status = 0) {
    args.push_back("--json");
    const Result r = inspect(args);
    EXPECT_EQ(r.status, expect_status) << r.err;
    try {
      return json::parse(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON (" << e.what() << "): " << r.out;
      return json::object();
    }
  }

  pid_t actor(const std::vector<std::string>& args) {
    std::vector<std::string> argv{SHMBUS_ACTOR_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    children_.push_back(spawn(argv));
    return children_.back();
  }

  // The reader slot a consumer actor wrote to `ready` once attached.
  std::uint32_t wait_ready(const std::string& ready) {
    EXPECT_TRUE(eventually([&] { return fs::exists(ready); })) << ready;
    return static_cast<std::uint32_t>(std::stoul(slurp(ready)));
  }

  void forget_child(pid_t pid) { std::erase(children_, pid); }

  std::string dir_;
  std::vector<std::string> buses_;
  std::vector<pid_t> children_;
  int runs_ = 0;
};

shmbus::BusOptions small_bus(std::uint64_t capacity = 16, std::uint32_t record_size = 128) {
  shmbus::BusOptions o;
  o.capacity = capacity;
  o.record_size = record_size;
  o.max_readers = 4;
  return o;
}

// A bus holding "hello 0" .. "hello N-1", with no producer attached.
void fill(const std::string& bus, int n) {
  shmbus::ProducerOptions po;
  po.timestamps = shmbus::Timestamps::coarse;  // dump and show print publish times
  shmbus::Producer p(shmbus::Bus::open(bus), po);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(p.publish(bytes("hello " + std::to_string(i))));
  }
}

const json* reader_in(const json& show, std::uint32_t slot) {
  for (const json& r : show["readers"]) {
    if (r["slot"] == slot) return &r;
  }
  return nullptr;
}

bool has_warning(const json& show, const std::string& kind, std::uint32_t slot) {
  for (const json& w : show["warnings"]) {
    if (w["kind"] == kind && w["slot"] == slot) return true;
  }
  return false;
}

// The numbers in `show`'s text output, keyed like the JSON.
struct ShownText {
  std::uint64_t head = 0, oldest = 0, retained = 0, published = 0;
  std::map<std::uint32_t, std::vector<std::string>> rows;  // slot -> cells
};

ShownText parse_show_text(const std::string& text) {
  ShownText t;
  // "  key        value": the value after the key and its padding.
  const auto value_of = [](const std::string& line, const std::string& key) -> std::string {
    const std::string lead = "  " + key + " ";
    if (!line.starts_with(lead)) return {};
    const auto at = line.find_first_not_of(' ', lead.size());
    return at == std::string::npos ? std::string() : line.substr(at);
  };
  bool in_table = false;
  for (const std::string& line : lines_of(text)) {
    if (auto v = value_of(line, "head"); !v.empty()) {
      t.head = std::stoull(v);
    } else if (auto o = value_of(line, "oldest"); !o.empty()) {
      t.oldest = std::stoull(o);
      t.retained = std::stoull(o.substr(o.find('(') + 1));
    } else if (auto c = value_of(line, "counters"); c.starts_with("published ")) {
      t.published = std::stoull(c.substr(std::string("published ").size()));
    } else if (line.starts_with("  SLOT ")) {
      in_table = true;
    } else if (in_table && !line.empty()) {
      std::stringstream ss(line);
      std::vector<std::string> cells;
      for (std::string cell; ss >> cell;) cells.push_back(cell);
      t.rows[static_cast<std::uint32_t>(std::stoul(cells.at(0)))] = cells;
    } else {
      in_table = false;
    }
  }
  return t;
}

// ---------------------------------------------------------------------------

TEST_F(InspectTest, DeadReaderIsShownHoldingBackTheProducerAndGcFreesIt) {
  const std::string bus = bus_name("kill");
  shmbus::BusOptions o = small_bus(64, 128);
  o.policy = shmbus::Policy::block;
  shmbus::Bus::create(bus, o);

  const pid_t stalled = actor({"stall", bus, "stalled", tmp("ready-stalled")});
  const std::uint32_t stalled_slot = wait_ready(tmp("ready-stalled"));
  const pid_t fast = actor({"consume", bus, "fast", stop_file(), tmp("ready-fast")});
  const std::uint32_t fast_slot = wait_ready(tmp("ready-fast"));
  const pid_t producer = actor({"produce", bus, stop_file(), "100"});

  // The producer fills the ring, then waits for the reader that never reads.
  const auto insp = shmbus::Inspector::open(bus);
  ASSERT_TRUE(eventually([&] {
    const auto s = insp.snapshot();
    bool fast_caught_up = false;
    for (const auto& r : s.readers) fast_caught_up |= r.slot == fast_slot && r.cursor == s.head;
    return s.producer.waiting_for_space && s.producer.blocked_on_slot == stalled_slot &&
           fast_caught_up;
  })) << inspect({"show", bus, "--interval", "0"}).out;
  EXPECT_EQ(insp.snapshot().head, 64u);

  // Freeze everyone else so nobody but gc reclaims the slot, then kill the
  // stalled reader.
  ::kill(producer, SIGSTOP);
  ::kill(fast, SIGSTOP);
  ASSERT_TRUE(eventually([&] { return process_state(producer) == 'T'; }));
  ASSERT_TRUE(eventually([&] { return process_state(fast) == 'T'; }));
  ::kill(stalled, SIGKILL);
  EXPECT_EQ(wait_exit(stalled, 5s), 128 + SIGKILL);
  forget_child(stalled);

  // show: the reader is dead and the producer is blocked on it.
  const Result text = inspect({"show", bus});  // the default 200 ms sample
  ASSERT_EQ(text.status, 0) << text.err;
  const json j = inspect_json({"show", bus, "--interval", "0"});
  const json* dead = reader_in(j, stalled_slot);
  ASSERT_NE(dead, nullptr) << j.dump(2);
  EXPECT_EQ((*dead)["liveness"], "dead");
  EXPECT_EQ((*dead)["alive"], false);
  EXPECT_EQ((*dead)["name"], "stalled");
  EXPECT_EQ((*dead)["pid"], stalled);
  EXPECT_EQ((*dead)["cursor"], 0u);
  EXPECT_EQ((*dead)["lag"], 64u);
  EXPECT_EQ((*dead)["lag_percent"], 100.0);
  EXPECT_EQ(j["producer"]["alive"], true);
  EXPECT_EQ(j["producer"]["pid"], producer);
  EXPECT_EQ(j["producer"]["waiting_for_space"], true);
  EXPECT_EQ(j["producer"]["blocked_on_slot"], stalled_slot);
  EXPECT_EQ(j["unread"], 64u);
  EXPECT_TRUE(has_warning(j, "dead_reader", stalled_slot)) << j["warnings"].dump(2);
  EXPECT_TRUE(has_warning(j, "producer_blocked", stalled_slot)) << j["warnings"].dump(2);
  EXPECT_TRUE(has_warning(j, "reader_lagging", stalled_slot)) << j["warnings"].dump(2);
  const std::string who =
      "reader " + std::to_string(stalled_slot) + " 'stalled' (pid " + std::to_string(stalled) + ", dead)";
  EXPECT_THAT(text.out, HasSubstr("warning: " + who + " is dead")) << text.out;
  EXPECT_THAT(text.out, HasSubstr("warning: producer pid " + std::to_string(producer) +
                                  " is blocked on a full ring, held back by " + who))
      << text.out;
  EXPECT_THAT(text.out, HasSubstr("publish    0.0/s over ")) << text.out;

  // The text and the JSON carry the same numbers (everyone is frozen).
  const ShownText t = parse_show_text(text.out);
  EXPECT_EQ(t.head, j["head"]);
  EXPECT_EQ(t.oldest, j["oldest"]);
  EXPECT_EQ(t.retained, j["retained"]);
  EXPECT_EQ(t.published, j["counters"]["published"]);
  ASSERT_EQ(t.rows.size(), j["readers"].size()) << text.out;
  for (const json& r : j["readers"]) {
    const auto& cells = t.rows.at(r["slot"].get<std::uint32_t>());
    ASSERT_GE(cells.size(), 9u);
    EXPECT_EQ(cells[1], r["name"]);
    EXPECT_EQ(cells[2], std::to_string(r["pid"].get<pid_t>()));
    // The frozen fast reader shows as stopped; the others by their liveness.
    EXPECT_THAT(cells[3], HasSubstr(r["stopped"].get<bool>() ? std::string("stopped")
                                                             : r["liveness"].get<std::string>()));
    EXPECT_EQ(cells[4], std::to_string(r["cursor"].get<std::uint64_t>()));
    EXPECT_EQ(cells[5], std::to_string(r["lag"].get<std::uint64_t>()));
    EXPECT_EQ(cells[7], std::to_string(r["delivered"].get<std::uint64_t>()));
    EXPECT_EQ(cells[8], std::to_string(r["lost"].get<std::uint64_t>()));
  }

  // gc reclaims exactly the dead reader and says so.
  const Result gc = inspect({"gc", bus});
  ASSERT_EQ(gc.status, 0) << gc.err;
  EXPECT_THAT(gc.out, HasSubstr("reclaimed reader " + std::to_string(stalled_slot) +
                                " 'stalled' (pid " + std::to_string(stalled)))
      << gc.out;
  // The producer is stopped: it continues once resumed, not now.
  EXPECT_THAT(gc.out, HasSubstr("producer pid " + std::to_string(producer) +
                                " was held back by it; it is stopped and continues once resumed"))
      << gc.out;
  const auto after_gc = insp.snapshot();
  ASSERT_EQ(after_gc.readers.size(), 1u);
  EXPECT_EQ(after_gc.readers[0].slot, fast_slot);
  EXPECT_GE(after_gc.counters.readers_reclaimed, 1u);
  EXPECT_EQ(inspect_json({"gc", bus})["reclaimed"].size(), 0u);

  // show no longer blames the slot gc freed, though the stopped producer
  // has not looked again yet.
  const Result shown = inspect({"show", bus, "--interval", "0"});
  EXPECT_THAT(shown.out, Not(HasSubstr("held back by reader " + std::to_string(stalled_slot))))
      << shown.out;
  EXPECT_THAT(shown.out, HasSubstr("producer   pid " + std::to_string(producer) + " stopped"))
      << shown.out;
  const json after_j = inspect_json({"show", bus, "--interval", "0"});
  EXPECT_TRUE(after_j["producer"]["blocked_on_slot"].is_null()) << after_j.dump(2);
  EXPECT_EQ(after_j["producer"]["stopped"], true);
  EXPECT_FALSE(has_warning(after_j, "producer_blocked", stalled_slot)) << after_j["warnings"].dump(2);

  // The producer continues past the full ring.
  ::kill(producer, SIGCONT);
  ::kill(fast, SIGCONT);
  EXPECT_TRUE(eventually([&] { return insp.snapshot().head > after_gc.head + 64; }))
      << inspect({"show", bus, "--interval", "0"}).out;
  const json later = inspect_json({"show", bus, "--interval", "0"});
  EXPECT_EQ(later["readers"].size(), 1u);
  EXPECT_FALSE(has_warning(later, "dead_reader", stalled_slot));
}

TEST_F(InspectTest, StoppedReaderIsShownAsStopped) {
  const std::string bus = bus_name("stopped");
  shmbus::Bus::create(bus, small_bus(64, 128));
  const pid_t reader = actor({"consume", bus, "paused", stop_file(), tmp("ready")});
  const std::uint32_t slot = wait_ready(tmp("ready"));
  ::kill(reader, SIGSTOP);
  ASSERT_TRUE(eventually([&] { return process_state(reader) == 'T'; }));

  const Result text = inspect({"show", bus, "--interval", "0"});
  ASSERT_EQ(text.status, 0) << text.err;
  const ShownText t = parse_show_text(text.out);
  const auto& cells = t.rows.at(slot);
  ASSERT_GE(cells.size(), 4u) << text.out;
  EXPECT_EQ(cells[3], "stopped") << text.out;
  const json j = inspect_json({"show", bus, "--interval", "0"});
  const json* r = reader_in(j, slot);
  ASSERT_NE(r, nullptr) << j.dump(2);
  EXPECT_EQ((*r)["stopped"], true);
  EXPECT_EQ((*r)["alive"], true);  // stopped is not dead: gc leaves it alone

  ::kill(reader, SIGCONT);
  ASSERT_TRUE(eventually([&] { return process_state(reader) != 'T'; }));
  const json resumed = inspect_json({"show", bus, "--interval", "0"});
  EXPECT_EQ((*reader_in(resumed, slot))["stopped"], false);
}

TEST_F(InspectTest, GcDoesNotPromiseADeadProducerCanContinue) {
  const std::string bus = bus_name("deadprod");
  shmbus::BusOptions o = small_bus(64, 128);
  o.policy = shmbus::Policy::block;
  shmbus::Bus::create(bus, o);
  const pid_t stalled = actor({"stall", bus, "stalled", tmp("ready-stalled")});
  const std::uint32_t stalled_slot = wait_ready(tmp("ready-stalled"));
  const pid_t producer = actor({"produce", bus, stop_file(), "0"});
  const auto insp = shmbus::Inspector::open(bus);
  ASSERT_TRUE(eventually([&] {
    const auto s = insp.snapshot();
    return s.producer.waiting_for_space && s.producer.blocked_on_slot == stalled_slot;
  })) << inspect({"show", bus, "--interval", "0"}).out;

  // The producer dies while held back, then so does the reader.
  ::kill(producer, SIGKILL);
  EXPECT_EQ(wait_exit(producer, 5s), 128 + SIGKILL);
  forget_child(producer);
  ::kill(stalled, SIGKILL);
  EXPECT_EQ(wait_exit(stalled, 5s), 128 + SIGKILL);
  forget_child(stalled);

  const Result before = inspect({"show", bus, "--interval", "0"});
  EXPECT_THAT(before.out, Not(HasSubstr("waiting for space"))) << before.out;

  const Result gc = inspect({"gc", bus});
  ASSERT_EQ(gc.status, 0) << gc.err;
  EXPECT_THAT(gc.out, HasSubstr("reclaimed reader " + std::to_string(stalled_slot))) << gc.out;
  EXPECT_THAT(gc.out, Not(HasSubstr("can continue"))) << gc.out;
  EXPECT_THAT(gc.out, HasSubstr("producer pid " + std::to_string(producer) +
                                " that it held back is dead; a new producer can take the bus over"))
      << gc.out;
}

TEST_F(InspectTest, ShowMeasuresPublishAndReaderRates) {
  const std::string bus = bus_name("rates");
  shmbus::Bus::create(bus, small_bus(1024, 128));
  actor({"consume", bus, "reader", stop_file(), tmp("ready")});
  const std::uint32_t slot = wait_ready(tmp("ready"));
  actor({"produce", bus, stop_file(), "200"});
  const auto insp = shmbus::Inspector::open(bus);
  ASSERT_TRUE(eventually([&] { return insp.snapshot().head > 10; }));

  const json j = inspect_json({"show", bus, "--interval", "300ms"});
  ASSERT_TRUE(j["publish_rate"].is_number()) << j.dump(2);
  EXPECT_GT(j["publish_rate"].get<double>(), 0.0);
  EXPECT_GE(j["sample_s"].get<double>(), 0.3);
  const json* r = reader_in(j, slot);
  ASSERT_NE(r, nullptr);
  EXPECT_GT((*r)["rate"].get<double>(), 0.0);
  EXPECT_EQ((*r)["alive"], true);
  EXPECT_EQ(j["producer"]["alive"], true);
  EXPECT_EQ(j["warnings"].size(), 0u) << j["warnings"].dump(2);

  const json once = inspect_json({"show", bus, "--interval", "0"});
  EXPECT_TRUE(once["publish_rate"].is_null());
  EXPECT_TRUE(once["sample_s"].is_null());
}

TEST_F(InspectTest, CheckIsCleanOnAHealthyBus) {
  const std::string bus = bus_name("clean");
  shmbus::Bus::create(bus, small_bus());
  fill(bus, 20);
  const Result r = inspect({"check", bus});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("clean"));
  const json j = inspect_json({"check", bus});
  EXPECT_EQ(j["clean"], true);
  EXPECT_EQ(j["problems"].size(), 0u);
}

TEST_F(InspectTest, CheckNamesACorruptedRecord) {
  const std::string bus = bus_name("corrupt");
  shmbus::Bus::create(bus, small_bus(16, 128));
  fill(bus, 20);  // records 4..19 retained

  {
    // Two records broken at the offsets documented in layout.hpp: record 10
    // claims a payload longer than its record, record 12's slot carries the
    // commit tag of another sequence.
    const int fd = ::open(shmbus::segment_path(bus).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    std::uint64_t log_offset = 0;
    ASSERT_EQ(::pread(fd, &log_offset, 8, offsetof(shmbus::layout::SegmentHeader, log_offset)), 8);
    const auto record_at = [&](std::uint64_t seq) {
      return static_cast<off_t>(log_offset + (seq & 15) * 128);
    };
    const std::uint32_t bad_length = 4000;
    ASSERT_EQ(::pwrite(fd, &bad_length, 4,
                       record_at(10) + offsetof(shmbus::layout::RecordHeader, length)),
              4);
    const std::uint64_t wrong_tag = 12 + 16 + 1;
    ASSERT_EQ(::pwrite(fd, &wrong_tag, 8,
                       record_at(12) + offsetof(shmbus::layout::RecordHeader, tag)),
              8);
    ::close(fd);
  }

  const Result r = inspect({"check", bus});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("record 10")) << r.out;
  EXPECT_THAT(r.out, testing::AnyOf(HasSubstr("record 12"), HasSubstr("slot 12"))) << r.out;
  EXPECT_THAT(r.err, HasSubstr("bus '" + bus + "'"));
  EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;

  const json j = inspect_json({"check", bus}, 1);
  EXPECT_EQ(j["clean"], false);
  EXPECT_GE(j["problems"].size(), 2u);

  // dump marks both and never reads past the record.
  const Result dump = inspect({"dump", bus, "--from", "10", "--count", "3"});
  EXPECT_EQ(dump.status, 1);
  const auto dumped = lines_of(dump.out);
  ASSERT_EQ(dumped.size(), 3u) << dump.out;
  EXPECT_THAT(dumped[0], HasSubstr("len 4000  \"hello 10"));
  EXPECT_THAT(dumped[0], HasSubstr("CORRUPT: length 4000 exceeds the max message"));
  EXPECT_THAT(dumped[1], HasSubstr("\"hello 11\""));
  EXPECT_THAT(dumped[2], HasSubstr("seq 12  not readable"));
  const json dj = inspect_json({"dump", bus, "--from", "10", "--count", "3"}, 1);
  ASSERT_EQ(dj["records"].size(), 2u);
  EXPECT_FALSE(dj["records"][0]["corrupt"].is_null());
  EXPECT_LE(dj["records"][0]["payload"].get<std::string>().size(), 2u * 104);
  EXPECT_EQ(dj["records"][0]["length"], 4000u);  // the field as stored
  EXPECT_TRUE(dj["records"][1]["corrupt"].is_null());
  EXPECT_EQ(dj["missing"], json::array({12}));
  for (const json& p : j["problems"]) {
    // The text names every problem the JSON carries.
    EXPECT_THAT(r.out, HasSubstr(p["where"].get<std::string>() + ": " + p["what"].get<std::string>()));
  }
}

TEST_F(InspectTest, CheckNamesATruncatedSegment) {
  const std::string bus = bus_name("truncated");
  shmbus::Bus::create(bus, small_bus(16, 128));
  fill(bus, 3);
  const std::string path = shmbus::segment_path(bus);
  std::uint64_t log_offset = 0;
  {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, &log_offset, 8, offsetof(shmbus::layout::SegmentHeader, log_offset)), 8);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(log_offset + 2 * 128)), 0);
    ::close(fd);
  }

  const Result r = inspect({"check", bus});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("truncated")) << r.out;
  EXPECT_THAT(r.out, HasSubstr(bus));
  const json j = inspect_json({"check", bus}, 1);
  EXPECT_EQ(j["clean"], false);
  EXPECT_EQ(j["open_error"], "truncated");
  ASSERT_EQ(j["problems"].size(), 1u);

  // Views refuse it with one line naming the bus.
  const Result show = inspect({"show", bus, "--interval", "0"});
  EXPECT_EQ(show.status, 1);
  EXPECT_THAT(show.err, HasSubstr("bus '" + bus + "'"));
  EXPECT_EQ(lines_of(show.err).size(), 1u) << show.err;
  EXPECT_EQ(show.out, "");
}

TEST_F(InspectTest, ListFindsExactlyTheBusesThatExist) {
  const std::string mine = prefix() + "list-";
  const std::string a = bus_name("list-a"), b = bus_name("list-b"), c = bus_name("list-c"),
                    broken = bus_name("list-broken");
  for (const auto& n : {a, b, c, broken}) shmbus::Bus::create(n, small_bus());
  fill(a, 5);
  ASSERT_EQ(::truncate(shmbus::segment_path(broken).c_str(), 4096), 0);

  const auto listed = [&] {
    std::map<std::string, json> out;
    const json j = inspect_json({"list"});
    for (const json& e : j["buses"]) {
      if (e["name"].get<std::string>().starts_with(mine)) out[e["name"]] = e;
    }
    return out;
  };
  auto found = listed();
  EXPECT_EQ(found.size(), 4u);
  ASSERT_TRUE(found.count(a) && found.count(b) && found.count(c) && found.count(broken));
  EXPECT_EQ(found[a]["valid"], true);
  EXPECT_EQ(found[a]["head"], 5u);
  EXPECT_EQ(found[a]["policy"], "block");
  EXPECT_EQ(found[a]["capacity"], 16u);
  EXPECT_EQ(found[a]["record_size"], 128u);
  EXPECT_EQ(found[c]["head"], 0u);
  EXPECT_EQ(found[broken]["valid"], false);
  EXPECT_FALSE(found[broken]["error"].get<std::string>().empty());
  EXPECT_EQ(found[broken]["file_size"], 4096u);

  const Result rm = inspect({"rm", b});
  ASSERT_EQ(rm.status, 0) << rm.err;
  found = listed();
  EXPECT_EQ(found.size(), 3u);
  EXPECT_FALSE(found.count(b));

  // The text lists the same buses, one line each.
  const Result text = inspect({"list"});
  ASSERT_EQ(text.status, 0) << text.err;
  std::set<std::string> names;
  for (const std::string& line : lines_of(text.out)) {
    if (line.starts_with(mine)) names.insert(line.substr(0, line.find(' ')));
  }
  EXPECT_EQ(names, (std::set<std::string>{a, c, broken})) << text.out;
  for (const std::string& line : lines_of(text.out)) {
    if (line.starts_with(broken + " ")) {
      EXPECT_THAT(line, HasSubstr("invalid: "));
    }
    if (line.starts_with(a + " ")) {
      EXPECT_THAT(line, HasSubstr("16 x 128 B"));
    }
  }
}

TEST_F(InspectTest, DumpShowsRecordsWithSequenceTimestampLengthAndPayload) {
  const std::string bus = bus_name("dump");
  shmbus::Bus::create(bus, small_bus(16, 128));
  fill(bus, 20);  // records 4..19 retained

  const Result text = inspect({"dump", bus, "--from", "4", "--count", "3"});
  ASSERT_EQ(text.status, 0) << text.err;
  const auto lines = lines_of(text.out);
  ASSERT_EQ(lines.size(), 3u) << text.out;
  EXPECT_THAT(lines[0], testing::StartsWith("seq 4  "));
  EXPECT_THAT(lines[0], HasSubstr("len 7  \"hello 4\""));
  EXPECT_THAT(lines[2], testing::StartsWith("seq 6  "));

  const Result hex = inspect({"dump", bus, "--from", "19", "--format", "hex"});
  ASSERT_EQ(hex.status, 0) << hex.err;
  EXPECT_THAT(hex.out, HasSubstr("68 65 6c 6c 6f 20 31 39"));  // "hello 19"
  EXPECT_THAT(hex.out, HasSubstr("|hello 19|"));

  const json j = inspect_json({"dump", bus, "--last", "2"});
  ASSERT_EQ(j["records"].size(), 2u) << j.dump(2);
  EXPECT_EQ(j["records"][0]["seq"], 18u);
  // The message shape shmbus-consumer --format json writes.
  EXPECT_EQ(j["records"][0]["encoding"], "utf8");
  EXPECT_EQ(j["records"][0]["payload"], "hello 18");
  EXPECT_EQ(j["records"][1]["length"], 8u);
  EXPECT_EQ(j["records"][1]["payload"], "hello 19");
  EXPECT_GT(j["records"][1]["timestamp_ns"].get<std::uint64_t>(), 0u);
  EXPECT_EQ(j["oldest"], 4u);
  EXPECT_EQ(j["head"], 20u);

  const json all = inspect_json({"dump", bus, "--count", "0"});
  EXPECT_EQ(all["records"].size(), 16u);

  const Result gone = inspect({"dump", bus, "--from", "0"});
  EXPECT_EQ(gone.status, 1);
  EXPECT_THAT(gone.err, HasSubstr("bus '" + bus + "': sequence 0 is no longer retained"));
}

TEST_F(InspectTest, RmRefusesWhileInUseUnlessForced) {
  const std::string idle = bus_name("rm-idle"), busy = bus_name("rm-busy");
  shmbus::Bus::create(idle, small_bus());
  shmbus::Bus::create(busy, small_bus());

  {
    const shmbus::Bus b = shmbus::Bus::open(busy);
    shmbus::Producer p(b);
    shmbus::ConsumerOptions co;
    co.name = "holder";
    shmbus::Consumer consumer(b, co);

    const Result refused = inspect({"rm", busy});
    EXPECT_EQ(refused.status, 1);
    EXPECT_THAT(refused.err, HasSubstr("bus '" + busy + "': not removed: in use by producer pid " +
                                       std::to_string(::getpid())));
    EXPECT_THAT(refused.err, HasSubstr("'holder'"));
    EXPECT_TRUE(shmbus::Bus::exists(busy));

    EXPECT_TRUE(p.publish(bytes("before")));
    const Result forced = inspect({"rm", busy, "--force"});
    EXPECT_EQ(forced.status, 0) << forced.err;
    EXPECT_THAT(forced.out, HasSubstr("their streams ended (reason removed)"));
    EXPECT_FALSE(shmbus::Bus::exists(busy));
    // Nobody runs on in the unlinked segment: the producer is refused, and
    // the consumer reads what was committed, then the end, reason removed.
    EXPECT_EQ(p.publish(bytes("too late")).status, shmbus::PublishStatus::closed);
    const shmbus::ReadResult first = consumer.next(std::chrono::seconds(1));
    ASSERT_EQ(first.status, shmbus::ReadStatus::message);
    const shmbus::ReadResult end = consumer.next(std::chrono::seconds(1));
    EXPECT_EQ(end.status, shmbus::ReadStatus::end_of_stream);
    EXPECT_EQ(end.end_reason, shmbus::EndReason::removed);
  }

  const Result r = inspect({"rm", idle});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("removed " + shmbus::segment_path(idle)));
  EXPECT_FALSE(shmbus::Bus::exists(idle));

  const Result missing = inspect({"rm", idle});
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.err, HasSubstr(idle));
}

// A creator as the library is one (Segment::create): it makes
// DIR/.shmbus.NAME.XXXXXX exclusively, holds an OFD write lock on its byte 0
// from its first moment and reserves the file. Once the file is made and
// locked this one either stays at work until killed (its pid is returned)
// or is killed there (SIGKILL) and reaped, leaving the file (0 is returned).
pid_t start_creator(const std::string& path, bool stay) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    if (fd < 0 || ::fcntl(fd, F_OFD_SETLK, &fl) != 0 || ::ftruncate(fd, 64 << 10) != 0 ||
        ::posix_fallocate(fd, 0, 64 << 10) != 0)
      ::_exit(3);
    if (::write(ready[1], "r", 1) != 1) ::_exit(4);
    if (!stay) ::raise(SIGKILL);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  const bool made = pid > 0 && ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (pid > 0 && (!stay || !made)) {
    if (!made) ::kill(pid, SIGKILL);
    int ws = 0;
    ::waitpid(pid, &ws, 0);
    if (!made || !WIFSIGNALED(ws)) return -1;
  }
  return stay ? pid : 0;
}

// What creators leave in the bus directory (layout.hpp: a bus is built as
// .shmbus.NAME.XXXXXX, hidden by its dot, and renamed into place once
// complete): list shows a creation under way and one killed mid-way, and
// gc and rm remove only what a dead creator left, never a file a live
// creator is building.
TEST_F(InspectTest, ListShowsCreationsKilledMidWayAndGcAndRmRemoveOnlyThose) {
  const std::string bus = bus_name("creations");
  shmbus::Bus::create(bus, small_bus());
  const std::string temp = "/dev/shm/.shmbus." + bus + ".";
  const std::string dead = temp + "DEAD01", dead_too = temp + "DEAD02", live = temp + "LIVE01";
  struct Cleanup {
    std::vector<std::string> paths;
    pid_t creator = -1;
    ~Cleanup() {
      if (creator > 0) {
        ::kill(creator, SIGKILL);
        ::waitpid(creator, nullptr, 0);
      }
      for (const std::string& p : paths) ::unlink(p.c_str());
    }
  } cleanup{{dead, dead_too, live}};
  ASSERT_EQ(start_creator(dead, false), 0);
  cleanup.creator = start_creator(live, true);
  ASSERT_GT(cleanup.creator, 0);

  const auto creations = [&] {
    std::map<std::string, json> out;
    const json j = inspect_json({"list"});
    for (const json& c : j["creations"]) {
      if (c["name"] == bus) out[c["path"]] = c;
    }
    return out;
  };
  auto found = creations();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[dead]["creator"], "dead");
  EXPECT_EQ(found[dead]["abandoned"], true);
  EXPECT_EQ(found[dead]["file_size"], 64u << 10);
  EXPECT_EQ(found[live]["creator"], "alive");
  EXPECT_EQ(found[live]["abandoned"], false);
  const Result text = inspect({"list"});
  ASSERT_EQ(text.status, 0) << text.err;
  std::map<std::string, std::string> rows;
  for (const std::string& line : lines_of(text.out)) rows[line.substr(0, line.find(' '))] = line;
  ASSERT_TRUE(rows.count(bus)) << text.out;  // the bus itself, as ever
  EXPECT_THAT(rows[".shmbus." + bus + ".DEAD01"],
              HasSubstr("left by a creation of '" + bus + "' killed mid-way (`shmbus-inspect gc " + bus));
  EXPECT_THAT(rows[".shmbus." + bus + ".DEAD01"], HasSubstr("64.0 KiB"));
  EXPECT_THAT(rows[".shmbus." + bus + ".LIVE01"], HasSubstr("bus '" + bus + "' being created"));

  const Result gc = inspect({"gc", bus});
  ASSERT_EQ(gc.status, 0) << gc.err;
  EXPECT_THAT(gc.out, HasSubstr("removed " + dead + " (left by a creation killed mid-way)"));
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live)) << "gc removed a file its creator is still building";
  found = creations();
  EXPECT_EQ(found.size(), 1u);
  EXPECT_TRUE(found.count(live));

  // rm takes the bus's dead leftovers with it, and leaves the live one.
  ASSERT_EQ(start_creator(dead_too, false), 0);
  const json rm = inspect_json({"rm", bus});
  EXPECT_EQ(rm["removed"], true);
  EXPECT_EQ(rm["abandoned_creations"], json::array({dead_too}));
  EXPECT_FALSE(shmbus::Bus::exists(bus));
  EXPECT_FALSE(fs::exists(dead_too));
  EXPECT_TRUE(fs::exists(live)) << "rm removed a file its creator is still building";
  const Result none = inspect({"rm", bus});
  EXPECT_EQ(none.status, 1);
  EXPECT_THAT(none.err, HasSubstr("bus '" + bus + "': no such bus"));
  EXPECT_TRUE(fs::exists(live));

  // Its creator killed, the file is a leftover: rm of the name removes it.
  ::kill(cleanup.creator, SIGKILL);
  ::waitpid(cleanup.creator, nullptr, 0);
  cleanup.creator = -1;
  EXPECT_EQ(creations()[live]["creator"], "dead");
  const Result rm_left = inspect({"rm", bus});
  EXPECT_EQ(rm_left.status, 0) << rm_left.err;
  EXPECT_THAT(rm_left.out, HasSubstr("removed " + live + " (left by a creation killed mid-way)"));
  EXPECT_FALSE(fs::exists(live));
  EXPECT_TRUE(creations().empty());
}

TEST_F(InspectTest, WatchPrintsOneLinePerIntervalWhenNotATerminal) {
  const std::string bus = bus_name("watch");
  shmbus::Bus::create(bus, small_bus());
  fill(bus, 3);
  const Result r = inspect({"watch", bus, "--interval", "50ms", "--count", "3"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr(bus + " head 3 publish 0.0/s"));
    EXPECT_THAT(line, Not(HasSubstr("\x1b")));
  }

  const Result js = inspect({"watch", bus, "--interval", "20ms", "--count", "2", "--json"});
  ASSERT_EQ(js.status, 0) << js.err;
  const auto jl = lines_of(js.out);
  ASSERT_EQ(jl.size(), 2u);
  for (const std::string& line : jl) EXPECT_EQ(json::parse(line)["head"], 3u);
}

TEST_F(InspectTest, WatchRunsUntilInterrupted) {
  const std::string bus = bus_name("watch-int");
  shmbus::Bus::create(bus, small_bus());
  const std::string out = tmp("watch.out");
  const pid_t pid =
      spawn({SHMBUS_INSPECT_BIN, "watch", bus, "--interval", "20ms"}, out, tmp("watch.err"));
  ASSERT_TRUE(eventually([&] { return lines_of(slurp(out)).size() >= 2; }));
  ::kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid, 10s), 0);
}

TEST_F(InspectTest, ErrorsAreOneLineNamingTheBus) {
  const std::string missing = prefix() + "no-such-bus";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", missing}, {"dump", missing}, {"check", missing},
        {"gc", missing}, {"watch", missing, "--count", "1"}, {"rm", missing}}) {
    const Result r = inspect(args);
    EXPECT_EQ(r.status, 1) << args[0];
    EXPECT_THAT(r.err, HasSubstr(missing)) << args[0];
    EXPECT_EQ(lines_of(r.err).size(), 1u) << args[0] << ": " << r.err;
    EXPECT_EQ(r.out, "") << args[0];
  }
  const Result bad_name = inspect({"show", "../etc"});
  EXPECT_EQ(bad_name.status, 2);  // a bad name is a bad command line
  EXPECT_EQ(lines_of(bad_name.err).size(), 1u) << bad_name.err;

  const Result usage = inspect({"dump", "x", "--format", "yaml"});
  EXPECT_EQ(usage.status, 2);
  const Result no_command = inspect({});
  EXPECT_EQ(no_command.status, 2);
}

}  // namespace
