// shmbus-bridge mirror: republishes a remote bus (through `serve`) into a
// local bus, keeping the source's sequence numbers.
//
// The local bus is the mirror's only memory: the first sequence it lacks is
// the local producer's next_seq(), so a mirror restarted after a crash,
// or reconnecting after the server went away, asks the server for exactly
// that sequence: no duplicate, no gap while the source still retains it.
// A gap it cannot fill (the source no longer retains it, or the server sent a
// loss frame) is skipped with Producer::skip_to(), which local consumers see
// as a loss of the exact count, and is reported on stderr and in the stats.
// While it waits for room on the local bus (a local reader holding a `block`
// bus back) it keeps sending heartbeats, so that the server does not take it
// for an idle subscriber and close a subscription that is merely waiting.
#pragma once

#include <shmbus/bus.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "bridge/client.hpp"

namespace shmbus::bridge {

struct MirrorStats {
  std::uint64_t messages = 0;     // republished
  std::uint64_t bytes = 0;        // their payload bytes
  std::uint64_t gaps = 0;         // ranges that could not be filled
  std::uint64_t lost = 0;         // messages in those ranges
  std::uint64_t connects = 0;     // successful handshakes
  std::uint64_t failures = 0;     // connection attempts or connections that failed
  std::uint64_t next_seq = 0;     // the local bus's next sequence
  bool connected = false;
  bool ended = false;             // the last call of on_stats: the mirror has stopped
  bool operator==(const MirrorStats&) const = default;
};

struct MirrorOptions {
  ClientOptions remote;  // host, port, bus (the remote one), token, tls_ca; start for a fresh local bus
  std::string bus;       // the local bus; created with the remote's geometry if missing
  std::uint64_t capacity = 65536;
  std::uint32_t max_readers = 16;
  mode_t mode = 0600;
  Trust trust{};
  std::chrono::milliseconds backoff_min{100};
  std::chrono::milliseconds backoff_max{5000};
  // Called on the mirror's thread with the current stats at least every
  // 100 ms while it runs (what a metrics exporter shows); may be empty.
  std::function<void(const MirrorStats&)> sample;
};


enum class MirrorEnd {
  end_of_stream,  // the remote producer ended the stream; forwarded to the local bus
  stopped,        // should_stop said so
};

// Runs until the remote stream ends or `should_stop` (polled at least every
// 100 ms) returns true. `on_stats` is called every `stats_interval` (0: never),
// and once more at the end with `ended` set.
// Throws std::runtime_error with one line for what retrying cannot fix: a
// refused token or version, an untrusted certificate, a local bus that cannot
// hold the remote's messages.
MirrorEnd run_mirror(const MirrorOptions& options, const std::function<bool()>& should_stop,
                     std::chrono::milliseconds stats_interval,
                     const std::function<void(const MirrorStats&)>& on_stats);

}  // namespace shmbus::bridge
