#include "bridge/protocol.hpp"

#include <algorithm>
#include <cstring>

namespace shmbus::bridge {
namespace {

std::uint16_t get16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) |
                                    (std::to_integer<unsigned>(p[1]) << 8));
}
std::uint32_t get32(const std::byte* p) noexcept {
  return static_cast<std::uint32_t>(get16(p)) | (static_cast<std::uint32_t>(get16(p + 2)) << 16);
}
std::uint64_t get64(const std::byte* p) noexcept {
  return static_cast<std::uint64_t>(get32(p)) | (static_cast<std::uint64_t>(get32(p + 4)) << 32);
}
void put16(std::byte* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::byte>(v & 0xFF);
  p[1] = static_cast<std::byte>(v >> 8);
}
void put32(std::byte* p, std::uint32_t v) noexcept {
  put16(p, static_cast<std::uint16_t>(v & 0xFFFF));
  put16(p + 2, static_cast<std::uint16_t>(v >> 16));
}
void put64(std::byte* p, std::uint64_t v) noexcept {
  put32(p, static_cast<std::uint32_t>(v));
  put32(p + 4, static_cast<std::uint32_t>(v >> 32));
}

// Appends a frame header for a body of `length` bytes; returns where the body starts.
std::byte* append_frame(std::vector<std::byte>& out, FrameType type, std::uint32_t length) {
  const std::size_t at = out.size();
  out.resize(at + kFrameHeaderSize + length);
  std::byte* p = out.data() + at;
  put32(p, length);
  p[4] = static_cast<std::byte>(type);
  p[5] = std::byte{0};
  put16(p + 6, 0);
  return p + kFrameHeaderSize;
}

bool valid_bus_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

const char* to_string(ErrorCode c) noexcept {
  switch (c) {
    case ErrorCode::bad_version: return "bad-version";
    case ErrorCode::unknown_bus: return "unknown-bus";
    case ErrorCode::not_retained: return "not-retained";
    case ErrorCode::bad_token: return "bad-token";
    case ErrorCode::bad_request: return "bad-request";
    case ErrorCode::too_many: return "too-many-subscribers";
    case ErrorCode::slow: return "slow";
    case ErrorCode::timeout: return "handshake-timeout";
    case ErrorCode::shutdown: return "shutdown";
    case ErrorCode::internal: return "internal";
    case ErrorCode::idle: return "idle";
    case ErrorCode::forbidden: return "forbidden";
  }
  return "unknown-error";
}

const char* to_string(DecodeStatus s) noexcept {
  switch (s) {
    case DecodeStatus::ok: return "ok";
    case DecodeStatus::need_more: return "incomplete frame";
    case DecodeStatus::too_large: return "frame length above the limit";
    case DecodeStatus::bad_type: return "unknown frame type";
    case DecodeStatus::bad_reserved: return "non-zero reserved field";
    case DecodeStatus::bad_length: return "frame length does not match its contents";
    case DecodeStatus::bad_version: return "unsupported protocol version";
    case DecodeStatus::bad_field: return "impossible field value";
    case DecodeStatus::bad_name: return "invalid bus name";
    case DecodeStatus::bad_sequence: return "batch message before the end of the one before it";
    case DecodeStatus::payload_too_large: return "message longer than the max message";
    case DecodeStatus::bad_records: return "batch message records impossible for its length";
    case DecodeStatus::empty: return "empty batch or loss";
  }
  return "unknown decode status";
}

DecodeStatus parse_header(std::span<const std::byte> bytes, std::uint32_t max_body,
                          FrameHeader& out) noexcept {
  if (bytes.size() < kFrameHeaderSize) return DecodeStatus::need_more;
  const std::byte* p = bytes.data();
  const std::uint32_t length = get32(p);
  const auto type = std::to_integer<std::uint8_t>(p[4]);
  if (type < static_cast<std::uint8_t>(FrameType::hello) ||
      type > static_cast<std::uint8_t>(FrameType::heartbeat)) {
    return DecodeStatus::bad_type;
  }
  if (p[5] != std::byte{0} || get16(p + 6) != 0) return DecodeStatus::bad_reserved;
  if (length > max_body) return DecodeStatus::too_large;
  out.length = length;
  out.type = static_cast<FrameType>(type);
  return DecodeStatus::ok;
}

