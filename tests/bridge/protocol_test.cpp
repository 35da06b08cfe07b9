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
  b[0] = std::byte{1};  // version 1: its batches had no records
  EXPECT_EQ(decode_hello(b, out), DecodeStatus::bad_version);
  EXPECT_EQ(out.version, 1u);
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
  in.max_message = 8 * 256 - 24;
  in.heartbeat_ms = 1000;
  in.max_frame = 1u << 20;
  in.first_seq = 42;
  std::vector<std::byte> f;
  append_welcome(f, in);
  Welcome out;
  ASSERT_EQ(decode_welcome(body_of(f), out), DecodeStatus::ok);
  EXPECT_EQ(out.policy, 1u);
  EXPECT_EQ(out.record_size, 256u);
  EXPECT_EQ(out.max_message, 8u * 256 - 24);
  EXPECT_EQ(out.heartbeat_ms, 1000u);
  EXPECT_EQ(out.max_frame, 1u << 20);
  EXPECT_EQ(out.first_seq, 42u);
  in.policy = 3;
  f.clear();
  append_welcome(f, in);
  EXPECT_EQ(decode_welcome(body_of(f), out), DecodeStatus::bad_field);
  in.policy = 2;
  // A frame that holds one message of the longest, and no more, is enough.
  in.max_frame = kBatchFixed + kMessageHeader + in.max_message;
  f.clear();
  append_welcome(f, in);
  EXPECT_EQ(decode_welcome(body_of(f), out), DecodeStatus::ok);
  auto refused = [&](Welcome bad) {
    std::vector<std::byte> g;
    append_welcome(g, bad);
    Welcome o;
    return decode_welcome(body_of(g), o);
  };
  Welcome bad = in;
  bad.max_frame = kBatchFixed + kMessageHeader + in.max_message - 1;  // cannot carry the longest message
  EXPECT_EQ(refused(bad), DecodeStatus::bad_field);
  bad = in;
  bad.max_message = 256 - 24 - 1;  // less than one record holds
  EXPECT_EQ(refused(bad), DecodeStatus::bad_field);
  bad = in;
  bad.max_message = (1u << 30) + 1;  // above 1 GiB
  bad.max_frame = UINT32_MAX;
  EXPECT_EQ(refused(bad), DecodeStatus::bad_field);
  bad = in;
  bad.record_size = 260;  // not a multiple of 8
  EXPECT_EQ(refused(bad), DecodeStatus::bad_field);
  bad = in;
  bad.record_size = 56;  // below a bus's smallest record
  bad.max_message = 32;
  EXPECT_EQ(refused(bad), DecodeStatus::bad_field);
  bad = in;
  bad.version = 1;
  EXPECT_EQ(refused(bad), DecodeStatus::bad_version);
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
  ASSERT_EQ(decode_batch(body_of(f), BatchLimits{64, 128}, v), DecodeStatus::ok);
  EXPECT_EQ(v.count(), 3u);
  EXPECT_EQ(v.first_seq(), 1000u);
  EXPECT_EQ(v.end_seq(), 1003u);
  std::vector<std::string> payloads;
  std::uint64_t seq = 1000, ts = 11;
  for (BatchMessage m : v) {
    EXPECT_EQ(m.seq, seq++);
    EXPECT_EQ(m.timestamp_ns, ts++);
    EXPECT_EQ(m.records, 1u);
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

// Messages that span records: each takes `records` sequences; the next one
// starts at seq + records, or later after padding (sequences holding no message).
TEST(BridgeProtocol, BatchCarriesMessagesThatSpanRecords) {
  const std::string big(1000, 'x');  // 1000 + 24 bytes in records of 128: 8 records
  std::vector<std::byte> f;
  BatchBuilder b;
  b.begin(f);
  b.add(f, 100, 1, bytes("a"));
  b.add(f, 101, 2, bytes(big), 8);
  b.add(f, 112, 3, bytes(big), 8);  // after 3 sequences of padding
  b.finish(f);
  const BatchLimits limits{2024, 128};
  BatchView v;
  ASSERT_EQ(decode_batch(body_of(f), limits, v), DecodeStatus::ok);
  EXPECT_EQ(v.first_seq(), 100u);
  EXPECT_EQ(v.end_seq(), 120u);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> got;
  for (BatchMessage m : v) got.emplace_back(m.seq, m.records);
  EXPECT_EQ(got, (std::vector<std::pair<std::uint64_t, std::uint32_t>>{{100, 1}, {101, 8}, {112, 8}}));
  EXPECT_EQ(records_for(1000, 128), 8u);
  EXPECT_EQ(records_for(104, 128), 1u);
  EXPECT_EQ(records_for(105, 128), 2u);

  const std::vector<std::byte> good(f.begin() + kFrameHeaderSize, f.end());
  const std::size_t second = kBatchFixed + kMessageHeader + 1;  // the second message's header
  auto with_u32 = [&](std::size_t at, std::uint32_t x) {
    auto c = good;
    for (int i = 0; i < 4; ++i) c[at + i] = static_cast<std::byte>(x >> (8 * i));
    return c;
  };
  // Fewer records than its length takes, none, or more than the longest message takes.
  EXPECT_EQ(decode_batch(with_u32(second + 20, 7), limits, v), DecodeStatus::bad_records);
  EXPECT_EQ(decode_batch(with_u32(kBatchFixed + 20, 0), limits, v), DecodeStatus::bad_records);
  EXPECT_EQ(decode_batch(with_u32(kBatchFixed + 20, 17), limits, v), DecodeStatus::bad_records);
  // The third message inside the second's records.
  EXPECT_EQ(decode_batch(with_u32(second + kMessageHeader + 1000, 108), limits, v), DecodeStatus::bad_sequence);
  // Longer than the longest message.
  EXPECT_EQ(decode_batch(good, BatchLimits{999, 128}, v), DecodeStatus::payload_too_large);
}

TEST(BridgeProtocol, BatchRefusesDisorderOverlongPayloadsAndLies) {
  const auto f = three_message_batch(5);
  const std::vector<std::byte> good(f.begin() + kFrameHeaderSize, f.end());
  const BatchLimits limits{64, 128};
  BatchView v;
  EXPECT_EQ(decode_batch(good, BatchLimits{4, 128}, v), DecodeStatus::payload_too_large);  // "hello" > 4
  auto b = good;
  b[kBatchFixed + kMessageHeader + 1] = std::byte{5};  // second message's seq 6 -> 5: on the first
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::bad_sequence);
  b = good;
  b[0] = std::byte{4};  // count 4, only 3 present
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::bad_length);
  b = good;
  b[0] = b[1] = b[2] = b[3] = std::byte{0xFF};  // count 4 G: refused before any loop
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::bad_length);
  b = good;
  b[0] = std::byte{0};
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::empty);
  b = good;
  b.push_back(std::byte{0});
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::bad_length);
  b = good;
  b[kBatchFixed + 16] = std::byte{100};  // first payload length 100 (one record): runs past the body
  EXPECT_EQ(decode_batch(b, BatchLimits{1 << 20, 128}, v), DecodeStatus::bad_length);
  b = good;
  b[4] = std::byte{1};
  EXPECT_EQ(decode_batch(b, limits, v), DecodeStatus::bad_reserved);
  // Sequences at 2^62 or beyond (no bus gets there), or that would wrap around 2^64.
  EXPECT_EQ(decode_batch(body_of(three_message_batch(UINT64_MAX - 1)), limits, v), DecodeStatus::bad_sequence);
  EXPECT_EQ(decode_batch(body_of(three_message_batch(std::uint64_t{1} << 62)), limits, v),
            DecodeStatus::bad_sequence);
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
