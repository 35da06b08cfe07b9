// Uses the installed shmbus: create a bus, publish, read, remove.
#include <shmbus/shmbus.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "install-check";
  try {
    shmbus::BusOptions o;
    o.capacity = 64;
    o.record_size = 128;
    shmbus::Bus bus = shmbus::Bus::create(name, o);
    shmbus::Consumer consumer(bus);
    shmbus::Producer producer(bus);
    const std::string text = "from an installed shmbus";
    if (!producer.publish(std::as_bytes(std::span(text)))) return 1;
    shmbus::ReadResult r = consumer.next(std::chrono::seconds(1));
    const bool ok = r.status == shmbus::ReadStatus::message &&
                    std::string(reinterpret_cast<const char*>(r.message.payload.data()), r.message.payload.size()) == text;
    std::printf("%s: %s\n", name.c_str(), ok ? "message received" : "wrong message");
    shmbus::Bus::remove(name);
    return ok ? 0 : 1;
  } catch (const shmbus::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    shmbus::Bus::remove(name);
    return 1;
  }
}