//  hello body:  0 u16 version | 2 u8 start | 3 u8 reserved | 4 u16 bus_len |
//               6 u16 token_len | 8 u64 start_seq | 16 bus | token
DecodeStatus decode_hello(std::span<const std::byte> body, Hello& out) noexcept {
  if (body.size() < kHelloFixed) return DecodeStatus::bad_length;
  const std::byte* p = body.data();
  out.version = get16(p);
  if (out.version != kProtocolVersion) return DecodeStatus::bad_version;
  const auto start = std::to_integer<std::uint8_t>(p[2]);
  if (start > static_cast<std::uint8_t>(StartKind::sequence)) return DecodeStatus::bad_field;
  if (p[3] != std::byte{0}) return DecodeStatus::bad_reserved;
  const std::uint32_t bus_len = get16(p + 4);
  const std::uint32_t token_len = get16(p + 6);
  out.start_seq = get64(p + 8);
  if (bus_len == 0 || bus_len > kMaxBusName || token_len > kMaxToken) return DecodeStatus::bad_field;
  if (body.size() != kHelloFixed + bus_len + token_len) return DecodeStatus::bad_length;
  out.start = static_cast<StartKind>(start);
  if (out.start != StartKind::sequence && out.start_seq != 0) return DecodeStatus::bad_field;
  out.bus = std::string_view(reinterpret_cast<const char*>(p + kHelloFixed), bus_len);
  out.token = std::string_view(reinterpret_cast<const char*>(p + kHelloFixed + bus_len), token_len);
  if (out.bus.front() == '.' || out.bus.front() == '-' ||
      !std::all_of(out.bus.begin(), out.bus.end(), valid_bus_char) ||
      out.bus.find("..") != std::string_view::npos) {
    return DecodeStatus::bad_name;
  }
  return DecodeStatus::ok;
}

//  welcome body: 0 u16 version | 2 u16 reserved | 4 u32 policy | 8 u32 record_size |
//                12 u32 max_message | 16 u32 heartbeat_ms | 20 u32 max_frame | 24 u64 first_seq
DecodeStatus decode_welcome(std::span<const std::byte> body, Welcome& out) noexcept {
  if (body.size() != kWelcomeSize) return DecodeStatus::bad_length;
  const std::byte* p = body.data();
  out.version = get16(p);
  if (out.version != kProtocolVersion) return DecodeStatus::bad_version;
  if (get16(p + 2) != 0) return DecodeStatus::bad_reserved;
  out.policy = get32(p + 4);
  out.record_size = get32(p + 8);
  out.max_message = get32(p + 12);
  out.heartbeat_ms = get32(p + 16);
  out.max_frame = get32(p + 20);
  out.first_seq = get64(p + 24);
  if (out.policy != 1 && out.policy != 2) return DecodeStatus::bad_field;
  // A bus's records are 64 bytes or more, a multiple of 8, and its longest
  // message is at least what one record holds and at most 1 GiB.
  if (out.record_size < kMinRecordSize || out.record_size % 8 != 0 ||
      out.max_message < out.record_size - kRecordHeader || out.max_message > kMaxMessage ||
      out.heartbeat_ms == 0 || out.max_frame < kBatchFixed + kMessageHeader + out.max_message) {
    return DecodeStatus::bad_field;
  }
  return DecodeStatus::ok;
}

//  error body: 0 u16 code | 2 u16 reserved | 4 u32 reserved | 8 u64 next_seq | 16 text
DecodeStatus decode_error(std::span<const std::byte> body, ErrorFrame& out) noexcept {
  if (body.size() < kErrorFixed || body.size() > kErrorFixed + kMaxErrorText) {
    return DecodeStatus::bad_length;
  }
  const std::byte* p = body.data();
  const std::uint16_t code = get16(p);
  if (get16(p + 2) != 0 || get32(p + 4) != 0) return DecodeStatus::bad_reserved;
  if (code < static_cast<std::uint16_t>(ErrorCode::bad_version) ||
      code > static_cast<std::uint16_t>(ErrorCode::forbidden)) {
    return DecodeStatus::bad_field;
  }
  out.code = static_cast<ErrorCode>(code);
  out.next_seq = get64(p + 8);
  out.text = std::string_view(reinterpret_cast<const char*>(p + kErrorFixed), body.size() - kErrorFixed);
  if (out.text.find_first_of("\r\n") != std::string_view::npos) return DecodeStatus::bad_field;
  return DecodeStatus::ok;
}

