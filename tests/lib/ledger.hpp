// A reader's books: every sequence number from where it started is either
// in a message it was handed, padding before a message that spans records
// (shmbus/placement.hpp), or in a loss it was told of before the message
// that follows it. Fed in the order the reader learns things; says what is
// wrong, or nothing.
#pragma once

#include <cstdint>
#include <string>

#include <shmbus/placement.hpp>

namespace shmbus::test {

class Ledger {
 public:
  Ledger() = default;
  Ledger(std::uint64_t start, std::uint64_t capacity) : first_(start), want_(start), capacity_(capacity) {}

  void lost(std::uint64_t n) {
    pending_ += n;
    told_ += n;
  }

  // A message at `seq` taking `records` sequence numbers.
  void message(std::uint64_t seq, std::uint64_t records) {
    ++messages_;
    if (!error_.empty()) return;
    if (seq < want_) {
      fail("message at seq " + std::to_string(seq) + " before the expected " + std::to_string(want_));
    } else if (pending_ > 0 && seq - want_ != pending_) {
      fail("told of " + std::to_string(pending_) + " lost before seq " + std::to_string(seq) + ", but " +
           std::to_string(seq - want_) + " sequences from " + std::to_string(want_) + " are missing");
    } else if (pending_ == 0 && seq != want_ && !is_padding(want_, seq, records, capacity_)) {
      fail(std::to_string(seq - want_) + " sequences missing from " + std::to_string(want_) + " to seq " +
           std::to_string(seq) + " (" + std::to_string(records) + " records) and not told of");
    }
    covered_ += records;
    want_ = seq + records;
    pending_ = 0;
  }

  // The reader's cursor once it has read everything: nothing past the
  // last message unaccounted for.
  void finish(std::uint64_t cursor) {
    if (!error_.empty()) return;
    if (want_ + pending_ > cursor)
      fail("told of " + std::to_string(pending_) + " lost after seq " + std::to_string(want_) +
           ", beyond the cursor " + std::to_string(cursor));
    else if (want_ + pending_ != cursor && !(pending_ == 0 && cursor > want_ && (cursor & (capacity_ - 1)) == 0))
      fail(std::to_string(cursor - want_ - pending_) + " sequences before the cursor " + std::to_string(cursor) +
           " neither delivered nor told lost");
  }

  const std::string& error() const { return error_; }
  std::uint64_t told() const { return told_; }
  std::uint64_t messages() const { return messages_; }
  std::uint64_t next() const { return want_; }
  std::uint64_t first() const { return first_; }

 private:
  void fail(std::string what) { error_ = std::move(what); }
  std::uint64_t first_ = 0;
  std::uint64_t want_ = 0;
  std::uint64_t capacity_ = 0;
  std::uint64_t pending_ = 0;
  std::uint64_t told_ = 0;
  std::uint64_t covered_ = 0;
  std::uint64_t messages_ = 0;
  std::string error_;
};

}  // namespace shmbus::test
