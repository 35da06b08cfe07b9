// shmbus-bridge — the wire protocol: frame and handshake codec (docs/protocol.md).
//
// Pure functions over byte spans: no I/O, no allocation in the decoders, every
// length checked against the bytes actually present and against the limits
// the caller passes. Untrusted input produces a DecodeStatus naming what is
// wrong; it never reads out of bounds, loops, or throws.
//
// Every frame is an 8-byte header followed by `length` bytes of body; all
// integers are little-endian.
//
//   0               1               2               3
//   0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//  +---------------------------------------------------------------+
//  |                     length of the body (u32)                  |  0
//  +---------------+---------------+-------------------------------+
//  |   type (u8)   | flags (u8, 0) |        reserved (u16, 0)      |  4
//  +---------------+---------------+-------------------------------+
//  |                    body: `length` bytes ...                   |  8
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <shmbus/placement.hpp>

namespace shmbus::bridge {

// 2: welcome carries the bus's max_message (was max_payload), and a batch
//    message its `records` (was reserved): a message may span records, and
//    sequence numbers count records.
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::size_t kFrameHeaderSize = 8;

enum class FrameType : std::uint8_t {
  hello = 1,      // client -> server, first frame: version, bus, start, token
  welcome = 2,    // server -> client: geometry and the first sequence it will send
  error = 3,      // server -> client, last frame: a code, a resume point and one line of text
  batch = 4,      // server -> client: consecutive messages
  loss = 5,       // server -> client: messages that will never come
  end = 6,        // server -> client: the bus's producer closed; nothing follows
  heartbeat = 7,  // either way, when idle
};

enum class ErrorCode : std::uint16_t {
  bad_version = 1,    // the server does not speak the client's protocol version
  unknown_bus = 2,    // no such bus (or it could not be opened)
  not_retained = 3,   // the requested start sequence is gone (or not yet published)
  bad_token = 4,      // the token is missing or wrong
  bad_request = 5,    // a malformed or unexpected frame
  too_many = 6,       // the server's subscriber limit is reached
  slow = 7,           // --slow disconnect: the subscriber's buffer overflowed
  timeout = 8,        // the handshake did not finish in time
  shutdown = 9,       // the server is stopping
  internal = 10,      // anything else on the server (the text says what)
  idle = 11,          // nothing received from the peer within the idle timeout
  forbidden = 12,     // the peer is a local user who may not read the bus's segment
};
const char* to_string(ErrorCode c) noexcept;

enum class StartKind : std::uint8_t { earliest = 0, latest = 1, sequence = 2 };

// What went wrong decoding a frame (ok if nothing).
enum class DecodeStatus : std::uint8_t {
  ok,
  need_more,       // fewer bytes than the header (or its body) needs: read more
  too_large,       // length above the caller's limit
  bad_type,        // unknown frame type
  bad_reserved,    // a flags or reserved field is not zero
  bad_length,      // the body's length does not match its contents
  bad_version,     // hello/welcome with another protocol version
  bad_field,       // a field holds an impossible value (start kind, policy, empty bus...)
  bad_name,        // the bus name has characters a bus name may not have
  bad_sequence,    // a batch message before the end of the one before it, or a sequence overflow
  payload_too_large,  // a message longer than the announced max message
  bad_records,     // a batch message's records impossible for its length
  empty,           // a batch of zero messages or a loss of zero
};
const char* to_string(DecodeStatus s) noexcept;

struct FrameHeader {
  std::uint32_t length = 0;
  FrameType type = FrameType::heartbeat;
};

// Limits the decoders enforce (defaults match the server's defaults).
inline constexpr std::uint32_t kMaxBusName = 200;
inline constexpr std::uint32_t kMaxToken = 1024;
inline constexpr std::uint32_t kMaxErrorText = 512;
inline constexpr std::uint32_t kHelloFixed = 16;
inline constexpr std::uint32_t kWelcomeSize = 32;
inline constexpr std::uint32_t kErrorFixed = 16;
inline constexpr std::uint32_t kBatchFixed = 8;
inline constexpr std::uint32_t kMessageHeader = 24;
inline constexpr std::uint32_t kLossSize = 16;
inline constexpr std::uint32_t kSeqSize = 8;  // end and heartbeat bodies
// The largest hello a client can send.
inline constexpr std::uint32_t kMaxHelloBody = kHelloFixed + kMaxBusName + kMaxToken;

// Parses the 8-byte header at the front of `bytes`. need_more if fewer than 8
// bytes; too_large if the body is longer than `max_body`.
[[nodiscard]] DecodeStatus parse_header(std::span<const std::byte> bytes, std::uint32_t max_body,
                                        FrameHeader& out) noexcept;

struct Hello {
  std::uint16_t version = kProtocolVersion;
  StartKind start = StartKind::earliest;
  std::uint64_t start_seq = 0;
  std::string_view bus;    // views into the decoded body
  std::string_view token;  // empty: none
};

struct Welcome {
  std::uint16_t version = kProtocolVersion;
  std::uint32_t policy = 0;  // shmbus::Policy's value: 1 block, 2 overwrite
  std::uint32_t record_size = 0;
  std::uint32_t max_message = 0;  // the longest message on the bus (it may span records)
  std::uint32_t heartbeat_ms = 0;
  std::uint32_t max_frame = 0;  // largest body the server sends
  std::uint64_t first_seq = 0;
};

struct ErrorFrame {
  ErrorCode code = ErrorCode::internal;
  std::uint64_t next_seq = 0;  // where to resume (the first sequence not delivered)
  std::string_view text;       // one line, <= kMaxErrorText bytes
};

struct Loss {
  std::uint64_t first = 0;  // first sequence missing
  std::uint64_t count = 0;  // >= 1
};

// What a bus's welcome may say: records of 64 bytes or more, a multiple of
// 8, with a 24-byte header; no message above 1 GiB. Records a message takes:
// shmbus::records_for() (shmbus/placement.hpp).
inline constexpr std::uint32_t kRecordHeader = record_header_size;
inline constexpr std::uint32_t kMinRecordSize = 64;
inline constexpr std::uint32_t kMaxMessage = max_message_limit;

// Record size and longest message a welcome announced: what batches are checked against.
struct BatchLimits {
  std::uint32_t max_message = 0;
  std::uint32_t record_size = 0;
};

// A validated batch body; iterate with for (BatchMessage m : batch).
struct BatchMessage {
  std::uint64_t seq = 0;
  std::uint64_t timestamp_ns = 0;
  std::span<const std::byte> payload;
  std::uint32_t records = 1;  // sequences the message takes; the next one is at seq + records or later
};

class BatchView {
 public:
  class iterator {
   public:
    BatchMessage operator*() const noexcept;
    iterator& operator++() noexcept;
    bool operator==(const iterator& o) const noexcept { return left_ == o.left_; }

