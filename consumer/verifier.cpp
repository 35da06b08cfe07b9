#include "consumer/verifier.hpp"

#include <algorithm>
#include <utility>

#include <shmbus/placement.hpp>

#include "consumer/options.hpp"
#include "tools/common/program.hpp"

namespace shmbus::consumer {

namespace {
constexpr std::uint64_t kMaxProblemLines = 10;
}

using tools::plural;
using tools::SyntheticCheck;

void Verifier::start(std::uint64_t cursor, std::uint64_t resume_gap, std::uint64_t capacity) {
  capacity_ = capacity;
  // Losses can come before the first message: count gaps from where the cursor started.
  expected_ = cursor;
  gaps_ = reported_lost_ = resume_gap;
}

void Verifier::on_message(const Message& m, SyntheticCheck check, const tools::SyntheticFields& f) {
  if (expected_) {
    const std::uint64_t want = *expected_;
    if (m.seq < want) {
      problem("duplicate or out of order: seq {} after seq {}", m.seq, want - 1);
    } else if (first_in_poll_) {
      first_ = Jump{want, m.seq, m.records};  // judged with the poll's losses (after_poll)
    } else if (m.seq > want && !is_padding(want, m.seq, m.records, capacity_)) {
      // A loss is told before the first message of a poll: a jump after it
      // can only be padding (shmbus/placement.hpp).
      unexplained(want, m.seq, m.seq - want);
    }
  }
  first_in_poll_ = false;
  // A message that spans records takes that many sequence numbers.
  expected_ = m.seq + std::max<std::uint32_t>(m.records, 1);
  switch (check) {
    case SyntheticCheck::ok:
      if (f.seq != m.seq) problem("message seq {} carries the payload of seq {}", m.seq, f.seq);
      break;
    case SyntheticCheck::too_short:
      problem("message seq {} is {} bytes, shorter than a synthetic message's {}-byte "
              "fixed part (not from shmbus-producer --count?)",
              m.seq, m.payload.size(), tools::synthetic_header_size);
      break;
    case SyntheticCheck::bad_checksum:
      problem("message seq {} ({} bytes) is corrupt: checksum {:016x}, its seq, send time and length "
              "give {:016x}",
              m.seq, m.payload.size(), f.checksum, tools::synthetic_checksum(m.payload));
      break;
    case SyntheticCheck::bad_filler:
      problem("message seq {} ({} bytes) is corrupt: byte {} differs from the filler of seq {}", m.seq,
              m.payload.size(), f.bad_offset, f.seq);
      break;
  }
}

void Verifier::unexplained(std::uint64_t from, std::uint64_t to, std::uint64_t n) {
  gaps_ += n;
  reported_lost_ += n;  // report each unexplained gap once
  problem("{} missing from seq {} to seq {} that the library did not report as lost", plural(n, "sequence"),
          from, to);
}

void Verifier::after_poll(const PollResult& r) {
  reported_lost_ += r.lost;
  told_ += r.lost;
  if (r.corrupt > 0) {
    problem("the library skipped {} before seq {}", plural(r.corrupt, "corrupt record"), expected_.value_or(0));
  }
  if (first_) {
    // Everything told lost since the last message lies between it and the
    // first message of this poll: the whole jump, or (nothing told) the
    // padding before a span, or nothing.
    const Jump j = *first_;
    const std::uint64_t jump = j.seq - j.from;
    if (told_ == jump) {
      gaps_ += jump;
    } else if (told_ == 0 && is_padding(j.from, j.seq, j.records, capacity_)) {
      // padding: no gap
    } else if (told_ < jump) {
      gaps_ += told_;
      unexplained(j.from, j.seq, jump - told_);
    } else {
      gaps_ += jump;
      problem("{} reported lost before seq {}, but only {} missing from seq {}", plural(told_, "sequence"), j.seq,
              jump, j.from);
    }
    told_ = 0;
    first_.reset();
  }
  // A loss with no message after it yet (the cursor moved past it) waits in
  // told_ for the next message, or for the end.
  first_in_poll_ = true;
}

void Verifier::finish(std::uint64_t lost, std::uint64_t messages, std::uint64_t count,
                      std::string_view stopped_by) {
  gaps_ += std::exchange(told_, 0);  // lost after the last message: nothing to weigh them against
  if (lost > gaps_) problem("the library reported {} lost but the sequence skipped only {}", lost, gaps_);
  if (count > 0 && messages < count && stopped_by != "signal") {
    problem("stream ended ({}) after {} of {}", stopped_by, messages, plural(count, "message"));
  }
  if (messages == 0 && stopped_by != "signal") problem("no messages to verify");
}

void Verifier::report(const std::string& what) {
  if (++problems_ <= kMaxProblemLines) {
    tools::print_notice(program_name, fmt::format("bus '{}': verify: {}", bus_, what));
  } else if (problems_ == kMaxProblemLines + 1) {
    tools::print_notice(program_name, fmt::format("bus '{}': verify: more problems, not shown", bus_));
  }
}

}  // namespace shmbus::consumer
