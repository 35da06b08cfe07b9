#include "synthetic.hpp"

#include <cstring>

namespace shmbus::tools {
namespace {

constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += kGolden);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

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

std::uint64_t filler_state(std::span<const std::byte> in) noexcept {
  std::uint64_t h = step(kFnvOffset, in.size());
  const std::byte* p = in.data() + synthetic_filler_offset;
  std::size_t left = in.size() - synthetic_filler_offset;
  for (; left >= 8; p += 8, left -= 8) h = step(h, load_u64(p));
  if (left > 0) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, p, left);
    h = step(h, tail);
  }
  return h;
}

std::uint64_t finish(std::uint64_t state, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  return fmix64(step(step(state, seq), send_ns));
}

}  // namespace

std::uint64_t synthetic_fill(std::span<std::byte> out, std::uint64_t seq) noexcept {
  std::uint64_t h = step(kFnvOffset, out.size());
  std::uint64_t rng = seq * kGolden;
  std::byte* p = out.data() + synthetic_filler_offset;
  std::size_t left = out.size() - synthetic_filler_offset;
  for (; left >= 8; p += 8, left -= 8) {
    const std::uint64_t w = splitmix64(rng);
    store_u64(p, w);
    h = step(h, w);
  }
  if (left > 0) {
    std::uint64_t w = splitmix64(rng);
    std::memcpy(p, &w, left);
    w = 0;
    std::memcpy(&w, p, left);
    h = step(h, w);
  }
  return h;
}

void synthetic_stamp(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns,
                     std::uint64_t state) noexcept {
  store_u64(out.data() + synthetic_seq_offset, seq);
  store_u64(out.data() + synthetic_send_ns_offset, send_ns);
  store_u64(out.data() + synthetic_checksum_offset, finish(state, seq, send_ns));
}

void synthetic_write(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  synthetic_stamp(out, seq, send_ns, synthetic_fill(out, seq));
}

std::uint64_t synthetic_checksum(std::span<const std::byte> in) noexcept {
  if (in.size() < synthetic_header_size) return 0;
  return finish(filler_state(in), load_u64(in.data() + synthetic_seq_offset),
                load_u64(in.data() + synthetic_send_ns_offset));
}

SyntheticCheck synthetic_check(std::span<const std::byte> in, SyntheticFields& fields) noexcept {
  if (in.size() < synthetic_header_size) return SyntheticCheck::too_short;
  fields.seq = load_u64(in.data() + synthetic_seq_offset);
  fields.send_ns = load_u64(in.data() + synthetic_send_ns_offset);
  fields.checksum = load_u64(in.data() + synthetic_checksum_offset);
  return fields.checksum == synthetic_checksum(in) ? SyntheticCheck::ok
                                                    : SyntheticCheck::bad_checksum;
}

}  // namespace shmbus::tools
