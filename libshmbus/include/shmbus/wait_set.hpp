// shmbus — waiting on many consumers from one thread.
//
//   shmbus::WaitSet set;
//   set.add(quotes);  set.add(trades);  set.add(news);
//   for (;;) {
//     for (shmbus::Consumer* c : set.wait()) {      // sleeps until one has news
//       while (true) {
//         shmbus::ReadResult r = c->next(0ns);       // drain it without waiting
//         if (r.status == shmbus::ReadStatus::timeout) break;
//         ...
//       }
//     }
//   }
//
// Or with an event loop (epoll, poll, asyncio, libuv): watch fd() for
// readability, and when it fires call wait(0ns) and read what it returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>

#include "shmbus/consumer.hpp"
#include "shmbus/wait.hpp"

namespace shmbus {

class WaitSet {
 public:
  // How many consumers one set holds (one futex vector of the kernel's, with
  // a word of the set's own).
  static constexpr std::size_t kMaxMembers = 127;

  // `wait`: how wait() waits (spin, yield, then sleep), as a consumer does.
  explicit WaitSet(const WaitOptions& wait = {});
  ~WaitSet();
  WaitSet(const WaitSet&) = delete;
  WaitSet& operator=(const WaitSet&) = delete;

  // A consumer joins the set (Errc::invalid_options if it is a member
  // already or the set is full). While it is a member it must stay alive
  // and where it is (not moved from), and be read from the thread that
  // calls wait(): remove() it before destroying it. An empty set's wait()
  // returns at once.
  void add(Consumer& consumer);
  // Leaves the set (nothing if it is not a member). Returns once the set's
  // own thread (see fd()) no longer looks at it.
  void remove(Consumer& consumer) noexcept;
  std::size_t size() const noexcept;

  // Waits up to `timeout` (zero: just look) until at least one member has
  // news — a message, a loss, a corrupt record, the end of its stream, or
  // its slot taken — and returns every member that has, in the order they
  // were added; empty after a timeout. A member is returned until next()
  // (or read_batch()) has taken its news. The span lasts until the next call.
  std::span<Consumer* const> wait(std::chrono::nanoseconds timeout = forever);

  // A descriptor for epoll, poll or select: readable once a member may have
  // news. Then call wait(0ns): while it returns members the descriptor stays
  // readable; a call that returns none makes it unreadable until news
  // comes. Made on the first call, with a thread of the set's own that
  // sleeps on the members' futex words while the caller's loop sleeps on
  // the descriptor: a message costs its producer a wake-up only then.
  // Owned by the set (do not close it).
  int fd();

  // Makes fd() readable now (once it exists), from any thread: wakes a loop
  // that watches it, whose wait(0ns) then says what there is.
  void notify() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shmbus