//  batch body: 0 u32 count | 4 u32 reserved | 8 count x message
//  message:    0 u64 seq | 8 u64 timestamp_ns | 16 u32 length | 20 u32 records | 24 payload
DecodeStatus decode_batch(std::span<const std::byte> body, BatchLimits limits, BatchView& out) noexcept {
  if (body.size() < kBatchFixed) return DecodeStatus::bad_length;
  const std::byte* p = body.data();
  const std::uint32_t count = get32(p);
  if (get32(p + 4) != 0) return DecodeStatus::bad_reserved;
  if (count == 0) return DecodeStatus::empty;
  // Each message takes at least its header: a count the body cannot hold is
  // refused before the loop (which is then bounded by the body's size too).
  if (count > (body.size() - kBatchFixed) / kMessageHeader) return DecodeStatus::bad_length;
  if (limits.record_size <= kRecordHeader) return DecodeStatus::bad_field;
  // The most records a message of the longest length takes; no sequence
  // reaches 2^62 (the bus's own bound), so seq + records never overflows.
  const std::uint64_t max_records = records_for(limits.max_message, limits.record_size);
  constexpr std::uint64_t kMaxSequence = std::uint64_t{1} << 62;
  std::size_t at = kBatchFixed;
  std::uint64_t first = 0;
  std::uint64_t end = 0;  // the sequence after the previous message's records
  for (std::uint32_t i = 0; i < count; ++i) {
    if (body.size() - at < kMessageHeader) return DecodeStatus::bad_length;
    const std::uint64_t seq = get64(p + at);
    const std::uint32_t len = get32(p + at + 16);
    const std::uint32_t records = get32(p + at + 20);
    if (len > limits.max_message) return DecodeStatus::payload_too_large;
    if (records < records_for(len, limits.record_size) || records > max_records) return DecodeStatus::bad_records;
    if (seq >= kMaxSequence || (i > 0 && seq < end)) return DecodeStatus::bad_sequence;
    if (i == 0) first = seq;
    end = seq + records;
    at += kMessageHeader;
    if (body.size() - at < len) return DecodeStatus::bad_length;
    at += len;
  }
  if (at != body.size()) return DecodeStatus::bad_length;
  out.messages_ = body.subspan(kBatchFixed);
  out.count_ = count;
  out.first_ = first;
  out.end_ = end;
  return DecodeStatus::ok;
}

BatchMessage BatchView::iterator::operator*() const noexcept {
  BatchMessage m;
  m.seq = get64(p_);
  m.timestamp_ns = get64(p_ + 8);
  m.payload = std::span<const std::byte>(p_ + kMessageHeader, get32(p_ + 16));
  m.records = get32(p_ + 20);
  return m;
}

BatchView::iterator& BatchView::iterator::operator++() noexcept {
  p_ += kMessageHeader + get32(p_ + 16);
  --left_;
  return *this;
}

BatchView::iterator BatchView::begin() const noexcept {
  iterator it;
  it.p_ = messages_.data();
  it.left_ = count_;
  return it;
}

BatchView::iterator BatchView::end() const noexcept { return iterator{}; }

//  loss body: 0 u64 first | 8 u64 count
DecodeStatus decode_loss(std::span<const std::byte> body, Loss& out) noexcept {
  if (body.size() != kLossSize) return DecodeStatus::bad_length;
  out.first = get64(body.data());
  out.count = get64(body.data() + 8);
  if (out.count == 0) return DecodeStatus::empty;
  if (out.first > UINT64_MAX - out.count) return DecodeStatus::bad_sequence;
  return DecodeStatus::ok;
}

//  end / heartbeat body: 0 u64 next_seq
DecodeStatus decode_seq(std::span<const std::byte> body, std::uint64_t& out) noexcept {
  if (body.size() != kSeqSize) return DecodeStatus::bad_length;
  out = get64(body.data());
  return DecodeStatus::ok;
}

void append_hello(std::vector<std::byte>& out, const Hello& h) {
  const auto bus_len = static_cast<std::uint16_t>(std::min<std::size_t>(h.bus.size(), kMaxBusName));
  const auto token_len = static_cast<std::uint16_t>(std::min<std::size_t>(h.token.size(), kMaxToken));
  std::byte* p = append_frame(out, FrameType::hello, kHelloFixed + bus_len + token_len);
  put16(p, h.version);
  p[2] = static_cast<std::byte>(h.start);
  p[3] = std::byte{0};
  put16(p + 4, bus_len);
  put16(p + 6, token_len);
  put64(p + 8, h.start == StartKind::sequence ? h.start_seq : 0);
  std::memcpy(p + kHelloFixed, h.bus.data(), bus_len);
  if (token_len) std::memcpy(p + kHelloFixed + bus_len, h.token.data(), token_len);
}