   private:
    friend class BatchView;
    const std::byte* p_ = nullptr;
    std::uint32_t left_ = 0;
  };
  iterator begin() const noexcept;
  iterator end() const noexcept;
  std::uint32_t count() const noexcept { return count_; }
  std::uint64_t first_seq() const noexcept { return first_; }
  // The sequence after the last message's records.
  std::uint64_t end_seq() const noexcept { return end_; }

 private:
  friend DecodeStatus decode_batch(std::span<const std::byte>, BatchLimits, BatchView&) noexcept;
  std::span<const std::byte> messages_;
  std::uint32_t count_ = 0;
  std::uint64_t first_ = 0;
  std::uint64_t end_ = 0;
};

// Body decoders: `body` is exactly the frame's body.
[[nodiscard]] DecodeStatus decode_hello(std::span<const std::byte> body, Hello& out) noexcept;
[[nodiscard]] DecodeStatus decode_welcome(std::span<const std::byte> body, Welcome& out) noexcept;
[[nodiscard]] DecodeStatus decode_error(std::span<const std::byte> body, ErrorFrame& out) noexcept;
[[nodiscard]] DecodeStatus decode_batch(std::span<const std::byte> body, BatchLimits limits,
                                        BatchView& out) noexcept;
[[nodiscard]] DecodeStatus decode_loss(std::span<const std::byte> body, Loss& out) noexcept;
// end and heartbeat: a sequence number.
[[nodiscard]] DecodeStatus decode_seq(std::span<const std::byte> body, std::uint64_t& out) noexcept;

// Encoders append one whole frame to `out`.
void append_hello(std::vector<std::byte>& out, const Hello& h);
void append_welcome(std::vector<std::byte>& out, const Welcome& w);
// `text` is cut to kMaxErrorText bytes and newlines become spaces.
void append_error(std::vector<std::byte>& out, ErrorCode code, std::uint64_t next_seq,
                  std::string_view text);
void append_loss(std::vector<std::byte>& out, const Loss& l);
void append_seq_frame(std::vector<std::byte>& out, FrameType type, std::uint64_t seq);

// Builds a batch frame in place: begin, add messages (consecutive sequences),
// finish. Appends to `out`, reusing its capacity.
class BatchBuilder {
 public:
  void begin(std::vector<std::byte>& out);
  void add(std::vector<std::byte>& out, std::uint64_t seq, std::uint64_t timestamp_ns,
           std::span<const std::byte> payload, std::uint32_t records = 1);
  // Writes the header; a batch of zero messages is removed again.
  void finish(std::vector<std::byte>& out) noexcept;
  std::uint32_t count() const noexcept { return count_; }
  // Bytes the current batch's body holds so far.
  std::size_t body_size(const std::vector<std::byte>& out) const noexcept {
    return out.size() - start_ - kFrameHeaderSize;
  }

 private:
  std::size_t start_ = 0;
  std::uint32_t count_ = 0;
  bool open_ = false;
};

// Compares two secrets (tokens) in time that depends only on their lengths.
bool constant_time_equal(std::string_view a, std::string_view b) noexcept;

// Decodes a whole byte stream as a client or server would, frame after frame
// (the fuzz target's entry point; returns the number of frames accepted).
std::size_t decode_stream(std::span<const std::byte> bytes) noexcept;

}  // namespace shmbus::bridge
