// shmbus-consumer — what the command line decides, already turned into
// values (main.cpp parses it; run.cpp acts on it).
#pragma once

#include <shmbus/shmbus.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tools/common/trust.hpp"

namespace shmbus::consumer {

inline constexpr const char* program_name = "shmbus-consumer";

// --from: where the reader starts.
struct From {
  enum class Kind { unset, earliest, latest, resume, sequence };
  Kind kind = Kind::unset;  // unset: resume with --name, else earliest
  std::uint64_t seq = 0;    // Kind::sequence
};

// "earliest", "latest", "resume" or a sequence number; empty when `text` is none of them.
std::optional<From> parse_from(std::string_view text);

// --format: how each message is written to stdout (consumer/output.hpp).
enum class Format { text, hex, json, binary, none };

struct Options {
  std::string bus;
  From from;
  std::string name = program_name;
  bool named = false;  // --name was given: a durable reader
  bool follow = false;
  bool best_effort = false;  // never hold a block bus's producer back
  std::uint64_t count = 0;  // 0: no limit
  std::string idle_timeout = "forever";
  Format format = Format::text;
  bool verify = false;
  bool stats = false;
  bool json = false;
  std::optional<std::string> wait_for_bus;
  WaitStrategy wait = WaitStrategy::adaptive;
  tools::TrustArgs trust;
  std::string tls_ca;      // tcp:// only
  std::string token_file;  // tcp:// only
};

}  // namespace shmbus::consumer
