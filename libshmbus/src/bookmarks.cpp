// shmbus — durable reader names: the bookmark table (layout.hpp, Bookmark).
#include "bookmarks.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "shmbus/liveness.hpp"
#include "sys.hpp"

namespace shmbus::detail {

// A bookmark is held through its role lock. Claiming an empty one: take its
// lock, check it is still empty, write the name, then publish state = valid
// with release. Two readers creating the same name at once may both get as
// far as valid; each then fences and looks for another bookmark with the
// name, and withdraws if it finds one (at least one of them does), so a
// name is never held twice. Taking over a name (hold or forget) is taking
// its lock: the previous holder's last cursor store comes before its unlock.

std::string stored_name(const char (&name)[layout::kReaderNameSize]) {
  char copy[layout::kReaderNameSize + 1] = {};
  std::memcpy(copy, name, layout::kReaderNameSize);
  return std::string(copy, ::strnlen(copy, layout::kReaderNameSize));
}

namespace {

bool holds_name(const layout::Bookmark& b, std::string_view name) {
  // Pairs with the creator's release store of state after writing the name.
  if (b.state.load(std::memory_order_acquire) != layout::kBookmarkValid) return false;
  return stored_name(b.name) == name;
}

[[noreturn]] void name_held(const Segment& s, std::string_view name, std::uint32_t i) {
  const layout::Bookmark& b = *s.bookmark(i);
  fail(Errc::name_in_use, s.info().name,
       "reader name '" + std::string(name) + "' is held by a live reader (" +
           pid_label(static_cast<pid_t>(b.holder.load(std::memory_order_relaxed)),
                     b.holder_pid_ns.load(std::memory_order_relaxed)) +
           ")");
}

// Takes bookmark i's role lock through `fd`; false if a live holder has it.
bool lock_bookmark(const Segment& s, int fd, std::uint32_t i) {
  if (try_lock(fd, layout::bookmark_lock_byte(s.max_readers(), i))) return true;
  if (errno != EAGAIN && errno != EACCES)
    fail(Errc::system, s.info().name, std::string("cannot lock a bookmark: ") + std::strerror(errno));
  return false;
}

}  // namespace

std::optional<std::uint32_t> find_bookmark(const Segment& s, std::string_view name) noexcept {
  for (std::uint32_t i = 0; i < s.max_readers(); ++i) {
    if (holds_name(*s.bookmark(i), name)) return i;
  }
  return std::nullopt;
}

std::uint32_t hold_bookmark(Segment& s, std::string_view name, int fd, std::uint64_t initial_cursor,
                            bool& created) {
  created = false;
  const std::uint32_t me = static_cast<std::uint32_t>(::getpid());
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (auto i = find_bookmark(s, name)) {
      if (!lock_bookmark(s, fd, *i)) name_held(s, name, *i);
      if (!holds_name(*s.bookmark(*i), name)) {  // forgotten meanwhile
        unlock(fd, layout::bookmark_lock_byte(s.max_readers(), *i));
        continue;
      }
      s.bookmark(*i)->holder.store(me, std::memory_order_relaxed);
      s.bookmark(*i)->holder_pid_ns.store(self_pid_namespace(), std::memory_order_relaxed);
      return *i;
    }
    bool claimed = false;
    for (std::uint32_t i = 0; i < s.max_readers() && !claimed; ++i) {
      layout::Bookmark& b = *s.bookmark(i);
      if (b.state.load(std::memory_order_acquire) != layout::kBookmarkEmpty) continue;
      if (!lock_bookmark(s, fd, i)) continue;  // being created by a live reader
      const std::uint64_t byte = layout::bookmark_lock_byte(s.max_readers(), i);
      if (b.state.load(std::memory_order_acquire) != layout::kBookmarkEmpty) {
        unlock(fd, byte);
        continue;
      }
      claimed = true;
      std::memset(b.name, 0, sizeof b.name);
      std::memcpy(b.name, name.data(), std::min(name.size(), sizeof b.name - 1));
      b.cursor.store(initial_cursor, std::memory_order_relaxed);
      b.updated_ns.store(realtime_ns(), std::memory_order_relaxed);
      b.holder.store(me, std::memory_order_relaxed);
      b.holder_pid_ns.store(self_pid_namespace(), std::memory_order_relaxed);
      // Publishes name and cursor: pairs with holds_name()'s acquire load.
      b.state.store(layout::kBookmarkValid, std::memory_order_release);
      // Did another reader create the same name at the same time? Each
      // stores its bookmark valid, fences, then looks for any other with the
      // name (Dekker: at least one of two creators sees the other) and
      // withdraws if it finds one; the next attempt finds the survivor.
      std::atomic_thread_fence(std::memory_order_seq_cst);
      bool twin = false;
      for (std::uint32_t j = 0; j < s.max_readers() && !twin; ++j) twin = j != i && holds_name(*s.bookmark(j), name);
      if (twin) {
        b.state.store(layout::kBookmarkEmpty, std::memory_order_release);
        unlock(fd, byte);
        break;  // from the top
      }
      created = true;
      return i;
    }
    if (!claimed)
      fail(Errc::bookmarks_full, s.info().name,
           "all " + std::to_string(s.max_readers()) +
               " bookmarks hold durable reader names (shmbus-inspect gc --forget NAME drops one)");
  }
  fail(Errc::name_in_use, s.info().name, "reader name '" + std::string(name) + "' keeps changing hands");
}

