#include "tools/common/created_bus.hpp"

#include <shmbus/errors.hpp>
#include <shmbus/inspect.hpp>

#include <exception>
#include <utility>

namespace shmbus::tools {

OpenedBus open_or_create_bus(std::string_view name, const BusOptions& options) {
  try {
    return {Bus::create(name, options), true};
  } catch (const Error& e) {
    if (e.errc() != Errc::already_exists) throw;
  }
  // Joined with open_or_create's own checks (trust, mode). Should the bus
  // vanish in between and this call make it after all, created stays false:
  // the guard then keeps a bus it might have removed, never the reverse.
  return {Bus::open_or_create(name, options), false};
}

CreatedBusGuard::CreatedBusGuard(const OpenedBus& opened, Trust trust)
    : name_(opened.bus.name()),
      created_(opened.created),
      creation_time_ns_(opened.bus.info().creation_time_ns),
      trust_(std::move(trust)),
      exceptions_(std::uncaught_exceptions()) {}

CreatedBusGuard::~CreatedBusGuard() {
  if (!created_ || std::uncaught_exceptions() <= exceptions_) return;
  try {
    const Snapshot s = Inspector::open(name_, trust_).snapshot();
    if (s.info.creation_time_ns != creation_time_ns_) return;  // removed and made again by another
    if (s.head != 0) return;
    if (s.producer.attached && s.producer.liveness == Liveness::alive) return;
    for (const ReaderView& r : s.readers) {
      if (r.liveness == Liveness::alive) return;
    }
    // A reader attaching between the snapshot and the unlink is told its
    // stream ended (removed) instead of waiting on a segment nobody can find.
    remove_in_use(name_, trust_);
  } catch (...) {
    // Left as it is: the failure being reported is the one that matters.
  }
}

}  // namespace shmbus::tools
