// Writes the seed corpora of the fuzz targets from real buses in typical
// states, so mutations start from segments the library accepts:
//   shmbus-fuzz-make-seeds DIR     (writes DIR/segment/* and DIR/record/*)
// The checked-in corpus (tests/fuzz/corpus) was made with it; ctest also
// replays a fresh one, so a layout change never leaves the fuzz replay
// testing nothing but version mismatches.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "layout.hpp"
#include "shmbus/shmbus.hpp"

namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<char>;

Bytes read_segment(const std::string& name) {
  std::ifstream in(shmbus::fuzz::segment_path(name), std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// fuzz_record's input: policy | head | oldest | the span marks and the ring
// of a capacity-8, 64-byte-record bus.
Bytes record_input(const Bytes& seg, shmbus::Policy policy) {
  const auto* h = reinterpret_cast<const shmbus::layout::SegmentHeader*>(seg.data());
  Bytes out(17);
  out[0] = policy == shmbus::Policy::overwrite ? 1 : 0;
  const std::uint64_t head = h->head.load(), oldest = h->oldest.load();
  std::memcpy(out.data() + 1, &head, 8);
  std::memcpy(out.data() + 9, &oldest, 8);
  const std::size_t marks = shmbus::layout::span_table_offset_for(h->max_readers);
  out.insert(out.end(), seg.begin() + static_cast<std::ptrdiff_t>(marks),
             seg.begin() + static_cast<std::ptrdiff_t>(marks + 8 * h->capacity));
  const std::size_t log = shmbus::layout::log_offset_for(h->max_readers, h->capacity);
  out.insert(out.end(), seg.begin() + static_cast<std::ptrdiff_t>(log), seg.end());
  return out;
}

struct Case {
  const char* name;
  shmbus::Policy policy;
  int published;
  bool reader;
  bool close;
  bool open_claim;
  std::size_t span_every;  // every n-th message spans records (0: none)
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: shmbus-fuzz-make-seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  ::mkdir(dir.c_str(), 0755);
  ::mkdir((dir + "/segment").c_str(), 0755);
  ::mkdir((dir + "/record").c_str(), 0755);
  const Case cases[] = {
      {"block-empty", shmbus::Policy::block, 0, false, false, false, 0},
      {"block-reader", shmbus::Policy::block, 5, true, false, false, 0},
      {"block-wrapped-closed", shmbus::Policy::block, 20, true, true, false, 0},
      {"overwrite-lapped", shmbus::Policy::overwrite, 21, true, false, false, 0},
      {"overwrite-busy", shmbus::Policy::overwrite, 11, true, false, true, 0},
      {"block-spans", shmbus::Policy::block, 9, true, true, false, 2},
      {"overwrite-spans-lapped", shmbus::Policy::overwrite, 17, true, false, false, 3},
  };
  try {
    for (const Case& c : cases) {
      const std::string name = shmbus::fuzz::own_name(c.name);
      shmbus::Bus::remove(name);
      shmbus::BusOptions o;
      o.capacity = 8;
      o.record_size = 64;
      o.max_readers = 2;
      o.policy = c.policy;
      shmbus::Bus bus = shmbus::Bus::create(name, o);
      std::optional<shmbus::Consumer> reader;
      if (c.reader) reader.emplace(bus);
      {
        shmbus::Producer p(bus);
        for (int i = 0; i < c.published; ++i) {
          std::string text = "message " + std::to_string(i) + std::string(static_cast<std::size_t>(i % 30), '.');
          // A message of two to four records (the ring takes four at most).
          if (c.span_every != 0 && i % c.span_every == 0) text += std::string(40 + static_cast<std::size_t>(i * 29 % 150), '#');
          if (c.policy == shmbus::Policy::block && (i % 8 == 0 || c.span_every != 0) && reader) {
            while (reader->next(0ns).status == shmbus::ReadStatus::message) {
            }
          }
          if (!p.publish(std::as_bytes(std::span(text)), 1s)) throw std::runtime_error("publish");
        }
        if (c.open_claim) {
          shmbus::Claim cl = p.claim(16);
          if (cl) std::memset(cl.data.data(), 'x', 16);
        }
        if (c.close)
          p.close();
        else
          p.detach();
      }
      const Bytes seg = read_segment(name);
      write_file(dir + "/segment/" + c.name, seg);
      write_file(dir + "/record/" + c.name, record_input(seg, c.policy));
      reader.reset();
      shmbus::Bus::remove(name);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shmbus-fuzz-make-seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
