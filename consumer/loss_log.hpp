// shmbus-consumer — each loss told as the reader learns of it: one line on
// stderr (one JSON object with --json) naming the sequences lost, at most
// one a second. Losses met within that second are told together, with the
// next line or at the end, before the summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace shmbus::consumer {

class LossLog {
 public:
  using Clock = std::chrono::steady_clock;

  LossLog(std::string bus, bool json, std::chrono::nanoseconds every = std::chrono::seconds(1))
      : bus_(std::move(bus)), json_(json), every_(every) {}

  // `count` sequences lost, the last of them just before `end` (the next
  // message's sequence, or the cursor); `total`: lost in all so far.
  void lost(std::uint64_t end, std::uint64_t count, std::uint64_t total, Clock::time_point now = Clock::now());
  // Tells what is held back once its second has passed (reads the clock
  // only when something is held back).
  void tick();
  // Tells what is held back now.
  void flush();

  std::uint64_t lines() const noexcept { return lines_; }

 private:
  void print(Clock::time_point now);

  std::string bus_;
  bool json_;
  std::chrono::nanoseconds every_;
  // Held back: `held_` sequences in `events_` losses from first_ to last_.
  std::uint64_t first_ = 0, last_ = 0, held_ = 0, events_ = 0, total_ = 0;
  std::uint64_t lines_ = 0;
  Clock::time_point last_line_{};
  bool printed_ = false;
};

}  // namespace shmbus::consumer
