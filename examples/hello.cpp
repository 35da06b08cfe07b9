// The README's API example: create a bus, publish three messages, read them.
#include <shmbus/shmbus.hpp>

#include <cstdio>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  const std::string name = argc > 1 ? argv[1] : "hello";
  shmbus::BusOptions options;
  options.capacity = 1024;    // records in the ring (a power of two)
  options.record_size = 128;  // bytes per record, header included
  shmbus::Bus bus = shmbus::Bus::create(name, options);  // /dev/shm/shmbus.hello

  shmbus::Consumer consumer(bus);  // attach before publishing: it starts at the oldest record
  shmbus::Producer producer(bus);  // exactly one per bus
  for (std::string_view text : {"hello", "shared", "memory"}) {
    if (!producer.publish(std::as_bytes(std::span(text)))) return 1;
  }
  producer.close();  // end-of-stream, once everything published is read

  int received = 0;
  for (;;) {
    shmbus::ReadResult r = consumer.next(1s);
    if (r.status != shmbus::ReadStatus::message) break;  // end_of_stream (or timeout)
    std::printf("#%llu %.*s\n", static_cast<unsigned long long>(r.message.seq),
                static_cast<int>(r.message.payload.size()),
                reinterpret_cast<const char*>(r.message.payload.data()));
    ++received;
  }
  std::printf("received %d messages\n", received);
  shmbus::Bus::remove(name);
  return received == 3 ? 0 : 1;
}
