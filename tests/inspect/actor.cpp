// A producer or consumer process for the inspector tests to look at.
//
//   actor produce BUS STOPFILE PAUSE_US
//       publishes "msg N" (waiting for space as long as it takes) until
//       STOPFILE exists, pausing PAUSE_US microseconds between messages;
//       then closes the bus.
//   actor consume BUS NAME STOPFILE READYFILE
//       reads every message until STOPFILE exists.
//   actor stall BUS NAME READYFILE
//       attaches and never reads: its cursor holds a `block` producer back.
//
// Consumers write their reader slot number to READYFILE once attached.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <shmbus/shmbus.hpp>

namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Written then renamed, so the test never reads a half-written file.
void write_ready(const std::string& path, std::uint32_t slot) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(3);
  std::fprintf(f, "%u\n", slot);
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::exit(3);
}

int produce(const std::string& bus, const std::string& stop, long pause_us) {
  shmbus::Producer p(shmbus::Bus::open(bus));
  for (std::uint64_t i = 0; !exists(stop); ++i) {
    const std::string msg = "msg " + std::to_string(i);
    auto r = p.publish(std::as_bytes(std::span<const char>(msg.data(), msg.size())));
    if (!r) return 4;
    if (pause_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  p.close();
  return 0;
}

int consume(const std::string& bus, const std::string& name, const std::string& stop,
            const std::string& ready) {
  shmbus::ConsumerOptions o;
  o.name = name;
  shmbus::Consumer c(shmbus::Bus::open(bus), o);
  write_ready(ready, c.slot());
  while (!exists(stop)) {
    auto r = c.next(std::chrono::milliseconds(20));
    if (r.status == shmbus::ReadStatus::end_of_stream) break;
  }
  return 0;
}

int stall(const std::string& bus, const std::string& name, const std::string& ready) {
  shmbus::ConsumerOptions o;
  o.name = name;
  shmbus::Consumer c(shmbus::Bus::open(bus), o);
  write_ready(ready, c.slot());
  for (;;) ::pause();  // until SIGKILL
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "produce" && argc == 5) return produce(argv[2], argv[3], std::atol(argv[4]));
    if (mode == "consume" && argc == 6) return consume(argv[2], argv[3], argv[4], argv[5]);
    if (mode == "stall" && argc == 5) return stall(argv[2], argv[3], argv[4]);
    std::fputs("usage: actor produce BUS STOPFILE PAUSE_US | consume BUS NAME STOPFILE READYFILE"
               " | stall BUS NAME READYFILE\n",
               stderr);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "actor: %s\n", e.what());
    return 1;
  }
}
