// shmbus — where a message lands in a bus's sequence: the one rule every
// program that relays, republishes or verifies messages asks, instead of
// deriving it from the layout.
//
// Sequence numbers count records. A message of `length` bytes takes
// records_for(length, record_size) of them. A message that would cross the
// end of the ring does not: the producer pads the rest of the lap (those
// sequences hold no message and lose nothing) and the message starts the
// next lap. So a stream at sequence `next` puts a message of `records`
// records at place(next, records, capacity), and the one after it at that
// plus `records`.
//
// What a reader sees between two messages it is handed is therefore either
// nothing, padding (is_padding()), or a loss it was told of (ReadStatus::lost,
// PollResult::lost): never a mix of padding and unreported sequences. A loss
// is told before the first message that follows it (a read_batch() that
// meets one after messages are in hand ends there), and it covers every
// sequence from the end of the message before it to the start of the one
// after, padding included.
#pragma once

#include <cstdint>

namespace shmbus {

// Bytes of each record taken by its header: a message fits one record when
// it is at most record_size - record_header_size bytes long.
inline constexpr std::uint32_t record_header_size = 24;

// Records (sequence numbers) a message of `length` bytes takes on a bus of
// `record_size`-byte records.
constexpr std::uint64_t records_for(std::uint64_t length, std::uint32_t record_size) noexcept {
  return length + record_header_size <= record_size ? 1
                                                    : (length + record_header_size + record_size - 1) / record_size;
}

// The sequence at which a message of `records` records is published when the
// stream is at `next` on a ring of `capacity` records (a power of two): `next`
// itself, or the start of the next lap when the message would cross the end
// of this one.
constexpr std::uint64_t place(std::uint64_t next, std::uint64_t records, std::uint64_t capacity) noexcept {
  const std::uint64_t mask = capacity - 1;
  return (next & mask) + records <= capacity ? next : (next | mask) + 1;
}

// Whether the sequences [from, seq) before a message of `records` records at
// `seq` are exactly the padding the producer writes before it: the stream was
// at `from` and the message did not fit the rest of the lap.
constexpr bool is_padding(std::uint64_t from, std::uint64_t seq, std::uint64_t records,
                          std::uint64_t capacity) noexcept {
  return capacity != 0 && seq > from && place(from, records, capacity) == seq;
}

// The longest message a ring of `capacity` records of `record_size` bytes
// takes (BusInfo::max_message): a span of half the ring (of its one record
// on a ring of one) less one record header, and never more than
// max_message_limit. A bus takes every message up to this length and
// refuses a longer one; capacity_for() sizes a ring from the message.
inline constexpr std::uint32_t max_message_limit = 1u << 30;
constexpr std::uint32_t max_message_for(std::uint64_t capacity, std::uint32_t record_size) noexcept {
  const std::uint64_t span = capacity / 2 > 0 ? capacity / 2 : 1;
  const std::uint64_t bytes = span * record_size;
  if (bytes <= record_header_size) return 0;
  return bytes - record_header_size < max_message_limit ? static_cast<std::uint32_t>(bytes - record_header_size)
                                                        : max_message_limit;
}

// The smallest ring, in records of `record_size` bytes, that takes messages
// of `max_message` bytes: the least power of two, at least `at_least` (2
// when that is 0 or 1), with max_message_for(capacity, record_size) >=
// max_message. 0 when no ring of up to 2^32 records (BusOptions' limit)
// does. Messages of up to 1 MiB in 128-byte records: 16,384 records would
// take 1 MiB less 24 bytes, so it is 32,768.
constexpr std::uint64_t capacity_for(std::uint64_t max_message, std::uint32_t record_size,
                                     std::uint64_t at_least = 2) noexcept {
  if (record_size == 0 || max_message > max_message_limit) return 0;
  std::uint64_t capacity = 2;
  while (capacity < at_least && capacity <= (std::uint64_t{1} << 31)) capacity *= 2;
  while (max_message_for(capacity, record_size) < max_message && capacity <= (std::uint64_t{1} << 31)) capacity *= 2;
  return max_message_for(capacity, record_size) >= max_message && capacity >= at_least ? capacity : 0;
}

// The capacity of a ring whose longest message (BusInfo::max_message) is
// `max_message`, in records of `record_size` bytes; 0 when that says nothing
// (the 1 GiB limit on a message). Rings of one and two records, where
// nothing spans, both give 2.
constexpr std::uint64_t capacity_for_max_message(std::uint32_t max_message, std::uint32_t record_size) noexcept {
  if (record_size == 0 || max_message >= max_message_limit) return 0;
  return 2 * ((std::uint64_t{max_message} + record_header_size) / record_size);
}

static_assert(records_for(40, 64) == 1 && records_for(41, 64) == 2 && records_for(232, 64) == 4);
static_assert(place(5, 3, 8) == 5 && place(6, 3, 8) == 8 && place(8, 8, 8) == 8 && place(9, 8, 8) == 16);
static_assert(capacity_for_max_message(32 * 64 - 24, 64) == 64 && capacity_for_max_message(max_message_limit, 64) == 0);
static_assert(max_message_for(2, 64) == 40 && max_message_for(8, 64) == 232 && max_message_for(1, 64) == 40 &&
              max_message_for(std::uint64_t{1} << 32, 1u << 20) == max_message_limit);
static_assert(capacity_for(1u << 20, 128) == 32768 && capacity_for((1u << 20) - 24, 128) == 16384 &&
              capacity_for(40, 64) == 2 && capacity_for(41, 64) == 4 && capacity_for(1, 64, 100) == 128 &&
              capacity_for(max_message_limit + 1ull, 64) == 0 && capacity_for(max_message_limit, 64) == (1u << 26));
static_assert(is_padding(6, 8, 3, 8) && !is_padding(5, 8, 3, 8) && !is_padding(8, 8, 1, 8));

}  // namespace shmbus
