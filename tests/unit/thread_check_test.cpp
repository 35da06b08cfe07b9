// Builds made to find bugs (Debug, sanitizers) stop a second thread at the
// door of a Producer or Consumer call another thread is inside, with one
// line naming both, instead of letting the two corrupt it.
#include "thread_check.hpp"

#include <unistd.h>

#include <sys/syscall.h>

#include <atomic>
#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "shmbus/inspect.hpp"
#include "test_support.hpp"

namespace shmbus::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kNotBuilt = "the one-thread check is compiled into Debug and sanitizer builds only";

// The death test's child runs the test again under its own pid, so its bus
// is not the parent's ScopedName: the child removes it as it aborts.
std::string g_child_segment;
void remove_segment_on_abort(const std::string& name) {
  g_child_segment = "/dev/shm/shmbus." + name;
  std::signal(SIGABRT, [](int) {
    ::unlink(g_child_segment.c_str());  // async-signal-safe; the string was built before
    std::signal(SIGABRT, SIG_DFL);
    std::raise(SIGABRT);
  });
}

// The state letter of a thread of this process ('R', 'S' asleep...).
char thread_state(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const std::size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

TEST(OneThreadCheck, SecondThreadInAConsumerCallAborts) {
  if (!detail::thread_checks_built()) GTEST_SKIP() << kNotBuilt;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedName name("onethread");
  EXPECT_DEATH(
      {
        remove_segment_on_abort(name.str());
        Bus bus = Bus::create(name, BusOptions{});
        Consumer c(bus);
        std::thread waiter([&] { (void)c.next(forever); });
        // Inside next(), asleep on the empty bus: the inspector says so.
        Inspector insp = Inspector::open(name);
        while (insp.snapshot().readers.empty() || !insp.snapshot().readers[0].sleeping) std::this_thread::yield();
        (void)c.next(0ns);
        waiter.detach();
      },
      "Consumer::next called while another thread is in Consumer::next");
}

TEST(OneThreadCheck, ClosingAProducerWhileAnotherThreadPublishesAborts) {
  if (!detail::thread_checks_built()) GTEST_SKIP() << kNotBuilt;
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedName name("onethread-p");
  EXPECT_DEATH(
      {
        remove_segment_on_abort(name.str());
        BusOptions o;
        o.capacity = 64;
        Bus bus = Bus::create(name, o);
        Consumer holder(bus);  // never reads: the producer waits for space
        Producer p(bus);
        while (p.publish(bytes("x"), 0ns)) {
        }
        // The publish that timed out leaves the wait marked, so the inspector
        // cannot tell whether the thread is inside publish() yet: its own
        // state can. Nothing else in that thread sleeps: once it is asleep, it
        // sleeps on the full ring, inside publish().
        std::atomic<pid_t> tid{0};
        std::thread publisher([&] {
          tid.store(static_cast<pid_t>(::syscall(SYS_gettid)));
          (void)p.publish(bytes("y"), forever);
        });
        while (tid.load() == 0 || thread_state(tid.load()) != 'S') std::this_thread::yield();
        p.close();
        publisher.detach();
      },
      "Producer::close called while another thread is in Producer::publish");
}

TEST(OneThreadCheck, CallsFromOneThreadAfterAnotherArePermitted) {
  ScopedName name("onethread-seq");
  Bus bus = Bus::create(name, BusOptions{});
  Consumer c(bus);
  Producer p(bus);
  ASSERT_TRUE(p.publish(bytes("a")));
  std::thread([&] {
    ReadResult r = c.next(1s);
    EXPECT_EQ(r.status, ReadStatus::message);
    ASSERT_TRUE(p.publish(bytes("b")));
  }).join();
  EXPECT_EQ(c.next(1s).status, ReadStatus::message);
}

}  // namespace
}  // namespace shmbus::test
