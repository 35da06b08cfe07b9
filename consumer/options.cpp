#include "consumer/options.hpp"

#include <charconv>

namespace shmbus::consumer {

std::optional<From> parse_from(std::string_view text) {
  if (text == "earliest") return From{From::Kind::earliest};
  if (text == "latest") return From{From::Kind::latest};
  if (text == "resume") return From{From::Kind::resume};
  From f{From::Kind::sequence};
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), f.seq);
  if (ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return f;
}

}  // namespace shmbus::consumer
