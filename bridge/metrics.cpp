// shmbus-bridge --metrics-listen: see metrics.hpp.
#include "bridge/metrics.hpp"

#include <fmt/format.h>

#include "tools/common/prometheus_text.hpp"

namespace shmbus::bridge {

using tools::MetricFamily;
using tools::prometheus_label;

std::string serve_metrics(const ServeStats& s, const ServeOptions& o) {
  const std::string bus = fmt::format("bus=\"{}\"", prometheus_label(o.bus));
  MetricFamily subscribers{"shmbus_bridge_subscribers", "gauge", "Subscribers being served now", {}};
  MetricFamily max_subscribers{"shmbus_bridge_max_subscribers", "gauge", "Subscribers served at most at once", {}};
  MetricFamily accepted{"shmbus_bridge_connections_accepted", "counter", "TCP connections accepted", {}};
  MetricFamily messages{"shmbus_bridge_messages_sent", "counter", "Messages queued to subscribers", {}};
  MetricFamily bytes{"shmbus_bridge_bytes_sent", "counter", "Bytes written to subscribers' sockets", {}};
  MetricFamily dropped{"shmbus_bridge_messages_dropped", "counter",
                       "Messages subscribers were told they lost (loss frames)", {}};
  MetricFamily queued{"shmbus_bridge_queued_bytes", "gauge",
                      "Bytes encoded for subscribers and not yet written to their sockets (all subscribers)", {}};
  MetricFamily closed{"shmbus_bridge_connections_closed", "counter",
                      "Connections closed, by reason: slow (lapped), idle, protocol, handshake (failed or "
                      "timed out), refused (limits), tls, peer (the subscriber left), end (end of stream)",
                      {}};
  subscribers.sample(bus, static_cast<double>(s.subscribers));
  max_subscribers.sample(bus, o.max_subscribers);
  accepted.sample(bus, static_cast<double>(s.accepted));
  messages.sample(bus, static_cast<double>(s.messages));
  bytes.sample(bus, static_cast<double>(s.bytes));
  dropped.sample(bus, static_cast<double>(s.dropped));
  queued.sample(bus, static_cast<double>(s.queued_bytes));
  const std::pair<const char*, std::uint64_t> reasons[] = {
      {"slow", s.closed_slow},         {"idle", s.closed_idle},         {"protocol", s.closed_protocol},
      {"handshake", s.closed_handshake}, {"refused", s.closed_refused}, {"tls", s.closed_tls},
      {"peer", s.closed_peer},         {"end", s.closed_end}};
  for (const auto& [reason, n] : reasons) {
    closed.sample(fmt::format("{},reason=\"{}\"", bus, reason), static_cast<double>(n));
  }
  return tools::render_families({&subscribers, &max_subscribers, &accepted, &messages, &bytes, &dropped, &queued, &closed});
}

std::string mirror_metrics(const MirrorStats& s, const MirrorOptions& o) {
  const std::string l = fmt::format("bus=\"{}\",remote_bus=\"{}\"", prometheus_label(o.bus),
                                    prometheus_label(o.remote.bus));
  MetricFamily connected{"shmbus_mirror_connected", "gauge", "1 while connected to the serving bridge", {}};
  MetricFamily connects{"shmbus_mirror_connects", "counter", "Successful handshakes with the serving bridge", {}};
  MetricFamily failures{"shmbus_mirror_connection_failures", "counter",
                        "Connection attempts or connections that failed (each is retried)", {}};
  MetricFamily messages{"shmbus_mirror_messages_received", "counter", "Messages republished on the local bus", {}};
  MetricFamily bytes{"shmbus_mirror_bytes_received", "counter", "Payload bytes of those messages", {}};
  MetricFamily gaps{"shmbus_mirror_gaps", "counter", "Sequence ranges that could not be filled", {}};
  MetricFamily lost{"shmbus_mirror_lost_messages", "counter",
                    "Sequences in those ranges (local readers count them as lost)", {}};
  MetricFamily next_seq{"shmbus_mirror_next_seq", "gauge", "The local bus's next sequence", {}};
  connected.sample(l, s.connected ? 1 : 0);
  connects.sample(l, static_cast<double>(s.connects));
  failures.sample(l, static_cast<double>(s.failures));
  messages.sample(l, static_cast<double>(s.messages));
  bytes.sample(l, static_cast<double>(s.bytes));
  gaps.sample(l, static_cast<double>(s.gaps));
  lost.sample(l, static_cast<double>(s.lost));
  next_seq.sample(l, static_cast<double>(s.next_seq));
  return tools::render_families({&connected, &connects, &failures, &messages, &bytes, &gaps, &lost, &next_seq});
}

}  // namespace shmbus::bridge
