// How the programs write one message: escaped text, hex, and the one JSON
// shape both shmbus-consumer --format json and shmbus-inspect dump --json use:
//
//   {"seq":12,"timestamp_ns":0,"length":5,"encoding":"utf8","payload":"hello"}
//   {"seq":13,"timestamp_ns":0,"length":2,"encoding":"hex","payload":"00ff"}
//   {"seq":14,"timestamp_ns":0,"length":300,"records":2,"encoding":"utf8","payload":"..."}
//
// "encoding" is "utf8" when the payload is valid UTF-8 (then "payload" is
// that text as a JSON string) and "hex" otherwise (two lower-case digits per
// byte). Every message has these five keys; one that spans records (longer
// than one record's payload) also has "records", the sequence numbers it
// takes, after "length".
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace shmbus::tools {

bool valid_utf8(std::span<const std::byte> p) noexcept;

void append_hex(fmt::memory_buffer& b, std::span<const std::byte> p);

// A JSON string literal (quotes included) of UTF-8 bytes.
void append_json_string(fmt::memory_buffer& b, std::span<const std::byte> p);

// One message in the shape above, without a trailing newline.
void append_message_json(fmt::memory_buffer& b, std::uint64_t seq, std::uint64_t timestamp_ns,
                         std::span<const std::byte> payload, std::uint32_t records = 1);

// Text output: the payload as one line. Control bytes (other than tab), DEL
// and backslash are written as C escapes (\n, \r, \e, \\, \xNN), so a message
// can neither break the one-line-per-message framing nor drive the terminal.
// Everything else, UTF-8 included, is written as it is.
void append_escaped_text(fmt::memory_buffer& b, std::span<const std::byte> p);

// For people reading names and payloads where only ASCII is safe
// (shmbus-inspect): printable ASCII as it is, everything else as C escapes
// (\n, \t, \r, \\, \", \xNN), so the result fits between double quotes.
std::string escape_ascii(std::span<const std::byte> p);
std::string escape_ascii(std::string_view text);

// "00 1a ff": two lower-case digits per byte, a space between bytes.
std::string hex_spaced(std::span<const std::byte> p);

}  // namespace shmbus::tools
