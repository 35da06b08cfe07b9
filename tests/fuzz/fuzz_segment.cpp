// Fuzz target: arbitrary bytes as a whole segment file. Every entry point
// that maps a bus by name — the inspector (snapshot, check, record), open,
// a consumer attaching and reading, a producer taking the role and
// publishing, gc — must refuse it with shmbus::Error or work within it:
// never read or write outside the mapping, never hang, never hand out a
// message longer than a record's payload.
//
// Run it on a private tmpfs (tests/fuzz/run.sh does): an input may claim a
// segment far larger than itself.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_common.hpp"
#include "layout.hpp"
#include "shmbus/shmbus.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono_literals;
  static const std::string name = shmbus::fuzz::own_name("segment");
  shmbus::fuzz::write_segment(name, data, size);
  // Inspector::open waits 200 ms for a creator that may still be writing a
  // short or version-0 segment; Bus::open below, told not to wait, checks
  // the same cases at once. Skip them here, or most of the time goes there.
  std::uint32_t version = 0;
  if (size >= 12) std::memcpy(&version, data + 8, 4);
  if (size >= sizeof(shmbus::layout::SegmentHeader) && version != 0) try {
    const shmbus::Inspector insp = shmbus::Inspector::open(name);
    const shmbus::Snapshot s = insp.snapshot();
    (void)insp.check();
    for (std::uint64_t k = 1; k <= 4 && k <= s.head; ++k) {
      if (const auto r = insp.record(s.head - k); r && r->payload.size() > insp.info().max_message)
        shmbus::fuzz::violated("Inspector::record returned more than the bus's max message");
    }
    (void)insp.record(s.oldest);
  } catch (const shmbus::Error&) {
  }
  try {
    shmbus::Bus bus = shmbus::Bus::open(name, std::chrono::milliseconds(0));
    const std::size_t max = bus.info().max_message;
    try {
      shmbus::ConsumerOptions co;
      co.start = shmbus::Start::earliest;
      shmbus::Consumer c(bus, co);
      for (int i = 0; i < 8; ++i) {
        const shmbus::ReadResult r = c.next(0ns);
        if (r.status == shmbus::ReadStatus::message && r.message.payload.size() > max)
          shmbus::fuzz::violated("Consumer::next returned more than the bus's max message");
        if (r.status == shmbus::ReadStatus::timeout || r.status == shmbus::ReadStatus::end_of_stream) break;
      }
    } catch (const shmbus::Error&) {
    }
    try {
      shmbus::Producer p(bus);
      const char text[] = "fuzz";
      (void)p.publish(std::as_bytes(std::span(text)), 0ns);
    } catch (const shmbus::Error&) {
    }
    (void)shmbus::reclaim_dead_readers(name);
  } catch (const shmbus::Error&) {
  }
  ::unlink(shmbus::fuzz::segment_path(name).c_str());
  return 0;
}
