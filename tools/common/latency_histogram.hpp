// shmbus tools — a fixed-size log-linear latency histogram.
//
// Values (nanoseconds) below 128 get a bucket each; above that every power of
// two is split into 128 linear sub-buckets, so a reported percentile is within
// 1/128 (< 0.8 %) of the true value. The storage (~60 KB) is allocated once in
// the constructor: record() never allocates, so it is safe per message.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace shmbus::tools {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 7;
  static constexpr std::uint64_t kSub = std::uint64_t{1} << kSubBits;
  static constexpr std::size_t kBuckets = kSub + (64 - kSubBits) * kSub;

  LatencyHistogram() : counts_(kBuckets, 0) {}

  void record(std::uint64_t ns) noexcept {
    ++counts_[index(ns)];
    ++total_;
    if (ns > max_) max_ = ns;
    if (ns < min_) min_ = ns;
  }

  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  std::uint64_t min() const noexcept { return total_ ? min_ : 0; }

  // The value below which a fraction `q` (0..1] of the samples fall: the
  // upper edge of the bucket holding that rank, capped at max().
  std::uint64_t percentile(double q) const noexcept {
    if (total_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total_) + 0.5);
    if (rank < 1) rank = 1;
    if (rank > total_) rank = total_;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const std::uint64_t edge = upper_edge(i);
        return edge < max_ ? edge : max_;
      }
    }
    return max_;
  }

  static constexpr std::size_t index(std::uint64_t v) noexcept {
    if (v < kSub) return static_cast<std::size_t>(v);
    const unsigned e = 63u - static_cast<unsigned>(std::countl_zero(v));  // >= kSubBits
    const std::uint64_t sub = (v >> (e - kSubBits)) & (kSub - 1);
    return static_cast<std::size_t>(kSub + (e - kSubBits) * kSub + sub);
  }

  // Largest value that lands in bucket i.
  static constexpr std::uint64_t upper_edge(std::size_t i) noexcept {
    if (i < kSub) return i;
    const std::uint64_t e = (i - kSub) / kSub + kSubBits;
    const std::uint64_t sub = (i - kSub) % kSub;
    const std::uint64_t low = (std::uint64_t{1} << e) + (sub << (e - kSubBits));
    return low + (std::uint64_t{1} << (e - kSubBits)) - 1;
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0;
  std::uint64_t max_ = 0;
  std::uint64_t min_ = ~std::uint64_t{0};
};

}  // namespace shmbus::tools
