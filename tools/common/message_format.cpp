#include "tools/common/message_format.hpp"

#include <shmbus/inspect.hpp>

#include <iterator>
#include <string_view>

namespace shmbus::tools {

namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_hex_byte(std::string& out, unsigned char c) {
  out.push_back(kHex[c >> 4]);
  out.push_back(kHex[c & 15]);
}

}  // namespace

bool valid_utf8(std::span<const std::byte> p) noexcept {
  const std::size_t n = p.size();
  std::size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(p[i]);
    std::size_t extra = 0;
    if (c < 0x80) {
      extra = 0;
    } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
      extra = 1;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
    } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
      extra = 3;
    } else {
      return false;
    }
    if (extra > n - i - 1) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(p[i + k]) & 0xC0) != 0x80) return false;
    }
    i += extra + 1;
  }
  return true;
}

void append_hex(fmt::memory_buffer& b, std::span<const std::byte> p) {
  for (std::byte x : p) {
    const auto v = static_cast<unsigned>(x);
    b.push_back(kHex[v >> 4]);
    b.push_back(kHex[v & 15]);
  }
}

void append_json_string(fmt::memory_buffer& b, std::span<const std::byte> p) {
  b.push_back('"');
  for (std::byte x : p) {
    const auto c = static_cast<unsigned char>(x);
    switch (c) {
      case '"': b.append(std::string_view("\\\"")); break;
      case '\\': b.append(std::string_view("\\\\")); break;
      case '\n': b.append(std::string_view("\\n")); break;
      case '\r': b.append(std::string_view("\\r")); break;
      case '\t': b.append(std::string_view("\\t")); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          fmt::format_to(std::back_inserter(b), "\\u{:04x}", c);
        } else {
          b.push_back(static_cast<char>(c));
        }
    }
  }
  b.push_back('"');
}

void append_message_json(fmt::memory_buffer& b, std::uint64_t seq, std::uint64_t timestamp_ns,
                         std::span<const std::byte> payload, std::uint32_t records) {
  fmt::format_to(std::back_inserter(b), "{{\"seq\":{},\"timestamp_ns\":{},\"length\":{},", seq,
                 timestamp_ns, payload.size());
  if (records > 1) fmt::format_to(std::back_inserter(b), "\"records\":{},", records);
  if (valid_utf8(payload)) {
    b.append(std::string_view("\"encoding\":\"utf8\",\"payload\":"));
    append_json_string(b, payload);
  } else {
    b.append(std::string_view("\"encoding\":\"hex\",\"payload\":\""));
    append_hex(b, payload);
    b.push_back('"');
  }
  b.push_back('}');
}

void append_escaped_text(fmt::memory_buffer& b, std::span<const std::byte> p) {
  const char* data = reinterpret_cast<const char*>(p.data());
  std::size_t plain = 0;  // start of the run of bytes written as they are
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    if ((c >= 0x20 && c != 0x7f && c != '\\') || c == '\t') continue;
    b.append(data + plain, data + i);
    plain = i + 1;
    switch (c) {
      case '\\': b.append(std::string_view("\\\\")); break;
      case '\n': b.append(std::string_view("\\n")); break;
      case '\r': b.append(std::string_view("\\r")); break;
      case 0x1b: b.append(std::string_view("\\e")); break;
      default:
        b.append(std::string_view("\\x"));
        b.push_back(kHex[c >> 4]);
        b.push_back(kHex[c & 15]);
    }
  }
  b.append(data + plain, data + p.size());
}

// One escaping for every program and the library's warnings (inspect.hpp).
std::string escape_ascii(std::span<const std::byte> p) { return shmbus::escape_ascii(p); }

std::string escape_ascii(std::string_view text) {
  return escape_ascii(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string hex_spaced(std::span<const std::byte> p) {
  std::string out;
  out.reserve(p.size() * 3);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i) out.push_back(' ');
    append_hex_byte(out, static_cast<unsigned char>(p[i]));
  }
  return out;
}

}  // namespace shmbus::tools
