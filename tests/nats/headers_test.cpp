// What shmbus-nats reads from the network before trusting it: the sequence
// header and the JetStream ack subject.
#include <gtest/gtest.h>

#include "nats/headers.hpp"

namespace shmbus::nats {
namespace {

TEST(NatsHeaders, SequenceHeaderAcceptsOnlyPlainDecimalU64) {
  EXPECT_EQ(parse_seq("0"), 0u);
  EXPECT_EQ(parse_seq("1234"), 1234u);
  EXPECT_EQ(parse_seq("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "1x", "0x10", "18446744073709551616",
                          "000000000000000000001", "1.5"}) {
    EXPECT_FALSE(parse_seq(bad).has_value()) << bad;
  }
  EXPECT_FALSE(parse_seq(static_cast<const char*>(nullptr)).has_value());
}

TEST(NatsHeaders, FormatRoundTrips) {
  char buf[24];
  for (std::uint64_t v : {std::uint64_t{0}, std::uint64_t{7}, std::uint64_t{1} << 40, UINT64_MAX}) {
    format_u64(buf, v);
    EXPECT_EQ(parse_seq(buf), v);
  }
}

TEST(NatsHeaders, AckSubjectBothFormsAndNothingElse) {
  auto v1 = parse_ack_subject("$JS.ACK.S.gw.2.1001.990.1700000000000000000.5");
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->delivered, 2u);
  EXPECT_EQ(v1->stream_seq, 1001u);
  EXPECT_EQ(v1->pending, 5u);
  EXPECT_EQ(v1->stream, "S");
  EXPECT_EQ(v1->consumer, "gw");
  auto v2 = parse_ack_subject("$JS.ACK.dom.hash.S.gw.1.42.42.1700000000000000000.0.tok");
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->delivered, 1u);
  EXPECT_EQ(v2->stream_seq, 42u);
  EXPECT_EQ(v2->stream, "S");
  EXPECT_EQ(v2->consumer, "gw");
  for (const char* bad : {"", "$JS.ACK", "_INBOX.x", "$JS.ACK.S.gw.x.1.1.1.1", "$JS.ACK.S.gw.1.1.1.1",
                          "$JS.NAK.S.gw.1.1.1.1.1", "$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m"}) {
    EXPECT_FALSE(parse_ack_subject(bad).has_value()) << bad;
  }
}

TEST(NatsHeaders, IdentityAndSubject) {
  EXPECT_EQ(bus_identity("md", 17), "md@17");
  EXPECT_EQ(default_subject("md.l2"), "shmbus.md.l2");
}

}  // namespace
}  // namespace shmbus::nats
