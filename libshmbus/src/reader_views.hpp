// shmbus — a reader slot as inspection shows it, shared by the read-only
// views (inspect.cpp) and the calls that change a bus (admin.cpp). Private
// to the library.
#pragma once

#include <cstdint>
#include <string>

#include "shmbus/inspect.hpp"
#include "segment.hpp"

namespace shmbus::detail {

// What the kernel's lock test says of a role's holder.
Liveness liveness_of(Holder h);
// Slot `i` as ReaderView has it (labels, cursor, state, liveness).
ReaderView reader_view(const Segment& seg, std::uint32_t i);
// "reader 3 'name' (pid 1234, alive)", as warnings and refusals name a reader.
std::string reader_label(const ReaderView& r);
// HH:MM:SS (UTC) of a CLOCK_REALTIME time.
std::string utc_hms(std::uint64_t realtime_ns);
// A slot is shown while it has an owner or counts for the producer.
bool in_use(const layout::ReaderSlot& r);

}  // namespace shmbus::detail