void release_bookmark(Segment& s, std::uint32_t i, int fd) noexcept {
  s.bookmark(i)->updated_ns.store(realtime_ns(), std::memory_order_relaxed);
  // The next holder takes the lock after us; the kernel's lock operations
  // order our cursor store before its loads.
  unlock(fd, layout::bookmark_lock_byte(s.max_readers(), i));
}

bool with_bookmark_held(Segment& s, std::string_view name, const std::function<void(layout::Bookmark&)>& body) {
  // As a durable reader's attach refuses them: such a name is never
  // remembered, and "no such name" would hide the caller's mistake.
  if (name.empty()) fail(Errc::invalid_options, s.info().name, "the reader name is empty");
  if (name.size() >= layout::kReaderNameSize)
    fail(Errc::invalid_options, s.info().name,
         "reader name '" + std::string(name) + "' is " + std::to_string(name.size()) + " bytes, more than " +
             std::to_string(layout::kReaderNameSize - 1));
  for (int attempt = 0; attempt < 64; ++attempt) {
    const auto i = find_bookmark(s, name);
    if (!i) return false;
    const RoleFd f = s.open_role_fd();
    if (!lock_bookmark(s, f.get(), *i)) name_held(s, name, *i);
    const std::uint64_t byte = layout::bookmark_lock_byte(s.max_readers(), *i);
    layout::Bookmark& b = *s.bookmark(*i);
    if (!holds_name(b, name)) {  // forgotten or moved meanwhile
      unlock(f.get(), byte);
      continue;
    }
    // A reader that held the name stored its last cursor before its unlock;
    // our lock comes after that unlock, so body() sees that cursor.
    try {
      body(b);
    } catch (...) {
      unlock(f.get(), byte);
      throw;
    }
    // Orders body()'s stores before the next holder's lock (release_bookmark()).
    unlock(f.get(), byte);
    return true;
  }
  fail(Errc::name_in_use, s.info().name, "reader name '" + std::string(name) + "' keeps changing hands");
}

bool forget_bookmark(Segment& s, std::string_view name) {
  // Held ourselves while clearing, so no reader takes it half-cleared.
  return with_bookmark_held(s, name, [](layout::Bookmark& b) {
    b.state.store(layout::kBookmarkEmpty, std::memory_order_release);
    std::memset(b.name, 0, sizeof b.name);
    b.cursor.store(0, std::memory_order_relaxed);
    b.holder.store(0, std::memory_order_relaxed);
    b.holder_pid_ns.store(0, std::memory_order_relaxed);
  });
}

}  // namespace shmbus::detail
