#include "tools/common/synthetic.hpp"

#include <fmt/format.h>
#include <shmbus/bus.hpp>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <string_view>

namespace shmbus::tools {
namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

constexpr std::uint64_t fmix64(std::uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

constexpr std::uint64_t step(std::uint64_t h, std::uint64_t word) noexcept {
  return (h ^ word) * kFnvPrime;
}

std::uint64_t load_u64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u64(std::byte* p, std::uint64_t v) noexcept { std::memcpy(p, &v, sizeof v); }

// Filler word i of message `seq`: a mixed seed plus i steps of the golden
// ratio (one add per word; distinct for every seq since fmix64 is a bijection).
std::uint64_t filler_seed(std::uint64_t seq) noexcept { return fmix64(seq * kGolden + 1); }

std::uint64_t header_checksum(std::size_t size, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  return fmix64(step(step(step(kFnvOffset, size), seq), send_ns));
}

}  // namespace

void synthetic_fill(std::span<std::byte> out, std::uint64_t seq) noexcept {
  std::uint64_t w = filler_seed(seq);
  std::byte* p = out.data() + synthetic_filler_offset;
  std::size_t left = out.size() - synthetic_filler_offset;
  for (; left >= 32; p += 32, left -= 32, w += 4 * kGolden) {
    store_u64(p, w);
    store_u64(p + 8, w + kGolden);
    store_u64(p + 16, w + 2 * kGolden);
    store_u64(p + 24, w + 3 * kGolden);
  }
  for (; left >= 8; p += 8, left -= 8, w += kGolden) store_u64(p, w);
  if (left > 0) std::memcpy(p, &w, left);
}

void synthetic_stamp(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  store_u64(out.data() + synthetic_seq_offset, seq);
  store_u64(out.data() + synthetic_send_ns_offset, send_ns);
  store_u64(out.data() + synthetic_checksum_offset, header_checksum(out.size(), seq, send_ns));
}

void synthetic_write(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  synthetic_fill(out, seq);
  synthetic_stamp(out, seq, send_ns);
}

std::uint64_t synthetic_checksum(std::span<const std::byte> in) noexcept {
  if (in.size() < synthetic_header_size) return 0;
  return header_checksum(in.size(), load_u64(in.data() + synthetic_seq_offset),
                         load_u64(in.data() + synthetic_send_ns_offset));
}

SyntheticCheck synthetic_check(std::span<const std::byte> in, SyntheticFields& fields) noexcept {
  if (in.size() < synthetic_header_size) return SyntheticCheck::too_short;
  fields.seq = load_u64(in.data() + synthetic_seq_offset);
  fields.send_ns = load_u64(in.data() + synthetic_send_ns_offset);
  fields.checksum = load_u64(in.data() + synthetic_checksum_offset);
  if (fields.checksum != header_checksum(in.size(), fields.seq, fields.send_ns)) return SyntheticCheck::bad_checksum;
  // The filler, regenerated: differences OR-ed together, four independent
  // words per step and no branch per word; the first bad byte is looked for
  // only on failure.
  const std::uint64_t seed = filler_seed(fields.seq);
  const std::byte* p = in.data() + synthetic_filler_offset;
  const std::size_t words = (in.size() - synthetic_filler_offset) / 8;
  std::uint64_t d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  std::size_t i = 0;
  for (std::uint64_t w = seed; i + 4 <= words; i += 4, w += 4 * kGolden) {
    d0 |= load_u64(p + 8 * i) ^ w;
    d1 |= load_u64(p + 8 * i + 8) ^ (w + kGolden);
    d2 |= load_u64(p + 8 * i + 16) ^ (w + 2 * kGolden);
    d3 |= load_u64(p + 8 * i + 24) ^ (w + 3 * kGolden);
  }
  for (; i < words; ++i) d0 |= load_u64(p + 8 * i) ^ (seed + i * kGolden);
  std::uint64_t diff = d0 | d1 | d2 | d3;
  const std::size_t tail = (in.size() - synthetic_filler_offset) % 8;
  std::uint64_t last = 0, want = 0;
  if (tail > 0) {
    const std::uint64_t w = seed + words * kGolden;
    std::memcpy(&last, p + 8 * words, tail);
    std::memcpy(&want, &w, tail);
    diff |= last ^ want;
  }
  if (diff == 0) return SyntheticCheck::ok;
  for (std::size_t off = synthetic_filler_offset; off < in.size(); ++off) {
    const std::size_t k = off - synthetic_filler_offset;
    const std::uint64_t w = seed + (k / 8) * kGolden;
    std::byte bytes[8];
    std::memcpy(bytes, &w, sizeof w);  // native order, as written
    if (in[off] != bytes[k % 8]) {
      fields.bad_offset = off;
      break;
    }
  }
  return SyntheticCheck::bad_filler;
}

SizeRange parse_size_range(const std::string& text) {
  const auto number = [&](std::string_view s) {
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
      throw std::invalid_argument(
          fmt::format("--size '{}' is not a byte count N or a range MIN..MAX", text));
    }
    return v;
  };
  SizeRange r;
  const std::size_t dots = text.find("..");
  if (dots == std::string::npos) {
    r.min = r.max = number(text);
  } else {
    r.min = number(std::string_view(text).substr(0, dots));
    r.max = number(std::string_view(text).substr(dots + 2));
    if (r.min > r.max) {
      throw std::invalid_argument(fmt::format("--size {}: MIN is larger than MAX", text));
    }
  }
  return r;
}

std::string to_string(const SizeRange& sizes) {
  return sizes.mixed() ? fmt::format("{}..{}", sizes.min, sizes.max) : fmt::format("{}", sizes.min);
}

std::size_t SizeSequence::next() noexcept {
  if (!sizes_.mixed()) return sizes_.min;
  // splitmix64: cheap, and well spread over any range width.
  std::uint64_t z = (state_ += kGolden);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const std::uint64_t width = sizes_.max - sizes_.min + 1;  // max < 2^32: no overflow
  return static_cast<std::size_t>(sizes_.min + z % width);
}

std::string synthetic_size_problem(const SizeRange& sizes, std::uint64_t capacity, std::uint32_t record_size) {
  if (sizes.min < synthetic_header_size) {
    return fmt::format("--size {} is below the synthetic message's fixed part of {} bytes "
                       "(sequence, timestamp, checksum)",
                       sizes.min, synthetic_header_size);
  }
  const std::uint32_t max_message = max_message_for(capacity, record_size);
  if (sizes.max > max_message) {
    return fmt::format("--size {} is longer than the bus's max message of {} bytes (capacity {}, "
                       "record size {}: a message takes at most half the ring)",
                       sizes.max, max_message, capacity, record_size);
  }
  return {};
}

}  // namespace shmbus::tools
