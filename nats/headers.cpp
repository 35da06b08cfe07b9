#include "nats/headers.hpp"

#include <array>
#include <charconv>
#include <cstring>

namespace shmbus::nats {

std::string bus_identity(std::string_view name, std::uint64_t creation_time_ns) {
  std::string s(name);
  s.push_back('@');
  s += std::to_string(creation_time_ns);
  return s;
}

std::optional<std::uint64_t> parse_seq(std::string_view v) noexcept {
  if (v.empty() || v.size() > 20) return std::nullopt;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::uint64_t out = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc{} || p != v.data() + v.size()) return std::nullopt;
  return out;
}

std::optional<std::uint64_t> parse_seq(const char* value) noexcept {
  if (value == nullptr) return std::nullopt;
  return parse_seq(std::string_view(value, ::strnlen(value, 32)));
}

std::size_t format_u64(char* out, std::uint64_t v) noexcept {
  const auto [p, ec] = std::to_chars(out, out + 20, v);
  (void)ec;  // 20 digits always fit a u64
  *p = '\0';
  return static_cast<std::size_t>(p - out);
}

std::optional<AckInfo> parse_ack_subject(std::string_view reply) noexcept {
  // Split on '.', at most 12 tokens.
  std::array<std::string_view, 12> tok{};
  std::size_t n = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= reply.size(); ++i) {
    if (i == reply.size() || reply[i] == '.') {
      if (n == tok.size()) return std::nullopt;
      tok[n++] = reply.substr(start, i - start);
      start = i + 1;
    }
  }
  if (n < 9 || tok[0] != "$JS" || tok[1] != "ACK") return std::nullopt;
  // v1: $JS.ACK.stream.consumer.delivered.sseq.cseq.time.pending (9 tokens)
  // v2: $JS.ACK.domain.hash.stream.consumer.delivered.sseq.cseq.time.pending[.token] (11-12)
  std::size_t base = 0;
  if (n == 9) {
    base = 4;
  } else if (n >= 11) {
    base = 6;
  } else {
    return std::nullopt;
  }
  const auto delivered = parse_seq(tok[base]);
  const auto sseq = parse_seq(tok[base + 1]);
  const auto pending = parse_seq(tok[base + 4]);
  if (!delivered || !sseq || !pending) return std::nullopt;
  if (tok[base - 2].empty() || tok[base - 1].empty()) return std::nullopt;
  return AckInfo{*delivered, *sseq, *pending, tok[base - 2], tok[base - 1]};
}

std::string default_subject(std::string_view bus) { return "shmbus." + std::string(bus); }

}  // namespace shmbus::nats
