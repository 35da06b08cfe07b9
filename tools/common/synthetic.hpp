// shmbus tools — the synthetic message format shared by shmbus-producer,
// shmbus-consumer and the benchmarks.
//
// A synthetic message is `size` bytes (size >= synthetic_header_size), all
// fields in native byte order (little-endian on x86-64 and arm64):
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +---------------------------------------------------------------+
//   |              seq (u64): the bus sequence number               |  0
//   +                                                               +
//   |                                                               |
//   +---------------------------------------------------------------+
//   |        send_ns (u64): CLOCK_REALTIME when it was written      |  8
//   +                                                               +
//   |                                                               |
//   +---------------------------------------------------------------+
//   |         checksum (u64): synthetic_checksum(), see below       | 16
//   +                                                               +
//   |                                                               |
//   +---------------------------------------------------------------+
//   |   filler (size - 24 bytes): words seed + i * golden, see below  | 24
//   +---------------------------------------------------------------+
//
// filler: little-endian u64 word i is fmix64(seq * 0x9E3779B97F4A7C15 + 1)
// + i * 0x9E3779B97F4A7C15 (the last word truncated to what fits), so it is
// different for every sequence number and a reader regenerates it from the
// seq field and compares it word for word.
//
// checksum: murmur3's fmix64 of three FNV-1a steps from the offset basis,
// feeding size, seq and send_ns. It covers the fixed part and the length;
// the filler is checked by regenerating it. Any flipped bit, truncation or
// mixed-up record fails one of the two.
//
// Both checks cost a few instructions per word and no multiply chain, so
// verifying every message at full speed costs little (the consumer reads the
// record's lines once, as a user's own code would).
//
// send_ns is CLOCK_REALTIME when the message was written, or 0 in a message
// that carries no send time (shmbus-producer --stamp-every).
//
// The producer writes the filler first and the timestamp last, so send_ns is
// as close to the commit as possible (synthetic_fill, then synthetic_stamp).
#pragma once

#include <shmbus/placement.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace shmbus::tools {

inline constexpr std::size_t synthetic_header_size = 24;
inline constexpr std::size_t synthetic_seq_offset = 0;
inline constexpr std::size_t synthetic_send_ns_offset = 8;
inline constexpr std::size_t synthetic_checksum_offset = 16;
inline constexpr std::size_t synthetic_filler_offset = 24;

// Writes the filler for `seq` into out[24..]. out.size() >= synthetic_header_size.
void synthetic_fill(std::span<std::byte> out, std::uint64_t seq) noexcept;

// Writes seq, send_ns and the checksum (which covers out.size()).
void synthetic_stamp(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns) noexcept;

// synthetic_fill + synthetic_stamp.
void synthetic_write(std::span<std::byte> out, std::uint64_t seq, std::uint64_t send_ns) noexcept;

enum class SyntheticCheck : std::uint8_t {
  ok,
  too_short,     // fewer than synthetic_header_size bytes
  bad_checksum,  // the fixed part or the length does not match the checksum
  bad_filler,    // the filler is not the one of the seq field (see bad_offset)
};

struct SyntheticFields {
  std::uint64_t seq = 0;
  std::uint64_t send_ns = 0;
  std::uint64_t checksum = 0;
  std::size_t bad_offset = 0;  // bad_filler: the first byte that differs
};

// Reads the fixed fields of `in` into `fields` (when long enough) and checks
// the checksum and the filler.
[[nodiscard]] SyntheticCheck synthetic_check(std::span<const std::byte> in,
                                             SyntheticFields& fields) noexcept;

// The checksum `in`'s fixed part and length give (for error messages).
std::uint64_t synthetic_checksum(std::span<const std::byte> in) noexcept;

// The longest message a bus of `capacity` records of `record_size` bytes
// accepts (BusInfo::max_message of such a bus).
using shmbus::max_message_for;

// The sizes of synthetic messages (--size N or --size MIN..MAX): every
// message is `min` bytes when min == max; otherwise sizes are drawn uniformly
// from [min, max] by a fixed-seed generator, the same sizes in every run.
struct SizeRange {
  std::uint64_t min = 64;
  std::uint64_t max = 64;
  bool mixed() const noexcept { return min != max; }
};

// Parses "N" or "MIN..MAX" (decimal, MIN <= MAX). Throws
// std::invalid_argument with a one-line reason.
SizeRange parse_size_range(const std::string& text);
// "N" or "MIN..MAX", as --size takes it.
std::string to_string(const SizeRange& sizes);

// Hands out the sizes of a SizeRange, message after message.
class SizeSequence {
 public:
  explicit SizeSequence(const SizeRange& sizes) noexcept : sizes_(sizes) {}
  std::size_t next() noexcept;

 private:
  SizeRange sizes_;
  std::uint64_t state_ = 0x5348'4d42'5553'0001ULL;  // fixed seed: the same mix every run
};

// Why synthetic messages of `sizes` (--size) cannot be published on a bus of
// `capacity` records of `record_size` bytes, or empty when they can: shorter
// than the fixed part, or longer than the bus's max message
// (max_message_for).
std::string synthetic_size_problem(const SizeRange& sizes, std::uint64_t capacity, std::uint32_t record_size);

}  // namespace shmbus::tools
