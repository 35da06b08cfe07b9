// One thread reads many buses: a WaitSet sleeps until any of them has news.
// Three producer threads stand in for three producer processes.
//
//   wait_set NAME-PREFIX
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <shmbus/shmbus.hpp>

using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const std::string prefix = argc > 1 ? argv[1] : "wait-set-example";
  constexpr int kBuses = 3;
  constexpr std::uint64_t kPerBus = 100'000;
  std::vector<shmbus::Bus> buses;
  std::vector<shmbus::Consumer> consumers;
  for (int i = 0; i < kBuses; ++i) {
    shmbus::BusOptions o;
    o.capacity = 1024;
    o.record_size = 64;
    buses.push_back(shmbus::Bus::create(prefix + "-" + std::to_string(i), o));
    consumers.emplace_back(buses.back());
  }
  shmbus::WaitSet set;
  for (shmbus::Consumer& c : consumers) set.add(c);

  std::vector<std::thread> producers;
  for (int i = 0; i < kBuses; ++i)
    producers.emplace_back([&, i] {
      shmbus::Producer p(buses[i]);
      for (std::uint64_t n = 0; n < kPerBus; ++n) (void)p.publish(std::as_bytes(std::span(&n, 1)));
    });  // leaving closes the stream

  std::vector<std::uint64_t> received(kBuses, 0);
  int open = kBuses;
  bool in_order = true;
  while (open > 0) {
    for (shmbus::Consumer* c : set.wait()) {
      const auto i = static_cast<std::size_t>(c - consumers.data());
      for (;;) {
        const shmbus::ReadResult r = c->next(0ns);  // drain it, never wait
        if (r.status == shmbus::ReadStatus::message) {
          std::uint64_t n;
          std::memcpy(&n, r.message.payload.data(), sizeof n);
          in_order = in_order && n == received[i];
          ++received[i];
        } else {
          if (r.status == shmbus::ReadStatus::end_of_stream) {
            set.remove(*c);
            --open;
          }
          break;
        }
      }
    }
  }
  for (std::thread& t : producers) t.join();
  for (const shmbus::Bus& b : buses) shmbus::Bus::remove(b.name());
  std::printf("received %llu, %llu and %llu messages from %d buses on one thread%s\n",
              static_cast<unsigned long long>(received[0]), static_cast<unsigned long long>(received[1]),
              static_cast<unsigned long long>(received[2]), kBuses, in_order ? ", each in order" : ", OUT OF ORDER");
  return in_order ? 0 : 1;
}
