// shmbus-nats — what a bus message carries on JetStream, and how it is read back.
//
// Every message nats-out publishes carries, besides its payload untouched:
//
//   Shmbus-Seq   the bus sequence number, decimal         "1234"
//   Shmbus-Time  the record's publish time, CLOCK_REALTIME ns, decimal
//                (0 when the bus publishes without timestamps)
//   Shmbus-Bus   the bus identity: NAME '@' creation time ns ("md@1764028800123456789")
//   Shmbus-Records  the records the message takes on its bus, decimal, when
//                more than one (a message longer than one record spans
//                several; sequence numbers count records, so the next
//                message's sequence is at least Shmbus-Seq + Shmbus-Records)
//   Nats-Msg-Id  identity '#' sequence: JetStream drops a second message with
//                the same id inside the stream's duplicate window
//
// Everything read from the network is untrusted: parse_seq accepts 1..20
// decimal digits that fit a u64 and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <shmbus/placement.hpp>

namespace shmbus::nats {

inline constexpr const char* kSeqHeader = "Shmbus-Seq";
inline constexpr const char* kTimeHeader = "Shmbus-Time";
inline constexpr const char* kBusHeader = "Shmbus-Bus";
inline constexpr const char* kRecordsHeader = "Shmbus-Records";

// Where a message lands and how many records it takes: the bus's rule,
// shmbus/placement.hpp (records_for(), place()).

// "NAME@CREATION_NS": a bus recreated under the same name is another bus.
std::string bus_identity(std::string_view name, std::uint64_t creation_time_ns);

// A decimal u64 from a header value; nullopt for anything else (empty, sign,
// spaces, more than 20 digits, overflow).
std::optional<std::uint64_t> parse_seq(const char* value) noexcept;
std::optional<std::uint64_t> parse_seq(std::string_view value) noexcept;

// Writes v in decimal into out (at least 21 bytes), NUL-terminated; returns the length.
std::size_t format_u64(char* out, std::uint64_t v) noexcept;

// The fields of a JetStream ack subject
// "$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>"
// (and the newer form with a domain and account hash in front). Parsed in
// place, no allocation; nullopt if it is not such a subject.
struct AckInfo {
  std::uint64_t delivered = 0;   // 1 on first delivery, more on redelivery
  std::uint64_t stream_seq = 0;
  std::uint64_t pending = 0;     // messages left for the consumer after this one
  std::string_view stream;       // the stream and consumer it names (views into the subject)
  std::string_view consumer;
};
std::optional<AckInfo> parse_ack_subject(std::string_view reply) noexcept;

// The default subject of a bus: "shmbus.NAME".
std::string default_subject(std::string_view bus);

}  // namespace shmbus::nats
