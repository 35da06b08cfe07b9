// shmbus-nats out — a bus into a JetStream stream.
//
// Reads BUS as an ordinary consumer (one reader slot, so a `block` bus waits
// for the gateway) and publishes every message asynchronously to SUBJECT,
// with at most max_in_flight publishes unacknowledged. Each message carries
// the headers of headers.hpp; Nats-Msg-Id makes a republished message a
// duplicate the server drops.
//
// Where to start: the last message the stream holds on SUBJECT says which bus
// and sequence it came from; if it is this bus, the gateway resumes right
// after it, otherwise at the bus's earliest retained record. When a publish
// fails (the server restarting, an ack timing out) the gateway stops
// publishing, waits for every publish in flight to be answered, looks the
// last message up again and resumes after it: the stream keeps the bus's
// order, each message once.
#pragma once

#include <shmbus/bus.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "nats/connection.hpp"

namespace shmbus::nats {

struct OutStats {
  std::uint64_t published = 0;      // handed to the client
  std::uint64_t acknowledged = 0;   // stored by the stream (duplicates included)
  std::uint64_t duplicates = 0;     // acknowledged as duplicates (already stored)
  std::uint64_t failed = 0;         // publishes that failed (then republished after a resync)
  std::uint64_t in_flight = 0;      // published, not yet answered
  std::uint64_t resyncs = 0;        // times publishing was resumed from the stream's last message
  std::uint64_t reconnects = 0;
  std::uint64_t lost = 0;           // bus messages gone before they could be read
  std::uint64_t first_seq = 0;      // where this run started on the bus
  std::uint64_t next_seq = 0;       // next bus sequence to publish
  double seconds = 0;
  std::string end;                  // why it stopped: signal, closed, producer_died, count, idle
  std::uint64_t bytes = 0;          // payload bytes published
  std::uint64_t largest = 0;        // the largest message read from the bus, payload and headers
  std::uint64_t max_payload = 0;    // the server's max_payload (0 while not connected)
  bool connected = false;           // connected to the NATS server now
};

struct OutOptions {
  ConnectArgs connect;
  std::string bus;
  std::string stream;
  std::string subject;               // empty: default_subject(bus)
  std::int64_t max_in_flight = 4096;  // unacknowledged publishes
  std::int64_t ack_timeout_ms = 5000;
  bool follow = false;               // keep going across producer close/crash/takeover
  bool create_stream = false;        // create STREAM (file storage, SUBJECT) if missing
  std::uint64_t count = 0;           // stop after this many published (0: no limit)
  std::chrono::nanoseconds idle_timeout{0};  // stop after this long with nothing new (0: never)
  std::chrono::milliseconds stats_interval{10000};
  Trust trust{};
  // Called on the gateway's thread with the current stats about every
  // 100 ms while it runs (what a metrics exporter shows); may be empty.
  std::function<void(const OutStats&)> sample;
};


// Runs until `stop()` is true, the count is reached, or the bus ends (unless
// follow). `progress` is called every stats_interval. Throws GatewayError
// (one line) on anything fatal: server unreachable, stream missing,
// permission denied, a bus error.
OutStats run_out(const OutOptions& options, const std::function<bool()>& stop,
                 const std::function<void(const OutStats&)>& progress);

}  // namespace shmbus::nats
