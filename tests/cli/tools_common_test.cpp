// The helpers shared by the shmbus programs: synthetic messages, durations,
// latency histogram, option checks and choices, escapes, /proc/PID/stat, the
// one failure report (run_main), a bus created for a run that can fail.
#include <unistd.h>

#include <gtest/gtest.h>
#include <shmbus/shmbus.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/common/choice.hpp"
#include "tools/common/created_bus.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/latency_histogram.hpp"
#include "tools/common/message_format.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/sizing.hpp"
#include "tools/common/synthetic.hpp"

using namespace shmbus::tools;
using namespace std::chrono_literals;

TEST(Synthetic, WrittenMessageChecksOutWithItsFields) {
  for (std::size_t size : {24u, 25u, 31u, 32u, 64u, 128u, 1000u}) {
    std::vector<std::byte> buf(size);
    synthetic_write(buf, 42, 123456789);
    SyntheticFields f;
    ASSERT_EQ(synthetic_check(buf, f), SyntheticCheck::ok) << size;
    EXPECT_EQ(f.seq, 42u);
    EXPECT_EQ(f.send_ns, 123456789u);
  }
}

TEST(Synthetic, EveryFlippedBitIsCaught) {
  std::vector<std::byte> buf(61);
  synthetic_write(buf, 7, 99);
  SyntheticFields f;
  for (std::size_t i = 0; i < buf.size() * 8; ++i) {
    buf[i / 8] ^= std::byte(1u << (i % 8));
    const SyntheticCheck c = synthetic_check(buf, f);
    if (i / 8 < synthetic_header_size) {
      EXPECT_EQ(c, SyntheticCheck::bad_checksum) << "bit " << i;
    } else {
      EXPECT_EQ(c, SyntheticCheck::bad_filler) << "bit " << i;
      EXPECT_EQ(f.bad_offset, i / 8) << "bit " << i;
    }
    buf[i / 8] ^= std::byte(1u << (i % 8));
  }
  EXPECT_EQ(synthetic_check(buf, f), SyntheticCheck::ok);
}

TEST(Synthetic, TruncatedOrShortMessagesAreCaught) {
  std::vector<std::byte> buf(64);
  synthetic_write(buf, 1, 2);
  SyntheticFields f;
  EXPECT_EQ(synthetic_check(std::span(buf).first(63), f), SyntheticCheck::bad_checksum);
  EXPECT_EQ(synthetic_check(std::span(buf).first(23), f), SyntheticCheck::too_short);
}

TEST(Synthetic, FillerDependsOnTheSequence) {
  std::vector<std::byte> a(64), b(64);
  synthetic_write(a, 1, 5);
  synthetic_write(b, 2, 5);
  EXPECT_FALSE(std::equal(a.begin() + 24, a.end(), b.begin() + 24));
  // A message moved to another sequence number does not check out.
  std::copy(a.begin() + 24, a.end(), b.begin() + 24);
  SyntheticFields f;
  EXPECT_EQ(synthetic_check(b, f), SyntheticCheck::bad_filler);
  EXPECT_EQ(f.bad_offset, synthetic_filler_offset);
}

// The format is what other languages implement (python/tests/synthetic.py):
// fixed bytes for one message pin it down.
TEST(Synthetic, FormatIsStable) {
  std::vector<std::byte> buf(37);
  synthetic_write(buf, 5, 1000);
  SyntheticFields f;
  ASSERT_EQ(synthetic_check(buf, f), SyntheticCheck::ok);
  EXPECT_EQ(f.checksum, 0x13ff1ee762ca0f29u);
  std::uint64_t first_word = 0;
  std::memcpy(&first_word, buf.data() + synthetic_filler_offset, 8);
  EXPECT_EQ(first_word, 0x8f9cc2f91f84b8a4u);
}

