// The deterministic message contents shared by the test peer and the tests:
// every payload is a pure function of its sequence number, so any process can
// check any message byte for byte without talking to the producer.
//
//   0        8                      len-8    len
//   +--------+----------------------+--------+
//   | seq    | pattern(seq, i) ...  | fnv64  |   16 <= len <= max_payload
//   +--------+----------------------+--------+
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace shmbus::test {

inline std::uint64_t fnv1a(const std::byte* p, std::size_t n, std::uint64_t h = 0xcbf29ce484222325ULL) {
  for (std::size_t i = 0; i < n; ++i) {
    h ^= static_cast<std::uint8_t>(p[i]);
    h *= 0x100000001b3ULL;
  }
  return h;
}

inline std::size_t payload_length(std::uint64_t seq, std::size_t max_payload) {
  const std::size_t span = max_payload - 16 + 1;
  return 16 + static_cast<std::size_t>((seq * 2654435761u) % span);
}

// Records a message of `len` bytes takes in records of `record_size` bytes
// (layout.hpp, records_for: a 24-byte header, then the payload runs on).
inline std::uint64_t records_of(std::size_t len, std::uint32_t record_size) {
  return len + 24 <= record_size ? 1 : (len + 24 + record_size - 1) / record_size;
}

// Writes the payload of `seq` into `out` (at least payload_length bytes).
inline std::size_t make_payload_of_length(std::uint64_t seq, std::size_t len, std::byte* out) {
  std::memcpy(out, &seq, 8);
  for (std::size_t i = 8; i < len - 8; ++i) out[i] = static_cast<std::byte>((seq * 131 + i * 7) & 0xff);
  const std::uint64_t sum = fnv1a(out, len - 8);
  std::memcpy(out + len - 8, &sum, 8);
  return len;
}

inline std::size_t make_payload(std::uint64_t seq, std::size_t max_payload, std::byte* out) {
  return make_payload_of_length(seq, payload_length(seq, max_payload), out);
}

// True if `p` is exactly the payload of `seq`, `len` bytes long.
inline bool check_payload_of_length(std::uint64_t seq, std::size_t len, std::span<const std::byte> p) {
  if (p.size() != len || len < 16) return false;
  std::uint64_t s = 0, sum = 0;
  std::memcpy(&s, p.data(), 8);
  std::memcpy(&sum, p.data() + p.size() - 8, 8);
  if (s != seq || sum != fnv1a(p.data(), p.size() - 8)) return false;
  for (std::size_t i = 8; i < p.size() - 8; ++i)
    if (p[i] != static_cast<std::byte>((seq * 131 + i * 7) & 0xff)) return false;
  return true;
}

// True if `p` is exactly the payload of `seq`.
inline bool check_payload(std::uint64_t seq, std::size_t max_payload, std::span<const std::byte> p) {
  return check_payload_of_length(seq, payload_length(seq, max_payload), p);
}

// Running hash of a delivered stream: folds each (seq, checksum) in order.
struct StreamHash {
  std::uint64_t value = 0x84222325cbf29ce4ULL;
  void add(std::uint64_t seq, std::span<const std::byte> p) {
    std::uint64_t sum = 0;
    if (p.size() >= 8) std::memcpy(&sum, p.data() + p.size() - 8, 8);
    value = (value ^ seq) * 0x100000001b3ULL;
    value = (value ^ sum) * 0x100000001b3ULL;
  }
};

// The hash a consumer reports after receiving exactly first..last.
inline std::uint64_t expected_stream_hash(std::uint64_t first, std::uint64_t last, std::size_t max_payload) {
  StreamHash h;
  std::byte buf[1u << 16];
  for (std::uint64_t s = first; s <= last; ++s) {
    const std::size_t n = make_payload(s, max_payload, buf);
    h.add(s, std::span<const std::byte>(buf, n));
  }
  return h.value;
}

}  // namespace shmbus::test
