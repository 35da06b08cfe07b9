#include "shmbus/bus.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "segment.hpp"

namespace shmbus {

const char* to_string(Policy p) noexcept {
  switch (p) {
    case Policy::block: return "block";
    case Policy::overwrite: return "overwrite";
  }
  return "unknown";
}

std::uint32_t max_payload_for(std::uint32_t record_size) noexcept {
  return record_size > layout::kRecordHeaderSize ? record_size - layout::kRecordHeaderSize : 0;
}

std::uint64_t default_capacity_for(std::uint32_t record_size) noexcept {
  if (record_size == 0) return default_min_capacity;
  // The power of two whose ring is nearest default_ring_bytes, by ratio:
  // fit records make a ring of at most default_ring_bytes, 2 * fit one
  // above it; the larger is nearer when 2 * (fit * size)^2 < ring^2.
  // Both squares stay below 2^45: fit * size <= default_ring_bytes = 2^22.
  std::uint64_t fit = std::bit_floor(std::max<std::uint64_t>(default_ring_bytes / record_size, 1));
  const std::uint64_t below = fit * record_size;
  if (below <= default_ring_bytes && 2 * below * below < default_ring_bytes * default_ring_bytes) fit *= 2;
  return std::max(fit, default_min_capacity);
}

std::uint32_t record_size_for(std::uint32_t payload) noexcept {
  if (payload > max_record_size - layout::kRecordHeaderSize) return 0;
  const std::uint32_t r = (layout::kRecordHeaderSize + payload + layout::kCacheLine - 1) / layout::kCacheLine *
                          layout::kCacheLine;
  return std::max(r, layout::kMinRecordSize);
}

void validate_name(std::string_view name) {
  auto bad = [&](const std::string& why) {
    std::string shown;
    for (char c : name.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    throw Error(Errc::invalid_name, "bus '" + shown + "': invalid name: " + why);
  };
  if (name.empty()) bad("empty");
  if (name.size() > max_name_length)
    bad(std::to_string(name.size()) + " characters, at most " + std::to_string(max_name_length));
  if (name.find('/') != std::string_view::npos) bad("contains '/'");
  if (name.find("..") != std::string_view::npos) bad("contains '..'");
  if (name.front() == '.') bad("starts with '.'");
  if (name.front() == '-') bad("starts with '-' (it would read as an option)");
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "character 0x%02x is not one of A-Z a-z 0-9 . _ -",
                    static_cast<unsigned char>(c));
      bad(buf);
    }
  }
}

std::string segment_path(std::string_view name, std::string_view dir) {
  return detail::path_in(detail::absolute_dir(dir), name);
}

Bus::Bus(std::shared_ptr<detail::Segment> s) : segment_(std::move(s)) {}

Bus Bus::create(std::string_view name, const BusOptions& options) {
  return Bus(detail::Segment::create(name, options));
}

Bus Bus::open(std::string_view name, std::chrono::milliseconds ready_timeout) {
  return open(name, OpenOptions{ready_timeout, {}});
}

Bus Bus::open(std::string_view name, const OpenOptions& options) {
  return Bus(detail::Segment::open(name, detail::Segment::Access::read_write, options.trust, std::nullopt, options.dir));
}

namespace {

// "block 1024 x 64 B, 16 reader slots"
std::string shape(Policy p, std::uint64_t capacity, std::uint32_t record_size, std::uint32_t readers) {
  return std::string(to_string(p)) + " " + std::to_string(capacity) + " x " + std::to_string(record_size) + " B, " +
         std::to_string(readers) + " reader slots";
}

}  // namespace

Bus Bus::open_or_create(std::string_view name, const BusOptions& options) {
  for (int attempt = 0;; ++attempt) {
    try {
      return create(name, options);
    } catch (const Error& e) {
      if (e.errc() != Errc::already_exists) throw;
    }
    std::optional<Bus> bus;
    try {
      // Never join a foreign segment, nor one that grants more than was asked.
      bus.emplace(Bus(
          detail::Segment::open(name, detail::Segment::Access::read_write, options.trust, options.mode, options.dir)));
    } catch (const Error& e) {
      // Removed between our create and open: try again, a few times.
      if (e.errc() != Errc::not_found || attempt >= 8) throw;
      continue;
    }
    const BusInfo& i = bus->info();
    const std::uint64_t capacity =
        options.capacity != 0 ? options.capacity : default_capacity_for(options.record_size);
    if (options.existing == Existing::same &&
        (i.policy != options.policy || i.capacity != capacity || i.record_size != options.record_size ||
         i.max_readers != options.max_readers)) {
      throw Error(Errc::options_differ,
                  "bus '" + std::string(name) + "': exists as " +
                      shape(i.policy, i.capacity, i.record_size, i.max_readers) + ", not " +
                      shape(options.policy, capacity, options.record_size, options.max_readers) +
                      " as asked (open it as it is instead, or remove it first)");
    }
    return std::move(*bus);
  }
}

bool Bus::remove(std::string_view name, std::string_view dir) {
  validate_name(name);
  const std::string path = segment_path(name, dir);
  if (::unlink(path.c_str()) == 0) return true;
  const int err = errno;
  if (err == ENOENT || err == ENOTDIR) {
    detail::resolve_dir(dir, name);  // a missing or unusable directory says so
    return false;
  }
  throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system,
              "bus '" + std::string(name) + "': cannot remove " + path + ": " + std::strerror(err) +
                  (err == EACCES || err == EPERM ? " (only its owner or root may)" : ""));
}

bool Bus::exists(std::string_view name, std::string_view dir) {
  validate_name(name);
  return ::access(segment_path(name, dir).c_str(), F_OK) == 0;
}

const BusInfo& Bus::info() const noexcept { return segment_->info(); }
const std::string& Bus::name() const noexcept { return segment_->info().name; }

std::uint64_t Bus::head() const noexcept {
  return segment_->header()->head.load(std::memory_order_acquire);
}

std::uint64_t Bus::oldest() const noexcept {
  return detail::oldest_retained(*segment_, head());
}

}  // namespace shmbus
