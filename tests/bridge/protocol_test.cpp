// The wire codec (bridge/protocol.hpp): round trips, and every kind of
// malformed input refused with the status that names it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bridge/protocol.hpp"

namespace shmbus::bridge {
namespace {

std::span<const std::byte> body_of(const std::vector<std::byte>& frame) {
  return std::span<const std::byte>(frame).subspan(kFrameHeaderSize);
}

std::span<const std::byte> bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

TEST(BridgeProtocol, HeaderIsLittleEndianLengthTypeAndZeroes) {
  std::vector<std::byte> f;
  append_seq_frame(f, FrameType::heartbeat, 0x0102030405060708ull);
  ASSERT_EQ(f.size(), kFrameHeaderSize + 8);
  EXPECT_EQ(f[0], std::byte{8});
  EXPECT_EQ(f[1], std::byte{0});
  EXPECT_EQ(f[4], std::byte{7});
  EXPECT_EQ(f[5], std::byte{0});
  EXPECT_EQ(f[8], std::byte{0x08});
  EXPECT_EQ(f[15], std::byte{0x01});
  FrameHeader h;
  ASSERT_EQ(parse_header(f, 1024, h), DecodeStatus::ok);
  EXPECT_EQ(h.length, 8u);
  EXPECT_EQ(h.type, FrameType::heartbeat);
  std::uint64_t seq = 0;
  ASSERT_EQ(decode_seq(body_of(f), seq), DecodeStatus::ok);
  EXPECT_EQ(seq, 0x0102030405060708ull);
}

TEST(BridgeProtocol, HeaderRefusesShortUnknownReservedAndOversized) {
  std::vector<std::byte> f;
  append_seq_frame(f, FrameType::end, 1);
  FrameHeader h;
  EXPECT_EQ(parse_header(std::span(f).first(7), 1024, h), DecodeStatus::need_more);
  EXPECT_EQ(parse_header(f, 7, h), DecodeStatus::too_large);
  auto g = f;
  g[4] = std::byte{0};
  EXPECT_EQ(parse_header(g, 1024, h), DecodeStatus::bad_type);
  g[4] = std::byte{8};
  EXPECT_EQ(parse_header(g, 1024, h), DecodeStatus::bad_type);
  g = f;
  g[5] = std::byte{1};
  EXPECT_EQ(parse_header(g, 1024, h), DecodeStatus::bad_reserved);
  g = f;
  g[7] = std::byte{1};
  EXPECT_EQ(parse_header(g, 1024, h), DecodeStatus::bad_reserved);
  // A length of 4 GiB - 1 is refused from the header alone: nothing is allocated for it.
  g = f;
  g[0] = g[1] = g[2] = g[3] = std::byte{0xFF};
  EXPECT_EQ(parse_header(g, 1u << 20, h), DecodeStatus::too_large);
}

TEST(BridgeProtocol, HelloRoundTrip) {
  Hello in;
  in.start = StartKind::sequence;
  in.start_seq = 123456789012ull;
  in.bus = "market.data-1";
  in.token = "s3cret";
  std::vector<std::byte> f;
  append_hello(f, in);
  EXPECT_EQ(f.size(), kFrameHeaderSize + kHelloFixed + in.bus.size() + in.token.size());
  Hello out;
  ASSERT_EQ(decode_hello(body_of(f), out), DecodeStatus::ok);
  EXPECT_EQ(out.version, kProtocolVersion);
  EXPECT_EQ(out.start, StartKind::sequence);
  EXPECT_EQ(out.start_seq, in.start_seq);
  EXPECT_EQ(out.bus, in.bus);
  EXPECT_EQ(out.token, in.token);
}

TEST(BridgeProtocol, HelloRefusesEveryMalformedField) {
  Hello in;
  in.bus = "bus";
  std::vector<std::byte> f;
  append_hello(f, in);
  const std::vector<std::byte> good(f.begin() + kFrameHeaderSize, f.end());
  Hello out;
  ASSERT_EQ(decode_hello(good, out), DecodeStatus::ok);

  auto b = good;
  b[0] = std::byte{2};  // version 2
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_version);
  EXPECT_EQ(out.version, 2u);
  b = good;
  b[2] = std::byte{3};  // start kind
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_field);
  b = good;
  b[3] = std::byte{1};
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_reserved);
  b = good;
  b[4] = std::byte{4};  // bus length past the end
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_length);
  b = good;
  b[4] = std::byte{0};  // empty bus name
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_field);
  b = good;
  b[6] = std::byte{0xFF};  // token length past the limit
  b[7] = std::byte{0xFF};
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_field);
  b = good;
  b[8] = std::byte{1};  // a start sequence with start=earliest
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_field);
  b = good;
  b.push_back(std::byte{0});  // trailing byte
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_length);
  EXPECT_EQ(decode_hello(std::span(good).first(kHelloFixed - 1), out), DecodeStatus::bad_length);
  for (std::string_view bad : {"../x", ".hidden", "-opt", "a/b", "a b"}) {
    Hello h;
    h.bus = bad;
    std::vector<std::byte> g;
    append_hello(g, h);
    EXPECT_EQ(decode_hello(body_of(g), out), DecodeStatus::bad_name) << bad;
  }
}

