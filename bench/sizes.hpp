// shmbus-bench — the size axis (--modes sizes): what shmbus moves and how
// fast it hands a message over, by message size, beside what one core can
// copy.
//
// For every size of --size-axis, on a bus made with the library's default
// options (record size and ring; a larger ring only where the default's max
// message is smaller than the size):
//   - memcpy: one process on the consumer's CPU copies messages of the size
//     from a region as large as the bus's ring into another as large, one
//     after the other: the rate at which one core moves those bytes, the
//     ceiling of a transport that writes each byte once and reads it once.
//   - throughput, 1 → 1: the producer claim()s each message, writes every
//     byte (a copy from its own buffer) and commit()s; the consumer reads it
//     in place with next() and reads every byte (a sum of its 8-byte words).
//   - hand-off latency: ping-pong over two buses; each side claim()s a
//     message, writes its 16-byte header only, commit()s, and reads the
//     other's message in place (its header only). One-way is half the round
//     trip. What this measures is the hand-off: the cost of passing a
//     message of the size without copying it.
// Each configuration runs --runs times in rounds; medians are reported.
#pragma once

#include <nlohmann/json.hpp>

#include "run.hpp"

namespace bench {

// Runs the size axis, prints its table on stdout (progress on stderr) and
// returns its rows for --json. Throws Usage for options it cannot run.
nlohmann::json run_sizes(const Options& o);

}  // namespace bench
