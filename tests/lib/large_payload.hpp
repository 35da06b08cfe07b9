// Deterministic payloads for messages that span records: message i of
// `size` bytes, whose bytes differ with i and with the offset (xorshift), so
// a misplaced, shortened or torn copy never compares equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shmbus::test {

inline std::vector<std::byte> large_payload(std::size_t i, std::size_t size) {
  std::vector<std::byte> v(size);
  std::uint64_t x = 0x9E3779B97F4A7C15ULL * (i + 1);
  for (std::size_t k = 0; k < size; ++k) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[k] = static_cast<std::byte>(x);
  }
  return v;
}

}  // namespace shmbus::test
