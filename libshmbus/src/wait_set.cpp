// shmbus — waiting on many consumers from one thread.
//
// wait() waits as a consumer's next() does (WaitOptions: spin, yield, then
// sleep), looking at every member: spinning, it asks each whether next()
// would have news (has_news(), exact); asleep, it arms every member's bus
// exactly as a sleeping consumer does (data_armed, slot->sleeping), looks
// once more after the heavy barrier, and sleeps on all their data words in
// one futex_waitv. A producer therefore wakes it with the wake-up it owes
// any sleeper, and makes no system call while nobody sleeps.
//
// fd(): an eventfd, and a thread of the set's own. When wait() finds no
// news it takes a Watch of every member (the words of the shared segment
// that change when news comes: the cursor's commit tag, the slot's state,
// `closed`, and the producer's role lock) and hands them to the thread, which
// sleeps on them as above and writes the eventfd when one fires. The thread
// never touches a Consumer, only those words, so the caller may go on
// reading its members meanwhile; remove() waits until the thread has let go
// of the member's words before it returns (the mapping may go next).
//
//   caller: wait(0) finds nothing -> drain eventfd, watches, armed, ++epoch, wake
//   thread: armed -> sleep on the watches (+ epoch) -> fired: armed = false, write eventfd
//
// Every change of the set (rearm, add, remove, stop) moves `epoch`, a word
// private to this process that the thread's sleep includes.
#include "shmbus/wait_set.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "consumer_watch.hpp"
#include "segment.hpp"
#include "shmbus/errors.hpp"
#include "sys.hpp"
#include "waiter.hpp"

namespace shmbus {
namespace {

using detail::ConsumerWatch;

// Forks seen by this process: a set whose thread was started before a fork
// has no thread in the child (only the forking thread survives a fork).
std::atomic<unsigned> g_forks{0};
void count_fork() noexcept { g_forks.fetch_add(1, std::memory_order_relaxed); }

void wake_private(std::atomic<std::uint32_t>* word) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

// Arms a member's bus as a consumer about to sleep does (consumer_watch.hpp):
// a consumer sleeping in next() at the same time may own the sleeping flag
// instead.
void arm(ConsumerWatch& w) noexcept { w.sleeping_mine |= detail::arm_data_sleep(w.h, w.slot); }

void disarm(ConsumerWatch& w) noexcept {
  detail::disarm_data_sleep(w.h, w.slot, w.sleeping_mine);
  w.sleeping_mine = false;
}

// One sleep on every watch's data word and on `epoch` (unless null): arms
// them, loads each word (the value the producer's wake-up changes), then
// issues the heavy barrier and calls `fired()`; if that finds nothing, sleeps
// up to `slice_ns`. Returns whether `fired()` did. Dekker with the producer:
// it stores a tag, then loads data_armed; we store data_armed, barrier, then
// load the tag (in fired()).
template <class Fired>
bool sleep_on(std::vector<ConsumerWatch>& ws, std::atomic<std::uint32_t>* epoch, std::uint32_t epoch_seen,
              std::uint64_t slice_ns, Fired&& fired) noexcept {
  std::array<std::atomic<std::uint32_t>*, WaitSet::kMaxMembers + 1> words;
  std::array<std::uint32_t, WaitSet::kMaxMembers + 1> seen;
  std::array<bool, WaitSet::kMaxMembers + 1> shared;
  std::size_t n = 0;
  for (ConsumerWatch& w : ws) {
    arm(w);
    words[n] = &w.h->data_futex;
    // Acquire: a waker's increment follows its commit (producer.cpp, wake_data_sleepers()).
    seen[n] = w.h->data_futex.load(std::memory_order_acquire);
    shared[n] = true;
    ++n;
  }
  if (epoch) {
    words[n] = epoch;
    seen[n] = epoch_seen;
    shared[n] = false;
    ++n;
  }
  const bool barrier_ok = detail::heavy_barrier();
  const bool now = fired();
  if (!now)
    detail::futex_wait_any(words.data(), seen.data(), shared.data(), n,
                           barrier_ok ? slice_ns : std::min(slice_ns, detail::kFallbackSliceNs));
  for (ConsumerWatch& w : ws) disarm(w);
  return now;
}

}  // namespace

struct WaitSet::Impl {
  WaitOptions opt;
  std::vector<Consumer*> members;
  std::vector<Consumer*> ready;
  std::vector<ConsumerWatch> mine;  // wait()'s own watches while it sleeps
  std::uint64_t next_liveness = 0;