TEST(BridgeProtocol, WelcomeRoundTripAndChecks) {
  Welcome in;
  in.policy = 1;
  in.record_size = 256;
  in.max_payload = 232;
  in.heartbeat_ms = 1000;
  in.max_frame = 1u << 20;
  in.first_seq = 42;
  std::vector<std::byte> f;
  append_welcome(f, in);
  Welcome out;
  ASSERT_EQ(decode_welcome(body_of(f), out), DecodeStatus::ok);
  EXPECT_EQ(out.policy, 1u);
  EXPECT_EQ(out.record_size, 256u);
  EXPECT_EQ(out.max_payload, 232u);
  EXPECT_EQ(out.heartbeat_ms, 1000u);
  EXPECT_EQ(out.max_frame, 1u << 20);
  EXPECT_EQ(out.first_seq, 42u);
  in.policy = 3;
  f.clear();
  append_welcome(f, in);
  EXPECT_EQ(decode_welcome(body_of(f), out), DecodeStatus::bad_field);
  in.policy = 2;
  in.max_frame = 100;  // cannot carry one full message
  f.clear();
  append_welcome(f, in);
  EXPECT_EQ(decode_welcome(body_of(f), out), DecodeStatus::bad_field);
  EXPECT_EQ(decode_welcome(body_of(f).first(31), out), DecodeStatus::bad_length);
}

TEST(BridgeProtocol, ErrorCarriesCodeResumePointAndOneLine) {
  std::vector<std::byte> f;
  append_error(f, ErrorCode::slow, 977, "too slow\nsecond line");
  ErrorFrame e;
  ASSERT_EQ(decode_error(body_of(f), e), DecodeStatus::ok);
  EXPECT_EQ(e.code, ErrorCode::slow);
  EXPECT_EQ(e.next_seq, 977u);
  EXPECT_EQ(e.text, "too slow second line");
  f.clear();
  append_error(f, ErrorCode::internal, 0, std::string(5000, 'x'));
  ASSERT_EQ(decode_error(body_of(f), e), DecodeStatus::ok);
  EXPECT_EQ(e.text.size(), kMaxErrorText);
  auto b = std::vector<std::byte>(f.begin() + kFrameHeaderSize, f.end());
  b[0] = std::byte{99};
  EXPECT_EQ(decode_error(b, e), DecodeStatus::bad_field);
  b[0] = std::byte{1};
  b[16] = std::byte{'\n'};
  EXPECT_EQ(decode_error(b, e), DecodeStatus::bad_field);
}

std::vector<std::byte> three_message_batch(std::uint64_t first) {
  std::vector<std::byte> f;
  BatchBuilder b;
  b.begin(f);
  b.add(f, first, 11, bytes("a"));
  b.add(f, first + 1, 12, bytes(""));
  b.add(f, first + 2, 13, bytes("hello"));
  b.finish(f);
  return f;
}