void append_welcome(std::vector<std::byte>& out, const Welcome& w) {
  std::byte* p = append_frame(out, FrameType::welcome, kWelcomeSize);
  put16(p, w.version);
  put16(p + 2, 0);
  put32(p + 4, w.policy);
  put32(p + 8, w.record_size);
  put32(p + 12, w.max_message);
  put32(p + 16, w.heartbeat_ms);
  put32(p + 20, w.max_frame);
  put64(p + 24, w.first_seq);
}

void append_error(std::vector<std::byte>& out, ErrorCode code, std::uint64_t next_seq,
                  std::string_view text) {
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(text.size(), kMaxErrorText));
  std::byte* p = append_frame(out, FrameType::error, kErrorFixed + n);
  put16(p, static_cast<std::uint16_t>(code));
  put16(p + 2, 0);
  put32(p + 4, 0);
  put64(p + 8, next_seq);
  for (std::uint32_t i = 0; i < n; ++i) {
    const char c = text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
    p[kErrorFixed + i] = static_cast<std::byte>(c);
  }
}

void append_loss(std::vector<std::byte>& out, const Loss& l) {
  std::byte* p = append_frame(out, FrameType::loss, kLossSize);
  put64(p, l.first);
  put64(p + 8, l.count);
}

void append_seq_frame(std::vector<std::byte>& out, FrameType type, std::uint64_t seq) {
  put64(append_frame(out, type, kSeqSize), seq);
}

void BatchBuilder::begin(std::vector<std::byte>& out) {
  start_ = out.size();
  count_ = 0;
  open_ = true;
  std::byte* p = append_frame(out, FrameType::batch, 0);
  (void)p;
  out.resize(out.size() + kBatchFixed);
}

void BatchBuilder::add(std::vector<std::byte>& out, std::uint64_t seq, std::uint64_t timestamp_ns,
                       std::span<const std::byte> payload, std::uint32_t records) {
  const std::size_t at = out.size();
  out.resize(at + kMessageHeader + payload.size());
  std::byte* p = out.data() + at;
  put64(p, seq);
  put64(p + 8, timestamp_ns);
  put32(p + 16, static_cast<std::uint32_t>(payload.size()));
  put32(p + 20, records);
  if (!payload.empty()) std::memcpy(p + kMessageHeader, payload.data(), payload.size());
  ++count_;
}

void BatchBuilder::finish(std::vector<std::byte>& out) noexcept {
  if (!open_) return;
  open_ = false;
  if (count_ == 0) {
    out.resize(start_);
    return;
  }
  std::byte* p = out.data() + start_;
  put32(p, static_cast<std::uint32_t>(out.size() - start_ - kFrameHeaderSize));
  put32(p + kFrameHeaderSize, count_);
  put32(p + kFrameHeaderSize + 4, 0);
}

bool constant_time_equal(std::string_view a, std::string_view b) noexcept {
  // Every byte of the longer one is looked at; the result is folded without branches.
  const std::size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

std::size_t decode_stream(std::span<const std::byte> bytes) noexcept {
  constexpr std::uint32_t kLimit = 1u << 20;
  std::size_t frames = 0;
  while (true) {
    FrameHeader h;
    if (parse_header(bytes, kLimit, h) != DecodeStatus::ok) break;
    if (bytes.size() - kFrameHeaderSize < h.length) break;
    const auto body = bytes.subspan(kFrameHeaderSize, h.length);
    DecodeStatus s = DecodeStatus::ok;
    switch (h.type) {
      case FrameType::hello: { Hello v; s = decode_hello(body, v); break; }
      case FrameType::welcome: { Welcome v; s = decode_welcome(body, v); break; }
      case FrameType::error: { ErrorFrame v; s = decode_error(body, v); break; }
      case FrameType::batch: {
        BatchView v;
        s = decode_batch(body, BatchLimits{kLimit - kBatchFixed - kMessageHeader, kMinRecordSize}, v);
        if (s == DecodeStatus::ok) {
          std::uint64_t expect = v.first_seq();
          for (BatchMessage m : v) {
            if (m.seq < expect || m.records == 0 || m.payload.size() > kLimit) __builtin_trap();
            expect = m.seq + m.records;
          }
          if (expect != v.end_seq()) __builtin_trap();
        }
        break;
      }
      case FrameType::loss: { Loss v; s = decode_loss(body, v); break; }
      case FrameType::end:
      case FrameType::heartbeat: { std::uint64_t v; s = decode_seq(body, v); break; }
    }
    if (s != DecodeStatus::ok) break;
    ++frames;
    bytes = bytes.subspan(kFrameHeaderSize + h.length);
  }
  return frames;
}

}  // namespace shmbus::bridge
