// shmbus — one thread at a time in a Producer's or a Consumer's calls.
// Private to the library.
//
// A Producer and a Consumer are each for one thread at a time (their
// headers say so): two threads inside one at once corrupt its private
// state, or one reads a mapping the other is tearing down. Builds with
// SHMBUS_THREAD_CHECKS (Debug and sanitizer builds) catch that at the door
// and abort with one line naming both calls, as readerwriterqueue's
// ReentrantGuard and the Disruptor's same-thread assertion do. Other builds
// compile it to nothing: the per-message path pays for it only in builds
// made to find bugs.
#pragma once

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace shmbus::detail {

// Whether the library was built with the check (for tests).
bool thread_checks_built() noexcept;

#if SHMBUS_THREAD_CHECKS
class OneThread {
 public:
  // Marks one call of `what` as inside for as long as it lives.
  class Scope {
   public:
    Scope(OneThread& guard, const char* what) noexcept : guard_(guard) {
      // acq_rel: pairs with the previous call's release below, so each call
      // sees the state the previous one left.
      if (const char* other = guard_.inside_.exchange(what, std::memory_order_acq_rel)) {
        std::fprintf(stderr, "shmbus: %s called while another thread is in %s of the same object "
                             "(each Producer and Consumer is for one thread at a time)\n", what, other);
        std::abort();
      }
    }
    ~Scope() { guard_.inside_.store(nullptr, std::memory_order_release); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OneThread& guard_;
  };

 private:
  std::atomic<const char*> inside_{nullptr};
};
#else
class OneThread {
 public:
  class Scope {
   public:
    Scope(OneThread&, const char*) noexcept {}
  };
};
#endif

}  // namespace shmbus::detail
