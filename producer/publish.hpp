// shmbus-producer — publishing: the input or synthetic messages, paced
// by --rate, each publish checked. A failed publish ends the run with a
// PublishFailure naming what went wrong (and, on a full ring, who holds it).
#pragma once

#include <shmbus/shmbus.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "producer/options.hpp"

namespace shmbus::producer {

// A publish that failed mid-run: the summary reports it ("bus 'NAME': what")
// with its JSON "code" (docs/programs.md), and the bus is left open.
struct PublishFailure {
  std::string message;
  std::string code = "error";
};

struct Totals {
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint64_t skipped = 0;    // oversized input messages left out (--oversize skip)
  std::uint64_t truncated = 0;  // oversized input messages cut (--oversize truncate)
  std::optional<std::uint64_t> first_seq;
  std::uint64_t last_seq = 0;
};

// Publishes what `fd` holds (lines or frames, as `o` says) until it ends
// or a stop is requested. Throws PublishFailure.
void publish_input(Producer& producer, const Options& o, int fd, std::chrono::nanoseconds timeout,
                   Totals& t);
// Publishes o.count synthetic messages (tools/common/synthetic.hpp) of the
// --size or the deterministic mix of --size MIN..MAX.
// Throws PublishFailure.
void publish_synthetic(Producer& producer, const Options& o, std::chrono::nanoseconds timeout,
                       Totals& t);

}  // namespace shmbus::producer