TEST(Synthetic, SizeProblemNamesTheLimit) {
  EXPECT_EQ(synthetic_size_problem({24, 24}, 8, 64), "");
  EXPECT_EQ(synthetic_size_problem({41, 232}, 8, 64), "");  // past one record: spans
  EXPECT_EQ(synthetic_size_problem({0, 0}, 64, 64),
            "--size 0 is below the synthetic message's fixed part of 24 bytes (sequence, "
            "timestamp, checksum)");
  EXPECT_EQ(synthetic_size_problem({16, 5000}, 65536, 64),
            "--size 16 is below the synthetic message's fixed part of 24 bytes (sequence, "
            "timestamp, checksum)");
  EXPECT_EQ(synthetic_size_problem({24, 233}, 8, 64),
            "--size 233 is longer than the bus's max message of 232 bytes (capacity 8, record size 64: "
            "a message takes at most half the ring)");
}

TEST(Synthetic, MaxMessageIsTheBusLimit) {
  EXPECT_EQ(max_message_for(8, 64), 232u);
  EXPECT_EQ(max_message_for(2, 64), 40u);
  EXPECT_EQ(max_message_for(65536, 256), 32768u * 256 - 24);
  EXPECT_EQ(max_message_for(shmbus::max_capacity, shmbus::max_record_size), 1u << 30);
  // The same figure a real bus reports.
  const std::string name = "tools_common_test_max_message_" + std::to_string(::getpid());
  shmbus::BusOptions bo;
  bo.capacity = 1024;
  bo.record_size = 128;
  const shmbus::Bus bus = shmbus::Bus::create(name, bo);
  EXPECT_EQ(bus.info().max_message, max_message_for(1024, 128));
  shmbus::Bus::remove(name);
}

// A bus sized by capacity_for() takes exactly the message asked for, and
// the next smaller one would not: the rule the sizing options promise.
TEST(Sizing, TheRingCapacityForTakesTheMessageAndHalfOfItDoesNot) {
  for (const std::uint32_t rs : {64u, 128u, 256u, 4160u}) {
    for (const std::uint64_t m : {1ull, 40ull, 41ull, 1000ull, (1ull << 20) - 24, 1ull << 20, 3'000'001ull}) {
      const std::uint64_t c = shmbus::capacity_for(m, rs);
      ASSERT_NE(c, 0u) << m << " in " << rs;
      EXPECT_GE(max_message_for(c, rs), m) << m << " in " << rs;
      if (c > 2) {
        EXPECT_LT(max_message_for(c / 2, rs), m) << m << " in " << rs;
      }
    }
  }
  // The boundary the old rule of thumb ("twice the largest message") missed:
  // 16,384 x 128 B is 2 MiB, but takes 1 MiB less 24 bytes.
  EXPECT_EQ(shmbus::capacity_for(1u << 20, 128), 32768u);
  const std::string name = "tools_common_test_capacity_for_" + std::to_string(::getpid());
  shmbus::BusOptions bo;
  bo.capacity = shmbus::capacity_for(1u << 20, 128);
  bo.record_size = 128;
  const shmbus::Bus bus = shmbus::Bus::create(name, bo);
  EXPECT_GE(bus.info().max_message, 1u << 20);
  shmbus::Producer p(bus);
  std::vector<std::byte> big(1u << 20, std::byte{7});
  EXPECT_EQ(p.publish(big).status, shmbus::PublishStatus::ok);
  shmbus::Bus::remove(name);
}

