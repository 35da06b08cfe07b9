// shmbus-nats in — a JetStream stream into a local bus, under the source
// bus's own sequence numbers.
//
// The local bus is the truth about what has been delivered: its producer
// role is held exclusively (a second `in` on the same bus fails, naming the
// first one's pid), and after a crash the next `in` takes the bus over and
// continues after the last committed record. A message whose Shmbus-Seq is
// below that is a duplicate (a redelivery, or a republish): acknowledged and
// skipped. A message above it is published at its own sequence; the ones in
// between were never in the stream and readers of the local bus count them
// as lost, exactly.
//
// Messages come from the durable pull consumer through pull requests of our
// own (in.cpp, PullConsumer). It is acknowledged (AckAll) only after a fetched
// batch is committed to the bus. Its acknowledged floor is where a restarted
// `in` goes on: it recreates the durable at the floor, so that messages the
// dead process had fetched but not committed come again, in stream order,
// before anything newer. After a reconnect it does the same from the last
// message it committed: a fetch lost with the connection never becomes a hole.
#pragma once

#include <shmbus/bus.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "nats/connection.hpp"

namespace shmbus::nats {

struct InStats {
  std::uint64_t received = 0;          // messages fetched
  std::uint64_t published = 0;         // committed to the bus
  std::uint64_t acknowledged = 0;      // messages covered by acks sent
  std::uint64_t redelivered = 0;       // fetched with a delivery count above 1
  std::uint64_t skipped_duplicates = 0;// below the bus's next sequence: acked, not published
  std::uint64_t gap = 0;               // sequences the stream never had (readers count them as lost)
  std::uint64_t invalid = 0;           // no valid Shmbus-Seq header (acked), or not our delivery
  std::uint64_t rewinds = 0;           // consumer recreated after a reconnect
  std::uint64_t reconnects = 0;
  std::uint64_t next_seq = 0;          // the bus's next sequence
  double seconds = 0;
  std::string end;
  std::uint64_t bytes = 0;             // payload bytes published
  std::uint64_t pending = 0;           // messages left for the durable after the last one fetched (the
                                       // server's count in that delivery): how far `in` is behind
  std::uint64_t largest = 0;           // the largest message fetched, payload bytes
  std::uint64_t max_message = 0;       // the largest the bus takes (BusInfo::max_message)
  bool connected = false;              // connected to the NATS server now
};

struct InOptions {
  ConnectArgs connect;
  std::string stream;
  std::string durable;
  std::string subject;              // filter; empty: every subject of the stream
  std::string bus;
  BusOptions create{};              // used when the bus does not exist
  int batch = 512;                  // messages per fetch
  std::int64_t ack_wait_ms = 30000; // the server redelivers what is unacknowledged this long
  std::uint64_t count = 0;          // stop after this many published (0: no limit)
  std::chrono::nanoseconds idle_timeout{0};
  std::chrono::milliseconds stats_interval{10000};
  // Called on the gateway's thread with the current stats once per fetch
  // (at least every second, a fetch's longest wait) while it runs (what a
  // metrics exporter shows); may be empty.
  std::function<void(const InStats&)> sample;
};


InStats run_in(const InOptions& options, const std::function<bool()>& stop,
               const std::function<void(const InStats&)>& progress);

}  // namespace shmbus::nats