  // fd(): the thread's side. Under `mu`: armed, stop, busy, snap_epoch, watches.
  int efd = -1;
  std::unique_ptr<std::thread> thread;
  unsigned born = 0;  // g_forks when the thread started
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<std::uint32_t> epoch{0};  // moves on every change (see the top)
  bool armed = false;                   // the thread is to watch `watches`
  bool stop = false;
  bool busy = false;                    // the thread holds a copy of watches taken at snap_epoch
  std::uint32_t snap_epoch = 0;
  std::vector<std::pair<Consumer*, ConsumerWatch>> watches;

  explicit Impl(const WaitOptions& o) : opt(o) {}

  ~Impl() {
    if (!thread) return;
    if (born != g_forks.load(std::memory_order_relaxed)) {
      // A copy in a forked child: the thread is not here to stop or join.
      (void)thread.release();
      ::close(efd);
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu);
      stop = true;
      epoch.fetch_add(1, std::memory_order_release);
    }
    wake_private(&epoch);
    thread->join();
    ::close(efd);
  }

  // Every member with news now, in `ready`.
  void collect(bool probe) {
    ready.clear();
    for (Consumer* c : members)
      if (detail::ConsumerAccess::has_news(*c, probe)) ready.push_back(c);
  }

  void signal() const noexcept {
    const std::uint64_t one = 1;
    // Non-blocking: a counter already at its limit is readable anyway.
    [[maybe_unused]] const ssize_t n = ::write(efd, &one, sizeof one);
  }

  // wait() found no news: the descriptor goes quiet, and the thread watches
  // every member from where it is now.
  void rearm() {
    std::uint64_t v;
    while (::read(efd, &v, sizeof v) > 0) {
    }
    std::lock_guard<std::mutex> l(mu);
    watches.clear();
    for (Consumer* c : members) watches.emplace_back(c, detail::ConsumerAccess::watch(*c));
    armed = true;
    // Release: the thread, woken by the change, sees the new watches (it also takes mu).
    epoch.fetch_add(1, std::memory_order_release);
    wake_private(&epoch);
    // A watch fires on a change after it was taken; news that came between
    // collect() and the watch (a lap: the tag it saw is a later one already)
    // would not change the word again for a ring. Judged here, exactly.
    for (Consumer* c : members)
      if (detail::ConsumerAccess::has_news(*c, false)) {
        signal();
        break;
      }
  }

  void run() noexcept {
    // Signals go to the application's threads, not to this one.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::vector<ConsumerWatch> ws;
    ws.reserve(kMaxMembers);
    std::uint64_t next_probe = 0;
    for (;;) {
      std::uint32_t e = 0;
      {
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
          if (stop) return;
          if (armed) break;
          e = epoch.load(std::memory_order_acquire);
          l.unlock();
          // A change after the load above makes this return at once.
          ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&epoch), FUTEX_WAIT_PRIVATE, e, nullptr, nullptr, 0);
          l.lock();
        }
        ws.clear();
        for (const auto& [c, w] : watches) ws.push_back(w);
        e = snap_epoch = epoch.load(std::memory_order_acquire);
        busy = true;
      }
      bool fired = false;
      for (;;) {
        const std::uint64_t now = detail::monotonic_ns();
        // A dead producer is noticed within a liveness period, as by a consumer.
        const bool probe = now >= next_probe;
        if (probe) next_probe = now + detail::kLivenessPeriodNs;
        auto any = [&](bool p) {
          return std::any_of(ws.begin(), ws.end(), [&](const ConsumerWatch& w) { return detail::watch_fired(w, p); });
        };
        if (any(probe)) {
          fired = true;
          break;
        }
        if (sleep_on(ws, &epoch, e, next_probe - now, [&] { return any(false); })) {
          fired = true;
          break;
        }
        if (epoch.load(std::memory_order_acquire) != e) break;  // changed: take the watches again
      }
      {
        std::lock_guard<std::mutex> l(mu);
        busy = false;
        if (fired) armed = false;
      }
      cv.notify_all();
      if (fired) signal();
    }
  }
};

