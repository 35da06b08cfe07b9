#include "synthetic.hpp"

#include <bit>
#include <cstring>

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

// The checksum runs four FNV-1a lanes over the filler words (word i feeds
// lane i % 4), so its multiplies overlap instead of forming one chain. The
// lanes live in registers: the loops below take four words per step.
struct Lanes {
  std::uint64_t h0, h1, h2, h3;
  explicit Lanes(std::size_t size) noexcept
      : h0(step(kFnvOffset, size)), h1(step(kFnvOffset ^ 1, size)), h2(step(kFnvOffset ^ 2, size)),
        h3(step(kFnvOffset ^ 3, size)) {}
  // Word i (of the remaining 0..3 after the four-word steps).
  void add(std::size_t i, std::uint64_t w) noexcept {
    switch (i & 3) {
      case 0: h0 = step(h0, w); break;
      case 1: h1 = step(h1, w); break;
      case 2: h2 = step(h2, w); break;
      default: h3 = step(h3, w); break;
    }
  }
  std::uint64_t fold() const noexcept { return h0 ^ std::rotl(h1, 16) ^ std::rotl(h2, 32) ^ std::rotl(h3, 48); }
};

std::uint64_t filler_state(std::span<const std::byte> in) noexcept {
  Lanes l(in.size());
  const std::byte* p = in.data() + synthetic_filler_offset;
  std::size_t left = in.size() - synthetic_filler_offset;
  for (; left >= 32; p += 32, left -= 32) {
    l.h0 = step(l.h0, load_u64(p));
    l.h1 = step(l.h1, load_u64(p + 8));
    l.h2 = step(l.h2, load_u64(p + 16));
    l.h3 = step(l.h3, load_u64(p + 24));
  }
  std::size_t i = 0;
  for (; left >= 8; p += 8, left -= 8, ++i) l.add(i, load_u64(p));
  if (left > 0) {
    std::uint64_t tail = 0;
    std::memcpy(&tail, p, left);
    l.add(i, tail);
  }
  return l.fold();
}

// Filler word i of message `seq`: a mixed seed plus i steps of the golden
// ratio (one add per word; distinct for every seq since fmix64 is a bijection).
std::uint64_t filler_seed(std::uint64_t seq) noexcept { return fmix64(seq * kGolden + 1); }

std::uint64_t finish(std::uint64_t state, std::uint64_t seq, std::uint64_t send_ns) noexcept {
  return fmix64(step(step(state, seq), send_ns));
}

}  // namespace

std::uint64_t synthetic_fill(std::span<std::byte> out, std::uint64_t seq) noexcept {
  Lanes l(out.size());
  std::uint64_t w = filler_seed(seq);
  std::byte* p = out.data() + synthetic_filler_offset;
  std::size_t left = out.size() - synthetic_filler_offset;
  for (; left >= 32; p += 32, left -= 32, w += 4 * kGolden) {
    const std::uint64_t w1 = w + kGolden, w2 = w + 2 * kGolden, w3 = w + 3 * kGolden;
    store_u64(p, w);
    store_u64(p + 8, w1);
    store_u64(p + 16, w2);
    store_u64(p + 24, w3);
    l.h0 = step(l.h0, w);
    l.h1 = step(l.h1, w1);
    l.h2 = step(l.h2, w2);
    l.h3 = step(l.h3, w3);
  }
  std::size_t i = 0;
  for (; left >= 8; p += 8, left -= 8, ++i, w += kGolden) {
    store_u64(p, w);
    l.add(i, w);
  }
  if (left > 0) {
    std::memcpy(p, &w, left);
    std::uint64_t tail = 0;
    std::memcpy(&tail, p, left);
    l.add(i, tail);
  }
  return l.fold();
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
