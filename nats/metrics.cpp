// shmbus-nats --metrics-listen: see metrics.hpp.
#include "nats/metrics.hpp"

#include <fmt/format.h>

#include <vector>

#include "tools/common/prometheus_text.hpp"

namespace shmbus::nats {

using tools::MetricFamily;
using tools::prometheus_label;

namespace {

// One family per value, all with the same labels.
struct Exposition {
  std::string labels;
  std::vector<MetricFamily> families;

  void add(const char* name, const char* type, const char* help, double value) {
    families.push_back(MetricFamily{name, type, help, {}});
    families.back().sample(labels, value);
  }
  std::string render() const {
    std::vector<const MetricFamily*> all;
    for (const MetricFamily& f : families) all.push_back(&f);
    return tools::render_families(all);
  }
};

double d(std::uint64_t v) { return static_cast<double>(v); }

}  // namespace

std::string out_metrics(const OutStats& s, const OutOptions& o) {
  Exposition e{fmt::format("bus=\"{}\",stream=\"{}\"", prometheus_label(o.bus), prometheus_label(o.stream)), {}};
  e.add("shmbus_nats_out_connected", "gauge", "1 while connected to the NATS server", s.connected ? 1 : 0);
  e.add("shmbus_nats_out_messages_published", "counter", "Messages handed to the NATS client to publish",
        d(s.published));
  e.add("shmbus_nats_out_bytes_published", "counter", "Payload bytes of those messages", d(s.bytes));
  e.add("shmbus_nats_out_messages_acknowledged", "counter", "Publishes the stream stored (duplicates included)",
        d(s.acknowledged));
  e.add("shmbus_nats_out_duplicates", "counter", "Publishes the stream acknowledged as duplicates",
        d(s.duplicates));
  e.add("shmbus_nats_out_publish_failures", "counter",
        "Publishes that failed (republished after a resync)", d(s.failed));
  e.add("shmbus_nats_out_in_flight", "gauge", "Publishes not yet answered by the server", d(s.in_flight));
  e.add("shmbus_nats_out_resyncs", "counter", "Times publishing resumed from the stream's last message",
        d(s.resyncs));
  e.add("shmbus_nats_out_reconnects", "counter", "Reconnections to the NATS server", d(s.reconnects));
  e.add("shmbus_nats_out_lost_messages", "counter", "Bus messages gone before the gateway could read them",
        d(s.lost));
  e.add("shmbus_nats_out_next_seq", "gauge", "Next bus sequence to publish", d(s.next_seq));
  e.add("shmbus_nats_out_largest_message_bytes", "gauge",
        "The largest message read from the bus so far, payload and the gateway's headers", d(s.largest));
  e.add("shmbus_nats_out_max_payload_bytes", "gauge",
        "The server's max_payload (a larger message stops the gateway); 0 while not connected",
        d(s.max_payload));
  return e.render();
}

std::string in_metrics(const InStats& s, const InOptions& o) {
  Exposition e{fmt::format("bus=\"{}\",stream=\"{}\",durable=\"{}\"", prometheus_label(o.bus),
                           prometheus_label(o.stream), prometheus_label(o.durable)),
               {}};
  e.add("shmbus_nats_in_connected", "gauge", "1 while connected to the NATS server", s.connected ? 1 : 0);
  e.add("shmbus_nats_in_messages_received", "counter", "Messages fetched from the stream", d(s.received));
  e.add("shmbus_nats_in_messages_published", "counter", "Messages committed to the bus", d(s.published));
  e.add("shmbus_nats_in_bytes_published", "counter", "Payload bytes of those messages", d(s.bytes));
  e.add("shmbus_nats_in_messages_acknowledged", "counter", "Messages covered by acknowledgements sent",
        d(s.acknowledged));
  e.add("shmbus_nats_in_redelivered", "counter", "Messages fetched with a delivery count above 1",
        d(s.redelivered));
  e.add("shmbus_nats_in_duplicates", "counter", "Messages below the bus's next sequence: acknowledged, skipped",
        d(s.skipped_duplicates));
  e.add("shmbus_nats_in_gap_messages", "counter",
        "Sequences the stream never had (the bus's readers count them as lost)", d(s.gap));
  e.add("shmbus_nats_in_invalid_messages", "counter",
        "Messages without a valid Shmbus-Seq header, or not deliveries of the durable", d(s.invalid));
  e.add("shmbus_nats_in_rewinds", "counter", "Times the durable was recreated after a reconnect or a failed fetch",
        d(s.rewinds));
  e.add("shmbus_nats_in_reconnects", "counter", "Reconnections to the NATS server", d(s.reconnects));
  e.add("shmbus_nats_in_pending_messages", "gauge",
        "Messages the stream held for the durable after the last one fetched (the server's count): the lag",
        d(s.pending));
  e.add("shmbus_nats_in_next_seq", "gauge", "The bus's next sequence", d(s.next_seq));
  e.add("shmbus_nats_in_largest_message_bytes", "gauge", "The largest message fetched so far, payload bytes",
        d(s.largest));
  e.add("shmbus_nats_in_max_message_bytes", "gauge", "The largest message the bus takes (a larger one stops the "
        "gateway)", d(s.max_message));
  return e.render();
}

}  // namespace shmbus::nats