TEST(BridgeProtocol, BatchRoundTripKeepsSequencesTimestampsAndPayloads) {
  const auto f = three_message_batch(1000);
  FrameHeader h;
  ASSERT_EQ(parse_header(f, 1 << 20, h), DecodeStatus::ok);
  EXPECT_EQ(h.type, FrameType::batch);
  EXPECT_EQ(h.length, f.size() - kFrameHeaderSize);
  BatchView v;
  ASSERT_EQ(decode_batch(body_of(f), 64, v), DecodeStatus::ok);
  EXPECT_EQ(v.count(), 3u);
  EXPECT_EQ(v.first_seq(), 1000u);
  std::vector<std::string> payloads;
  std::uint64_t seq = 1000, ts = 11;
  for (BatchMessage m : v) {
    EXPECT_EQ(m.seq, seq++);
    EXPECT_EQ(m.timestamp_ns, ts++);
    payloads.emplace_back(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
  }
  EXPECT_EQ(payloads, (std::vector<std::string>{"a", "", "hello"}));
}

TEST(BridgeProtocol, EmptyBatchIsNotWritten) {
  std::vector<std::byte> f{std::byte{1}};
  BatchBuilder b;
  b.begin(f);
  b.finish(f);
  EXPECT_EQ(f.size(), 1u);
}

TEST(BridgeProtocol, BatchRefusesGapsOverlongPayloadsAndLies) {
  const auto f = three_message_batch(5);
  const std::vector<std::byte> good(f.begin() + kFrameHeaderSize, f.end());
  BatchView v;
  EXPECT_EQ(decode_batch(good, 4, v), DecodeStatus::payload_too_large);  // "hello" > 4
  auto b = good;
  b[kBatchFixed + kMessageHeader + 1] = std::byte{9};  // second message's seq 6 -> 9
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::bad_sequence);
  b = good;
  b[0] = std::byte{4};  // count 4, only 3 present
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::bad_length);
  b = good;
  b[0] = b[1] = b[2] = b[3] = std::byte{0xFF};  // count 4 G: refused before any loop
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::bad_length);
  b = good;
  b[0] = std::byte{0};
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::empty);
  b = good;
  b.push_back(std::byte{0});
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::bad_length);
  b = good;
  b[kBatchFixed + 16] = std::byte{0xFF};  // first payload length 255: runs past the body
  EXPECT_EQ(decode_batch(b, 1 << 20, v), DecodeStatus::bad_length);
  b = good;
  b[kBatchFixed + 20] = std::byte{1};
  EXPECT_EQ(decode_batch(b, 64, v), DecodeStatus::bad_reserved);
  // Sequences that would wrap around 2^64.
  const auto w = three_message_batch(UINT64_MAX - 1);
  EXPECT_EQ(decode_batch(body_of(w), 64, v), DecodeStatus::bad_sequence);
}

TEST(BridgeProtocol, LossRoundTripAndChecks) {
  std::vector<std::byte> f;
  append_loss(f, Loss{10, 5});
  Loss l;
  ASSERT_EQ(decode_loss(body_of(f), l), DecodeStatus::ok);
  EXPECT_EQ(l.first, 10u);
  EXPECT_EQ(l.count, 5u);
  f.clear();
  append_loss(f, Loss{10, 0});
  EXPECT_EQ(decode_loss(body_of(f), l), DecodeStatus::empty);
  f.clear();
  append_loss(f, Loss{UINT64_MAX, 2});
  EXPECT_EQ(decode_loss(body_of(f), l), DecodeStatus::bad_sequence);
}

TEST(BridgeProtocol, StreamDecoderStopsAtFirstBadFrame) {
  std::vector<std::byte> s;
  Hello h;
  h.bus = "b";
  append_hello(s, h);
  const auto batch = three_message_batch(0);
  s.insert(s.end(), batch.begin(), batch.end());
  append_seq_frame(s, FrameType::end, 3);
  EXPECT_EQ(decode_stream(s), 3u);
  s.push_back(std::byte{0xFF});  // a partial header after them
  EXPECT_EQ(decode_stream(s), 3u);
  std::vector<std::byte> garbage(1000, std::byte{0xAB});
  EXPECT_EQ(decode_stream(garbage), 0u);
}

TEST(BridgeProtocol, ConstantTimeCompareIsEquality) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

}  // namespace
}  // namespace shmbus::bridge