TEST(Sizing, BytesAndRetentionParse) {
  EXPECT_EQ(parse_bytes("100", "--x"), 100u);
  EXPECT_EQ(parse_bytes("100B", "--x"), 100u);
  EXPECT_EQ(parse_bytes("64KiB", "--x"), 65536u);
  EXPECT_EQ(parse_bytes("64K", "--x"), 65536u);
  EXPECT_EQ(parse_bytes("1MiB", "--x"), 1u << 20);
  EXPECT_EQ(parse_bytes("1.5MiB", "--x"), 3u << 19);
  EXPECT_EQ(parse_bytes("2GiB", "--x"), 2ull << 30);
  EXPECT_EQ(parse_bytes("1MB", "--x"), 1'000'000u);
  EXPECT_EQ(parse_bytes("1kB", "--x"), 1000u);
  for (const char* bad : {"", "MiB", "-1", "1 XB", "1MiBs", "nan"}) {
    EXPECT_THROW(parse_bytes(bad, "--x"), std::invalid_argument) << bad;
  }
  EXPECT_EQ(parse_retention("1000"), 1000u);
  EXPECT_EQ(parse_retention("2s@50000/s"), 100'000u);
  EXPECT_EQ(parse_retention("500ms@1e6"), 500'000u);
  for (const char* bad : {"", "x", "2s@", "@5", "forever@5", "2s@-1", "2s@5/m"}) {
    EXPECT_THROW(parse_retention(bad), std::invalid_argument) << bad;
  }
}

TEST(Sizing, SizeBusTakesTheLargestAndRetainsTheRest) {
  SizingAsk ask;
  ask.max_message = 4u << 20;
  ask.message = 100;
  Sizing s = size_bus(ask);
  EXPECT_EQ(s.record_size, 128u);
  EXPECT_GE(s.max_message, 4u << 20);
  EXPECT_LT(max_message_for(s.capacity / 2, s.record_size), 4u << 20);
  EXPECT_EQ(s.decided_by, "max message");
  ask.retain = 1'000'000;
  s = size_bus(ask);
  EXPECT_EQ(s.capacity, 1u << 20);
  EXPECT_GE(s.retains, 1'000'000u);
  EXPECT_EQ(s.decided_by, "retain");
  // A usual message that spans: retention counts its records.
  ask = {};
  ask.message = 1000;
  ask.record_size = 256;
  ask.retain = 100;
  s = size_bus(ask);
  EXPECT_EQ(s.capacity, 512u);  // 100 x 4 records
  EXPECT_EQ(s.retains, 128u);
  ask = {};
  ask.max_message = (1ull << 30) + 1;
  EXPECT_THROW(size_bus(ask), std::invalid_argument);
}

TEST(Synthetic, SizeRangeParsesAndMixes) {
  EXPECT_EQ(parse_size_range("64").min, 64u);
  EXPECT_FALSE(parse_size_range("64").mixed());
  const SizeRange r = parse_size_range("16..5000");
  EXPECT_EQ(r.min, 16u);
  EXPECT_EQ(r.max, 5000u);
  EXPECT_EQ(to_string(r), "16..5000");
  EXPECT_THROW(parse_size_range("5000..16"), std::invalid_argument);
  EXPECT_THROW(parse_size_range("12.."), std::invalid_argument);
  EXPECT_THROW(parse_size_range("x"), std::invalid_argument);
  EXPECT_THROW(parse_size_range("-5"), std::invalid_argument);
  // Every size within the range, both ends reached, the same each time.
  SizeSequence a({24, 40}), b({24, 40});
  std::set<std::size_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t n = a.next();
    ASSERT_GE(n, 24u);
    ASSERT_LE(n, 40u);
    ASSERT_EQ(n, b.next());
    seen.insert(n);
  }
  EXPECT_EQ(seen.size(), 17u);
  SizeSequence one({64, 64});
  EXPECT_EQ(one.next(), 64u);
  EXPECT_EQ(one.next(), 64u);
}

TEST(Duration, ParsesUnits) {
  EXPECT_EQ(parse_duration("250ns"), 250ns);
  EXPECT_EQ(parse_duration("100us"), 100us);
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("2s"), 2s);
  EXPECT_EQ(parse_duration("2"), 2s);
  EXPECT_EQ(parse_duration("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration("1m"), 60s);
  EXPECT_EQ(parse_duration("1h"), 3600s);
  EXPECT_EQ(parse_duration("forever"), std::chrono::nanoseconds::max());
}

TEST(Duration, RejectsNonsense) {
  for (const char* bad : {"", "ms", "5parsecs", "-1s", "1e400s", "nan", "s5"}) {
    EXPECT_THROW(parse_duration(bad), std::invalid_argument) << bad;
  }
}

TEST(Duration, ABareNumberCountsInTheOptionsUnit) {
  EXPECT_EQ(parse_duration("200", 1ms), 200ms);
  EXPECT_EQ(parse_duration("2s", 1ms), 2s);
  EXPECT_EQ(parse_duration("1h", 1ms), 3600s);
  EXPECT_EQ(parse_duration_ms("1.5s"), 1500ms);
  EXPECT_EQ(parse_duration_ms("forever"), std::chrono::milliseconds::max());
}

TEST(Duration, ValidatorKeepsToItsRange) {
  const CLI::Validator v = duration_validator(1ms, 100ms, 10min);
  std::string in = "100", low = "99", high = "11m", word = "forever";
  EXPECT_EQ(v(in), "");
  EXPECT_EQ(v(low), "'99' is not from 100 ms to 600 s");
  EXPECT_EQ(v(high), "'11m' is not from 100 ms to 600 s");
  EXPECT_EQ(v(word), "'forever' is not from 100 ms to 600 s");
}

TEST(Duration, Formats) {
  EXPECT_EQ(format_duration(300ms), "300 ms");
  EXPECT_EQ(format_duration(2s), "2 s");
  EXPECT_EQ(format_duration(std::chrono::nanoseconds::max()), "forever");
}

// What CLI11 makes of `command_line` with refuse_negative_numbers: the
// parse error, or "ok u64 u32 opt i64 sub" with the values read.
std::string parse_numbers(const std::string& command_line) {
  CLI::App app;
  std::uint64_t u64 = 0;
  std::uint32_t u32 = 0;
  std::optional<std::uint64_t> opt;
  std::int64_t i64 = 0;
  std::size_t sub_n = 0;
  app.add_option("--u64", u64);
  std::uint32_t ranged = 0;
  app.add_option("--u32", u32);
  app.add_option("--ranged", ranged)->check(CLI::Range(0u, 1000u));
  app.add_option("--opt", opt);
  app.add_option("--i64", i64);
  app.add_subcommand("sub")->add_option("--n", sub_n);
  refuse_negative_numbers(app);
  try {
    app.parse(command_line, false);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "ok " + std::to_string(u64) + " " + std::to_string(u32) + " " +
         (opt ? std::to_string(*opt) : "-") + " " + std::to_string(i64) + " " +
         std::to_string(sub_n);
}

TEST(RefuseNegativeNumbers, UnsignedOptionsRefuseANegativeValue) {
  EXPECT_EQ(parse_numbers("--u64 -1"), "--u64: must be 0 or more, not '-1'");
  EXPECT_EQ(parse_numbers("--u64=-1"), "--u64: must be 0 or more, not '-1'");
  EXPECT_EQ(parse_numbers("--u64=' -5'"), "--u64: must be 0 or more, not ' -5'");
  EXPECT_EQ(parse_numbers("--u64 -18446744073709551615"),
            "--u64: must be 0 or more, not '-18446744073709551615'");
  EXPECT_EQ(parse_numbers("--u32 -1"), "--u32: must be 0 or more, not '-1'");
  EXPECT_EQ(parse_numbers("--opt -1"), "--opt: must be 0 or more, not '-1'");
  EXPECT_EQ(parse_numbers("sub --n -1"), "--n: must be 0 or more, not '-1'");
}

TEST(RefuseNegativeNumbers, UnsignedOptionsRefuseAValuePastTheLargest) {
  EXPECT_EQ(parse_numbers("--u64 18446744073709551616"),
            "--u64: must be at most 18446744073709551615, not '18446744073709551616'");
  EXPECT_EQ(parse_numbers("--u64 18446744073709551615"), "ok 18446744073709551615 0 - 0 0");
}

TEST(RefuseNegativeNumbers, OtherValuesAreLeftAlone) {
  EXPECT_EQ(parse_numbers("--u64 0 --u32 7 --opt 3 --i64 -4 sub --n 2"), "ok 0 7 3 -4 2");
  EXPECT_EQ(parse_numbers(""), "ok 0 0 - 0 0");
  // An option's own checks run first, and still refuse what they refused.
  EXPECT_EQ(parse_numbers("--ranged 1001"), "--ranged: Value 1001 not in range 0 to 1000");
  EXPECT_EQ(parse_numbers("--ranged -1"), "--ranged: Value -1 not in range 0 to 1000");
}

// What message_rate() says of `rate`: empty when it accepts it.
std::string rate_problem(std::string rate) { return message_rate()(rate); }

TEST(MessageRate, RefusesWhatIsNotAPace) {
  EXPECT_EQ(rate_problem("0"), "must be a positive number, not '0'");
  EXPECT_EQ(rate_problem("-1"), "must be a positive number, not '-1'");
  EXPECT_EQ(rate_problem("inf"), "must be a positive number, not 'inf'");
  EXPECT_EQ(rate_problem("nan"), "must be a positive number, not 'nan'");
  EXPECT_EQ(rate_problem("1e400"), "must be a positive number, not '1e400'");
  EXPECT_EQ(rate_problem("5/s"), "must be a positive number, not '5/s'");
  EXPECT_EQ(rate_problem("1e-300"),
            "must be at least 0.001 (one message every 1000 s), not '1e-300'");
  EXPECT_EQ(rate_problem("0.000999"),
            "must be at least 0.001 (one message every 1000 s), not '0.000999'");
}

TEST(MessageRate, AcceptsEveryRateFromTheLowest) {
  for (const char* ok : {"0.001", "1", "1000", "2.5e6", "1e300"}) {
    EXPECT_EQ(rate_problem(ok), "") << ok;
  }
}

// A bus name of this test process; the bus is removed when it goes.
class TestBus {
 public:
  TestBus() : name_("tools-created-" + std::to_string(::getpid()) + "-" + std::to_string(next_++)) {
    shmbus::Bus::remove(name_);
  }
  ~TestBus() { shmbus::Bus::remove(name_); }
  const std::string& name() const { return name_; }
  bool exists() const { return shmbus::Bus::exists(name_); }

 private:
  static inline int next_ = 0;
  std::string name_;
};

constexpr shmbus::BusOptions kSmall{.capacity = 8, .record_size = 64, .max_readers = 2};

// Makes the bus with a guard, then throws out of the guard's scope.
void fail_after(const OpenedBus& opened, const std::function<void()>& before_throw = {}) {
  const CreatedBusGuard guard(opened, {});
  if (before_throw) before_throw();
  throw std::runtime_error("the run failed");
}

TEST(CreatedBusGuard, AFailureRemovesTheBusItCreated) {
  TestBus b;
  const OpenedBus opened = open_or_create_bus(b.name(), kSmall);
  EXPECT_TRUE(opened.created);
  EXPECT_THROW(fail_after(opened), std::runtime_error);
  EXPECT_FALSE(b.exists());
}

TEST(CreatedBusGuard, ASuccessKeepsTheBus) {
  TestBus b;
  {
    const CreatedBusGuard guard(open_or_create_bus(b.name(), kSmall), {});
  }
  EXPECT_TRUE(b.exists());
}

TEST(CreatedBusGuard, AnExistingBusIsNeverRemoved) {
  TestBus b;
  (void)shmbus::Bus::create(b.name(), kSmall);
  const OpenedBus opened = open_or_create_bus(b.name(), kSmall);
  EXPECT_FALSE(opened.created);
  EXPECT_THROW(fail_after(opened), std::runtime_error);
  EXPECT_TRUE(b.exists());
}

TEST(CreatedBusGuard, ABusWithMessagesStays) {
  TestBus b;
  const OpenedBus opened = open_or_create_bus(b.name(), kSmall);
  EXPECT_THROW(fail_after(opened,
                          [&] {
                            shmbus::Producer p(opened.bus);
                            const char m[] = "x";
                            ASSERT_TRUE(p.publish(std::as_bytes(std::span(m)), {}));
                          }),
               std::runtime_error);
  EXPECT_TRUE(b.exists());
}

TEST(CreatedBusGuard, ABusAReaderJoinedStays) {
  TestBus b;
  const OpenedBus opened = open_or_create_bus(b.name(), kSmall);
  shmbus::Consumer reader(shmbus::Bus::open(b.name()));
  EXPECT_THROW(fail_after(opened), std::runtime_error);
  EXPECT_TRUE(b.exists());
}

TEST(CreatedBusGuard, ABusMadeAgainByAnotherStays) {
  TestBus b;
  const OpenedBus opened = open_or_create_bus(b.name(), kSmall);
  EXPECT_THROW(fail_after(opened,
                          [&] {
                            shmbus::Bus::remove(b.name());
                            (void)shmbus::Bus::create(b.name(), kSmall);
                          }),
               std::runtime_error);
  EXPECT_TRUE(b.exists());
}

TEST(LatencyHistogram, PercentilesWithinOnePercent) {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 100000; ++v) h.record(v);
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_EQ(h.max(), 100000u);
  EXPECT_EQ(h.min(), 1u);
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double want = q * 100000;
    EXPECT_NEAR(static_cast<double>(h.percentile(q)), want, want * 0.01) << q;
  }
  EXPECT_EQ(h.percentile(1.0), 100000u);
}

TEST(LatencyHistogram, BucketsCoverEveryValue) {
  for (std::uint64_t v : {0ull, 1ull, 127ull, 128ull, 129ull, 1000ull, 1ull << 40, ~0ull}) {
    const std::size_t i = LatencyHistogram::index(v);
    ASSERT_LT(i, LatencyHistogram::kBuckets) << v;
    EXPECT_GE(LatencyHistogram::upper_edge(i), v) << v;
    if (i > 0) {
      EXPECT_LT(LatencyHistogram::upper_edge(i - 1), v) << v;
    }
  }
}

enum class Colour { red, green };

// What CLI11 makes of `command_line` with a --colour choice: the parse
// error, or the colour read.
std::string parse_colour(const std::string& command_line) {
  CLI::App app;
  Colour c = Colour::green;
  const Choices<Colour> names = {{"red", Colour::red}, {"green", Colour::green}};
  CLI::Option* o = add_choice(app, "--colour", c, names, "a colour");
  EXPECT_EQ(o->get_default_str(), "green");
  try {
    app.parse(command_line, false);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return choice_name(names, c);
}

TEST(Choice, TurnsTheWordIntoItsValue) {
  EXPECT_EQ(parse_colour("--colour red"), "red");
  EXPECT_EQ(parse_colour(""), "green");
  EXPECT_EQ(parse_colour("--colour blue"), "--colour: blue not in {red,green}");
}

TEST(Choice, WaitStrategiesHaveOneSpelling) {
  CLI::App app;
  shmbus::WaitStrategy w = shmbus::WaitStrategy::adaptive;
  add_choice(app, "--wait", w, wait_strategies(), "how", wait_strategy_choice());
  app.parse("--wait busy-spin", false);
  EXPECT_EQ(w, shmbus::WaitStrategy::busy_spin);
  EXPECT_THROW(app.parse("--wait busy_spin", false), CLI::ValidationError);
  std::string word = "spin_yield";
  EXPECT_EQ(wait_strategy_check()(word), "'spin_yield' is not one of adaptive, spin-yield, busy-spin");
}

TEST(Escape, AsciiOnlyWithCEscapes) {
  EXPECT_EQ(escape_ascii(std::string_view("a\"b\\c\n\t\x01\xff")), "a\\\"b\\\\c\\n\\t\\x01\\xff");
  const std::array<std::byte, 3> bytes{std::byte{0x00}, std::byte{0x1a}, std::byte{0xff}};
  EXPECT_EQ(hex_spaced(bytes), "00 1a ff");
  EXPECT_EQ(hex_spaced({}), "");
}

// What run_main() makes of `body` throwing: the exit status.
int exit_of(const std::function<int()>& body) {
  CLI::App app;
  return run_main(app, ErrorSink{"test"}, body);
}

TEST(RunMain, EachFailureHasItsExitStatus) {
  EXPECT_EQ(exit_of([] { return 0; }), exit_ok);
  EXPECT_EQ(exit_of([]() -> int { throw Failure(exit_usage, "bad", "usage"); }), exit_usage);
  EXPECT_EQ(exit_of([]() -> int { throw Failure(7, "seven"); }), 7);
  EXPECT_EQ(exit_of([]() -> int { throw std::invalid_argument("--trust-owner: no such user"); }), exit_usage);
  EXPECT_EQ(exit_of([]() -> int { throw std::runtime_error("broken"); }), exit_failure);
  EXPECT_EQ(exit_of([]() -> int { shmbus::validate_name("a/b"); return 0; }), exit_usage);
}