WaitSet::WaitSet(const WaitOptions& wait) : impl_(std::make_unique<Impl>(wait)) {}
WaitSet::~WaitSet() = default;

void WaitSet::add(Consumer& consumer) {
  Impl& s = *impl_;
  if (std::find(s.members.begin(), s.members.end(), &consumer) != s.members.end())
    detail::fail(Errc::invalid_options, consumer.bus().name(), "this consumer is in the wait set already");
  if (s.members.size() >= kMaxMembers)
    detail::fail(Errc::invalid_options, consumer.bus().name(),
                 "a wait set holds at most " + std::to_string(kMaxMembers) + " consumers");
  s.members.push_back(&consumer);
  s.ready.reserve(s.members.size());
  if (s.efd < 0) return;
  // The thread watches it too from now on; news it has now makes the
  // descriptor readable at once.
  {
    std::lock_guard<std::mutex> l(s.mu);
    s.watches.emplace_back(&consumer, detail::ConsumerAccess::watch(consumer));
    s.epoch.fetch_add(1, std::memory_order_release);
  }
  wake_private(&s.epoch);
  if (detail::ConsumerAccess::has_news(consumer, false)) s.signal();
}

void WaitSet::remove(Consumer& consumer) noexcept {
  Impl& s = *impl_;
  const auto it = std::find(s.members.begin(), s.members.end(), &consumer);
  if (it == s.members.end()) return;
  s.members.erase(it);
  if (s.efd < 0) return;
  std::unique_lock<std::mutex> l(s.mu);
  std::erase_if(s.watches, [&](const auto& cw) { return cw.first == &consumer; });
  const std::uint32_t changed = s.epoch.fetch_add(1, std::memory_order_release) + 1;
  wake_private(&s.epoch);
  if (s.born != g_forks.load(std::memory_order_relaxed)) return;  // a forked child: no thread here
  // Until the thread holds no copy older than this change.
  s.cv.wait(l, [&] { return !s.busy || static_cast<std::int32_t>(s.snap_epoch - changed) >= 0; });
}

std::size_t WaitSet::size() const noexcept { return impl_->members.size(); }

std::span<Consumer* const> WaitSet::wait(std::chrono::nanoseconds timeout) {
  Impl& s = *impl_;
  s.ready.clear();
  if (s.members.empty()) return {};
  // What a set waits for (detail::wait_until()): a member with news.
  struct ForNews {
    Impl& s;
    std::optional<bool> look(detail::Waiter& w) {
      s.collect(w.liveness_due());
      return s.ready.empty() ? std::nullopt : std::optional<bool>(true);
    }
    bool at_deadline() const noexcept { return false; }
    bool may_spin() const noexcept { return true; }
    std::optional<bool> ready() const noexcept { return std::nullopt; }  // look() asks every member once a step
    std::optional<bool> sleep(detail::Waiter& w) {
      s.mine.clear();
      for (Consumer* c : s.members) s.mine.push_back(detail::ConsumerAccess::watch(*c));
      sleep_on(s.mine, nullptr, 0, w.sleep_slice(true, detail::kLivenessPeriodNs), [&] {
        s.collect(false);
        return !s.ready.empty();
      });
      return s.ready.empty() ? std::nullopt : std::optional<bool>(true);
    }
  } side{s};
  detail::Waiter w(s.opt, timeout, s.next_liveness);
  (void)detail::wait_until(w, side);
  if (s.ready.empty() && s.efd >= 0) s.rearm();
  return {s.ready.data(), s.ready.size()};
}

void WaitSet::notify() noexcept {
  if (impl_->efd >= 0) impl_->signal();
}

int WaitSet::fd() {
  Impl& s = *impl_;
  if (s.efd >= 0) return s.efd;
  s.efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (s.efd < 0) throw Error(Errc::system, std::string("wait set: eventfd: ") + std::strerror(errno));
  static const int atfork = ::pthread_atfork(nullptr, nullptr, count_fork);
  (void)atfork;
  try {
    s.born = g_forks.load(std::memory_order_relaxed);
    s.thread = std::make_unique<std::thread>([&s] { s.run(); });
  } catch (...) {
    ::close(s.efd);
    s.efd = -1;
    throw;
  }
  // Readable at first: the caller's wait(0) says what there is, and makes
  // the descriptor quiet if there is nothing.
  s.signal();
  return s.efd;
}

}  // namespace shmbus
