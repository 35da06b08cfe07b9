#include "consumer/verifier.hpp"

#include <algorithm>

#include "consumer/options.hpp"
#include "tools/common/program.hpp"

namespace shmbus::consumer {

namespace {
constexpr std::uint64_t kMaxProblemLines = 10;
}

// Whether `m` follows `want` across the padding a producer writes before a
// span that would cross the end of the ring: the span then starts at the
// next lap's first slot, and the sequences in between hold no message.
bool Verifier::padded(std::uint64_t want, const Message& m) const noexcept {
  if (capacity_ == 0 || m.records <= 1) return false;
  const std::uint64_t lap_start = (want | (capacity_ - 1)) + 1;
  return m.seq == lap_start && want % capacity_ + m.records > capacity_;
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
    } else if (m.seq > want && !padded(want, m)) {
      gaps_ += m.seq - want;  // judged against reported losses after the batch
    }
  }
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

void Verifier::after_poll(const PollResult& r, std::uint64_t last_seq) {
  reported_lost_ += r.lost;
  if (r.corrupt > 0) {
    problem("the library skipped {} before seq {}", plural(r.corrupt, "corrupt record"), expected_.value_or(0));
  }
  if (gaps_ > reported_lost_) {
    problem("{} missing before seq {} that the library did not report as lost",
            plural(gaps_ - reported_lost_, "message"), last_seq);
    reported_lost_ = gaps_;  // report each unexplained gap once
  }
}

void Verifier::finish(std::uint64_t lost, std::uint64_t messages, std::uint64_t count,
                      std::string_view stopped_by) {
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
