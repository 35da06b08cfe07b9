// shmbus-consumer --verify: checks the synthetic messages of shmbus-producer
// --count (tools/common/synthetic.hpp) as they arrive: sequence order (a
// message taking `records` sequence numbers, the next one follows at seq +
// records), every gap covered by a loss the library reported, payload
// sequence, checksum and filler. Each problem is one line on stderr (the first ten of them).
#pragma once

#include <fmt/format.h>
#include <shmbus/shmbus.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "tools/common/synthetic.hpp"

namespace shmbus::consumer {

class Verifier {
 public:
  explicit Verifier(std::string bus) : bus_(std::move(bus)) {}

  // The reader starts at `cursor`, `resume_gap` messages after where a
  // resumed reader stopped (those count as reported lost). `capacity`: the
  // ring's records, to tell the padding before a span at the start of a lap
  // (which loses nothing) from a gap.
  void start(std::uint64_t cursor, std::uint64_t resume_gap, std::uint64_t capacity);
  // One message and what synthetic_check() found in it.
  void on_message(const Message& m, tools::SyntheticCheck check, const tools::SyntheticFields& f);
  // After each poll: the losses it reported (told before its first message,
  // shmbus/placement.hpp) must be exactly the jump before that message;
  // without a loss a jump is the padding before a span, or a problem.
  void after_poll(const PollResult& r);
  // At the end: `lost` in total, `messages` of `count` (0: no limit) read,
  // stopped by `stopped_by`.
  void finish(std::uint64_t lost, std::uint64_t messages, std::uint64_t count, std::string_view stopped_by);

  // "shmbus-consumer: bus 'NAME': verify: what" on stderr.
  template <class... Args>
  void problem(fmt::format_string<Args...> f, Args&&... args) {
    report(fmt::format(f, std::forward<Args>(args)...));
  }

  bool ok() const noexcept { return problems_ == 0; }
  std::uint64_t problems() const noexcept { return problems_; }
  std::uint64_t gaps() const noexcept { return gaps_; }
  std::uint64_t reported_lost() const noexcept { return reported_lost_; }

 private:
  void report(const std::string& what);
  // `n` sequences before `to` neither delivered, padding nor told lost.
  void unexplained(std::uint64_t from, std::uint64_t to, std::uint64_t n);

  // The jump before the first message of a poll.
  struct Jump {
    std::uint64_t from = 0;  // where the stream was
    std::uint64_t seq = 0;   // the message's sequence
    std::uint32_t records = 1;
  };

  std::string bus_;
  std::optional<std::uint64_t> expected_;  // next bus sequence
  std::uint64_t capacity_ = 0;
  std::uint64_t gaps_ = 0;                 // messages skipped by sequence
  std::uint64_t reported_lost_ = 0;        // what the library reported as lost
  std::uint64_t problems_ = 0;
  std::uint64_t told_ = 0;           // reported lost since the last message
  std::optional<Jump> first_;        // the poll's first message, once it came
  bool first_in_poll_ = true;
};

}  // namespace shmbus::consumer
