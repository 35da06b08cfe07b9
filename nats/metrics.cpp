// shmbus-nats --metrics-listen: see metrics.hpp.
#include "nats/metrics.hpp"

#include <fmt/format.h>

#include <initializer_list>
#include <vector>

#include "tools/common/prometheus_text.hpp"

namespace shmbus::nats {

using tools::MetricFamily;
using tools::prometheus_label;

namespace {

constexpr const char* kCounter = "counter";
constexpr const char* kGauge = "gauge";

// One family and its one value.
struct Metric {
  const char* name;
  const char* type;
  const char* help;
  std::uint64_t value;
};

// The families in the order given, each sampled once under `labels`.
std::string render(const std::string& labels, std::initializer_list<Metric> metrics) {
  std::vector<MetricFamily> families;
  families.reserve(metrics.size());
  for (const Metric& m : metrics) {
    families.push_back(MetricFamily{m.name, m.type, m.help, {}});
    families.back().sample(labels, static_cast<double>(m.value));
  }
  std::vector<const MetricFamily*> all;
  for (const MetricFamily& f : families) all.push_back(&f);
  return tools::render_families(all);
}

}  // namespace

std::string out_metrics(const OutStats& s, const OutOptions& o) {
  const std::string labels =
      fmt::format("bus=\"{}\",stream=\"{}\"", prometheus_label(o.bus), prometheus_label(o.stream));
  return render(labels, {
      {"shmbus_nats_out_connected", kGauge, "1 while connected to the NATS server", s.connected ? 1U : 0U},
      {"shmbus_nats_out_messages_published", kCounter, "Messages handed to the NATS client to publish", s.published},
      {"shmbus_nats_out_bytes_published", kCounter, "Payload bytes of those messages", s.bytes},
      {"shmbus_nats_out_messages_acknowledged", kCounter, "Publishes the stream stored (duplicates included)",
       s.acknowledged},
      {"shmbus_nats_out_duplicates", kCounter, "Publishes the stream acknowledged as duplicates", s.duplicates},
      {"shmbus_nats_out_publish_failures", kCounter, "Publishes that failed (republished after a resync)", s.failed},
      {"shmbus_nats_out_in_flight", kGauge, "Publishes not yet answered by the server", s.in_flight},
      {"shmbus_nats_out_resyncs", kCounter, "Times publishing resumed from the stream's last message", s.resyncs},
      {"shmbus_nats_out_reconnects", kCounter, "Reconnections to the NATS server", s.reconnects},
      {"shmbus_nats_out_lost_messages", kCounter, "Bus messages gone before the gateway could read them", s.lost},
      {"shmbus_nats_out_next_seq", kGauge, "Next bus sequence to publish", s.next_seq},
      {"shmbus_nats_out_largest_message_bytes", kGauge,
       "The largest message read from the bus so far, payload and the gateway's headers", s.largest},
      {"shmbus_nats_out_max_payload_bytes", kGauge,
       "The server's max_payload (a larger message stops the gateway); 0 while not connected", s.max_payload},
  });
}

std::string in_metrics(const InStats& s, const InOptions& o) {
  const std::string labels = fmt::format("bus=\"{}\",stream=\"{}\",durable=\"{}\"", prometheus_label(o.bus),
                                         prometheus_label(o.stream), prometheus_label(o.durable));
  return render(labels, {
      {"shmbus_nats_in_connected", kGauge, "1 while connected to the NATS server", s.connected ? 1U : 0U},
      {"shmbus_nats_in_messages_received", kCounter, "Messages fetched from the stream", s.received},
      {"shmbus_nats_in_messages_published", kCounter, "Messages committed to the bus", s.published},
      {"shmbus_nats_in_bytes_published", kCounter, "Payload bytes of those messages", s.bytes},
      {"shmbus_nats_in_messages_acknowledged", kCounter, "Messages covered by acknowledgements sent", s.acknowledged},
      {"shmbus_nats_in_redelivered", kCounter, "Messages fetched with a delivery count above 1", s.redelivered},
      {"shmbus_nats_in_duplicates", kCounter, "Messages below the bus's next sequence: acknowledged, skipped",
       s.skipped_duplicates},
      {"shmbus_nats_in_gap_messages", kCounter,
       "Sequences the stream never had (the bus's readers count them as lost)", s.gap},
      {"shmbus_nats_in_invalid_messages", kCounter,
       "Messages without a valid Shmbus-Seq header, or not deliveries of the durable", s.invalid},
      {"shmbus_nats_in_rewinds", kCounter, "Times the durable was recreated after a reconnect or a failed fetch",
       s.rewinds},
      {"shmbus_nats_in_reconnects", kCounter, "Reconnections to the NATS server", s.reconnects},
      {"shmbus_nats_in_pending_messages", kGauge,
       "Messages the stream held for the durable after the last one fetched (the server's count): the lag",
       s.pending},
      {"shmbus_nats_in_next_seq", kGauge, "The bus's next sequence", s.next_seq},
      {"shmbus_nats_in_largest_message_bytes", kGauge, "The largest message fetched so far, payload bytes",
       s.largest},
      {"shmbus_nats_in_max_message_bytes", kGauge,
       "The largest message the bus takes (a larger one stops the gateway)", s.max_message},
  });
}

}  // namespace shmbus::nats
