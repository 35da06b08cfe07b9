// shmbus tools — a bus a program creates for a run that can still fail
// before the bus carries anything. Such a failure removes the bus again, so
// a refused run leaves no /dev/shm/shmbus.NAME behind; a bus the program
// only opened is never removed.
#pragma once

#include <shmbus/bus.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace shmbus::tools {

struct OpenedBus {
  Bus bus;
  bool created = false;  // this call created the segment; false: it joined an existing one
};

// Bus::open_or_create, and whether this call is the one that created the
// bus. When another process creates it first, created is false.
OpenedBus open_or_create_bus(std::string_view name, const BusOptions& options);

// Removes the bus `opened` created when an exception leaves the scope it
// lives in and the bus is still unused: the segment under its name is the
// one created (same creation time), nothing was ever published on it, and
// no live producer or reader is attached. Anything else keeps the bus: a
// bus that was opened, one that carries messages, one a reader joined.
// Declare it before the Producer of the bus, so that the Producer is gone
// when it looks. It never throws; a bus it cannot remove stays.
class CreatedBusGuard {
 public:
  CreatedBusGuard(const OpenedBus& opened, Trust trust);
  ~CreatedBusGuard();
  CreatedBusGuard(const CreatedBusGuard&) = delete;
  CreatedBusGuard& operator=(const CreatedBusGuard&) = delete;

 private:
  std::string name_;
  bool created_;
  std::uint64_t creation_time_ns_;
  Trust trust_;
  int exceptions_;  // std::uncaught_exceptions() when made
};

}  // namespace shmbus::tools
