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

// The capacity of a ring whose longest message (BusInfo::max_message: half
// the ring less one record header) is `max_message`, in records of
// `record_size` bytes; 0 when that says nothing (the 1 GiB limit on a
// message). Rings of one and two records, where nothing spans, both give 2.
inline constexpr std::uint32_t max_message_limit = 1u << 30;
constexpr std::uint64_t capacity_for_max_message(std::uint32_t max_message, std::uint32_t record_size) noexcept {
  if (record_size == 0 || max_message >= max_message_limit) return 0;
  return 2 * ((std::uint64_t{max_message} + record_header_size) / record_size);
}

static_assert(records_for(40, 64) == 1 && records_for(41, 64) == 2 && records_for(232, 64) == 4);
static_assert(place(5, 3, 8) == 5 && place(6, 3, 8) == 8 && place(8, 8, 8) == 8 && place(9, 8, 8) == 16);
static_assert(capacity_for_max_message(32 * 64 - 24, 64) == 64 && capacity_for_max_message(max_message_limit, 64) == 0);
static_assert(is_padding(6, 8, 3, 8) && !is_padding(5, 8, 3, 8) && !is_padding(8, 8, 1, 8));

}  // namespace shmbus
