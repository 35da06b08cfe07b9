#include "consumer/loss_log.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "consumer/options.hpp"
#include "tools/common/program.hpp"

namespace shmbus::consumer {

void LossLog::lost(std::uint64_t end, std::uint64_t count, std::uint64_t total, Clock::time_point now) {
  if (count == 0) return;
  if (held_ == 0) first_ = end >= count ? end - count : 0;  // a count from a source is not trusted
  last_ = end - 1;
  held_ += count;
  ++events_;
  total_ = total;
  if (!printed_ || now - last_line_ >= every_) print(now);
}

void LossLog::tick() {
  if (held_ == 0) return;
  const Clock::time_point now = Clock::now();
  if (now - last_line_ >= every_) print(now);
}

void LossLog::flush() {
  if (held_ != 0) print(Clock::now());
}

void LossLog::print(Clock::time_point now) {
  if (json_) {
    const nlohmann::json j = {{"program", program_name}, {"report", "lost"},   {"bus", bus_},
                              {"first_seq", first_},     {"last_seq", last_},  {"lost", held_},
                              {"losses", events_},       {"lost_in_all", total_}};
    tools::print_raw_line(j.dump());
  } else {
    const std::string what =
        events_ == 1 ? fmt::format("lost seq {}..{} ({})", first_, last_, tools::plural(held_, "sequence"))
                     : fmt::format("lost {} in {} losses between seq {} and {}", tools::plural(held_, "sequence"),
                                   events_, first_, last_);
    tools::print_notice(program_name, fmt::format("bus '{}': {}; {} lost in all", bus_, what, total_));
  }
  ++lines_;
  printed_ = true;
  last_line_ = now;
  held_ = events_ = 0;
}

}  // namespace shmbus::consumer
