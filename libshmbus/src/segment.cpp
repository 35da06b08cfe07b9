#include "segment.hpp"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "sys.hpp"

namespace bip = boost::interprocess;

namespace shmbus::detail {

std::string bus_prefix(std::string_view name) {
  std::string s = "bus '";
  s.append(name);
  s += "': ";
  return s;
}

void fail(Errc code, std::string_view bus, const std::string& what) {
  throw Error(code, bus_prefix(bus) + what);
}

namespace {

std::string shm_name(std::string_view bus) { return "shmbus." + std::string(bus); }

bool is_pow2(std::uint64_t v) { return v && !(v & (v - 1)); }

std::string num(std::uint64_t v) { return std::to_string(v); }

Errc errc_from_interprocess(const bip::interprocess_exception& e) {
  switch (e.get_error_code()) {
    case bip::not_found_error: return Errc::not_found;
    case bip::already_exists_error: return Errc::already_exists;
    case bip::security_error: return Errc::permission_denied;
    case bip::out_of_space_error: return Errc::no_space;
    default: break;
  }
  switch (e.get_native_error()) {
    case ENOENT: return Errc::not_found;
    case EEXIST: return Errc::already_exists;
    case EACCES:
    case EPERM: return Errc::permission_denied;
    case ENOSPC: return Errc::no_space;
    default: return Errc::system;
  }
}

std::string describe(const bip::interprocess_exception& e) {
  int native = e.get_native_error();
  if (native) return std::strerror(native);
  return e.what();
}

void validate_options(std::string_view name, const BusOptions& o) {
  if (!is_pow2(o.capacity) || o.capacity < 2 || o.capacity > max_capacity)
    fail(Errc::invalid_options, name,
         "capacity " + num(o.capacity) + " is not a power of two between 2 and 2^32");
  if (o.record_size < layout::kMinRecordSize || o.record_size > max_record_size ||
      o.record_size % layout::kRecordAlign != 0)
    fail(Errc::invalid_options, name,
         "record size " + num(o.record_size) + " is not a multiple of 8 between 64 and " +
             num(max_record_size));
  if (o.max_readers < 1 || o.max_readers > max_readers_limit)
    fail(Errc::invalid_options, name,
         "max readers " + num(o.max_readers) + " is not between 1 and " + num(max_readers_limit));
  if (o.policy != Policy::block && o.policy != Policy::overwrite)
    fail(Errc::invalid_options, name, "unknown policy");
  if (o.mode & ~mode_t{0777}) fail(Errc::invalid_options, name, "mode has bits beyond 0777");
  if (layout::log_offset_for(o.max_readers) + o.capacity * o.record_size > (std::uint64_t{1} << 46))
    fail(Errc::invalid_options, name, "segment would be larger than 64 TiB");
}

std::uint64_t segment_size_for(const BusOptions& o) {
  return layout::log_offset_for(o.max_readers) + o.capacity * o.record_size;
}

}  // namespace

std::optional<HeaderProblem> validate_header(const layout::SegmentHeader& h, std::uint64_t file_size,
                                             HeaderValues& out) {
  auto problem = [](Errc c, std::string w) { return std::optional<HeaderProblem>({c, std::move(w)}); };
  if (file_size < sizeof(std::uint64_t)) return problem(Errc::truncated, "segment is " + num(file_size) + " bytes, smaller than a header");
  const std::uint64_t magic = h.magic;
  // A creator sizes and reserves the segment before writing the header.
  if (magic == 0) return problem(Errc::not_ready, "segment was never fully initialised (no header written)");
  if (magic != layout::kMagic) return problem(Errc::not_a_bus, "not a shmbus segment (bad magic number)");
  if (file_size < sizeof(layout::SegmentHeader))
    return problem(Errc::truncated, "segment is " + num(file_size) + " bytes, smaller than its " +
                                        num(sizeof(layout::SegmentHeader)) + "-byte header");
  const std::uint32_t version = h.layout_version.load(std::memory_order_acquire);
  if (version == 0) return problem(Errc::not_ready, "segment was never fully initialised (layout version 0)");
  if (version != layout::kLayoutVersion)
    return problem(Errc::version_mismatch, "layout version " + num(version) + ", this library reads version " +
                                               num(layout::kLayoutVersion));
  const std::uint32_t header_size = h.header_size;
  const std::uint32_t record_size = h.record_size;
  const std::uint32_t max_readers = h.max_readers;
  const std::uint64_t capacity = h.capacity;
  const std::uint32_t policy = h.policy;
  const std::uint32_t slot_size = h.reader_slot_size;
  const std::uint64_t table = h.reader_table_offset;
  const std::uint64_t log = h.log_offset;
  const std::uint64_t size = h.segment_size;
  if (header_size != sizeof(layout::SegmentHeader))
    return problem(Errc::corrupt, "header size " + num(header_size) + " is not " + num(sizeof(layout::SegmentHeader)));
  if (record_size < layout::kMinRecordSize || record_size > max_record_size || record_size % layout::kRecordAlign)
    return problem(Errc::corrupt, "record size " + num(record_size) + " is impossible");
  if (max_readers < 1 || max_readers > max_readers_limit)
    return problem(Errc::corrupt, "max readers " + num(max_readers) + " is impossible");
  if (!is_pow2(capacity) || capacity < 2 || capacity > max_capacity)
    return problem(Errc::corrupt, "capacity " + num(capacity) + " is not a power of two between 2 and 2^32");
  if (policy != static_cast<std::uint32_t>(Policy::block) && policy != static_cast<std::uint32_t>(Policy::overwrite))
    return problem(Errc::corrupt, "policy " + num(policy) + " is unknown");
  if (slot_size != sizeof(layout::ReaderSlot))
    return problem(Errc::corrupt, "reader slot size " + num(slot_size) + " is not " + num(sizeof(layout::ReaderSlot)));
  if (table != sizeof(layout::SegmentHeader))
    return problem(Errc::corrupt, "reader table offset " + num(table) + " is not " + num(sizeof(layout::SegmentHeader)));
  if (log != layout::log_offset_for(max_readers))
    return problem(Errc::corrupt, "log offset " + num(log) + " does not match " + num(max_readers) + " readers");
  const std::uint64_t expected = log + capacity * record_size;  // no overflow: both bounded above
  if (size != expected)
    return problem(Errc::corrupt, "segment size field " + num(size) + " does not match capacity x record size (" +
                                      num(expected) + ")");
  if (file_size < size)
    return problem(Errc::truncated, "segment is " + num(file_size) + " bytes but its header needs " + num(size));
  if (file_size > size)
    return problem(Errc::corrupt, "segment is " + num(file_size) + " bytes, larger than its header says (" + num(size) + ")");
  out.version = version;
  out.record_size = record_size;
  out.max_readers = max_readers;
  out.capacity = capacity;
  out.policy = static_cast<Policy>(policy);
  out.log_offset = log;
  out.segment_size = size;
  out.creation_time_ns = h.creation_time_ns;
  return std::nullopt;
}

Segment::~Segment() = default;

void Segment::attach(std::string_view name, const HeaderValues& v, bool writable) {
  base_ = static_cast<std::byte*>(region_->get_address());
  size_ = region_->get_size();
  if (writable) {
    // Map every page now (the memory was reserved at creation): otherwise the
    // first lap of the ring takes a page fault per 4 KiB in every process,
    // microseconds each, right in the message path.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (::madvise(base_, size_, MADV_POPULATE_WRITE) != 0) {
      const int err = errno;
      // Kernels before 5.14 do not know it (EINVAL), or a signal cut it
      // short: touch each page instead. Safe, because open() refused a
      // segment whose pages are not all allocated (create() allocated them),
      // so no touch allocates or faults.
      if (err != EINVAL && err != EINTR && err != EAGAIN) fail(err == EFAULT ? Errc::truncated : Errc::no_space, name,
                              std::string("cannot map every page of the segment: ") + std::strerror(err));
      volatile const std::byte* p = base_;
      for (std::uint64_t off = 0; off < size_; off += layout::kPageSize) (void)p[off];
    }
  }
  header_ = reinterpret_cast<layout::SegmentHeader*>(base_);
  readers_ = reinterpret_cast<layout::ReaderSlot*>(base_ + sizeof(layout::SegmentHeader));
  bookmarks_ = reinterpret_cast<layout::Bookmark*>(base_ + layout::bookmark_table_offset_for(v.max_readers));
  log_ = base_ + v.log_offset;
  mask_ = v.capacity - 1;
  info_.name = std::string(name);
  info_.policy = v.policy;
  info_.capacity = v.capacity;
  info_.record_size = v.record_size;
  info_.max_payload = max_payload_for(v.record_size);
  info_.max_readers = v.max_readers;
  info_.segment_size = v.segment_size;
  info_.creation_time_ns = v.creation_time_ns;
  info_.layout_version = v.version;
}

std::shared_ptr<Segment> Segment::create(std::string_view name, const BusOptions& o) {
  validate_name(name);
  validate_options(name, o);
  const std::string shm = shm_name(name);
  const std::uint64_t size = segment_size_for(o);
  std::shared_ptr<Segment> seg(new Segment);
  bip::shared_memory_object obj;
  try {
    obj = bip::shared_memory_object(bip::create_only, shm.c_str(), bip::read_write,
                                    bip::permissions(static_cast<unsigned>(o.mode)));
  } catch (const bip::interprocess_exception& e) {
    fail(errc_from_interprocess(e), name, "cannot create segment /dev/shm/" + shm + ": " + describe(e));
  }
  // From here on, a failure must not leave a half-made segment behind.
  try {
    const int fd = obj.get_mapping_handle().handle;
    if (::fchmod(fd, o.mode) != 0)  // shm_open applied the umask; the user asked for exactly o.mode
      fail(Errc::system, name, std::string("fchmod: ") + std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0)
      fail(errno == ENOSPC || errno == EFBIG ? Errc::no_space : Errc::system, name,
           "cannot size segment to " + num(size) + " bytes: " + std::strerror(errno));
    // Say who is initialising before anything slow, so an opener can tell a
    // creator that died here from one still working (pwrite, not the mapping:
    // on a full /dev/shm it fails instead of raising SIGBUS).
    const std::uint32_t me = static_cast<std::uint32_t>(::getpid());
    if (::pwrite(fd, &me, sizeof me, offsetof(layout::SegmentHeader, creator_pid)) != sizeof me)
      fail(errno == ENOSPC ? Errc::no_space : Errc::system, name,
           std::string("cannot write the segment header: ") + std::strerror(errno));
    // Reserve every page now: on a full /dev/shm this fails here instead of
    // raising SIGBUS on first touch in the middle of a run.
    if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); rc != 0)
      fail(rc == ENOSPC ? Errc::no_space : Errc::system, name,
           "cannot reserve " + num(size) + " bytes in /dev/shm: " + std::strerror(rc));
    seg->region_ = std::make_unique<bip::mapped_region>(obj, bip::read_write, 0, size);
    auto* h = static_cast<layout::SegmentHeader*>(seg->region_->get_address());
    // The file is zero-filled: every counter, cursor and commit tag starts at 0.
    h->magic = layout::kMagic;
    h->header_size = sizeof(layout::SegmentHeader);
    h->record_size = o.record_size;
    h->max_readers = o.max_readers;
    h->capacity = o.capacity;
    h->policy = static_cast<std::uint32_t>(o.policy);
    h->reader_slot_size = sizeof(layout::ReaderSlot);
    h->reader_table_offset = sizeof(layout::SegmentHeader);
    h->log_offset = layout::log_offset_for(o.max_readers);
    h->segment_size = size;
    h->creation_time_ns = realtime_ns();
    // Written last: publishes every field above to openers, which acquire-poll it.
    h->layout_version.store(layout::kLayoutVersion, std::memory_order_release);
    HeaderValues v;
    v.version = layout::kLayoutVersion;
    v.record_size = o.record_size;
    v.max_readers = o.max_readers;
    v.capacity = o.capacity;
    v.policy = o.policy;
    v.log_offset = layout::log_offset_for(o.max_readers);
    v.segment_size = size;
    v.creation_time_ns = h->creation_time_ns;
    seg->attach(name, v, true);
  } catch (...) {
    bip::shared_memory_object::remove(shm.c_str());
    throw;
  }
  return seg;
}

namespace {

std::string user_label(uid_t uid) {
  std::string s = "uid " + num(uid);
  passwd pw{}, *found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) s += " (" + std::string(pw.pw_name) + ")";
  return s;
}

std::string group_label(gid_t gid) {
  std::string s = "gid " + num(gid);
  group gr{}, *found = nullptr;
  char buf[1024];
  if (::getgrgid_r(gid, &gr, buf, sizeof buf, &found) == 0 && found) s += " (" + std::string(gr.gr_name) + ")";
  return s;
}

std::string mode_label(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// Refuses a segment owned by anyone this process does not trust: by default
// only its own effective uid and root. Checked on the descriptor that gets
// mapped, so the file cannot be swapped between the check and the use.
void check_owner(std::string_view name, const std::string& path, const struct stat& st, const Trust& trust) {
  const uid_t me = ::geteuid();
  if (st.st_uid == me || st.st_uid == 0) return;
  if (std::find(trust.owners.begin(), trust.owners.end(), st.st_uid) != trust.owners.end()) return;
  if (std::find(trust.groups.begin(), trust.groups.end(), st.st_gid) != trust.groups.end()) return;
  fail(Errc::foreign_owner, name,
       path + " belongs to " + user_label(st.st_uid) + ", " + group_label(st.st_gid) + ", mode " +
           mode_label(st.st_mode) + ", not to you, " + user_label(me) +
           ": not trusted (trust its owner or group to use it, e.g. --trust-owner or --trust-group)");
}

// Reads `n` bytes at `off` without mapping (a sparse file stays sparse).
bool read_at(int fd, void* to, std::size_t n, std::uint64_t off) {
  return ::pread(fd, to, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
}

}  // namespace

std::shared_ptr<Segment> Segment::open(std::string_view name, Access access,
                                       std::chrono::milliseconds ready_timeout, const Trust& trust,
                                       std::optional<mode_t> max_mode) {
  validate_name(name);
  const std::string shm = shm_name(name);
  const std::string path = "/dev/shm/" + shm;
  const auto mode = access == Access::read_write ? bip::read_write : bip::read_only;
  bip::shared_memory_object obj;
  try {
    obj = bip::shared_memory_object(bip::open_only, shm.c_str(), mode);
  } catch (const bip::interprocess_exception& e) {
    Errc c = errc_from_interprocess(e);
    if (c == Errc::not_found) fail(c, name, "no such bus (" + path + " does not exist)");
    fail(c, name, "cannot open " + path + ": " + describe(e));
  }
  const int fd = obj.get_mapping_handle().handle;
  const std::uint64_t deadline = monotonic_ns() + std::uint64_t(ready_timeout.count()) * 1'000'000u;
  int rechecks = 0;  // of an allocation that moved under us (below)
  for (;;) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail(Errc::system, name, std::string("fstat: ") + std::strerror(errno));
    // Whose it is, before reading a byte of it.
    check_owner(name, path, st, trust);
    if (max_mode && (st.st_mode & 0777 & ~*max_mode) != 0)
      fail(Errc::insecure_mode, name,
           path + " exists with mode " + mode_label(st.st_mode) + ", more permissive than the requested " +
               mode_label(*max_mode) + "; not joining it (remove it, or ask for that mode)");
    const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
    // A creator reserves every page (posix_fallocate) before writing the
    // header. tmpfs counts allocated pages in st_blocks (512-byte units).
    // Pages allocated past the end (FALLOC_FL_KEEP_SIZE) count too and could
    // hide a hole, so more than a huge page's worth of them is refused as well.
    // (SEEK_HOLE cannot tell: tmpfs reports reserved, unwritten pages as holes.)
    const std::uint64_t blocks_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512u;
    constexpr std::uint64_t kHugePage = 2u << 20;
    const bool allocated = blocks_bytes >= file_size && blocks_bytes <= layout::align_up(file_size, kHugePage);
    std::optional<HeaderProblem> problem;
    std::unique_ptr<bip::mapped_region> region;
    std::uint64_t magic = 0;
    std::uint32_t version = 0;
    const bool have_magic = file_size >= sizeof magic && read_at(fd, &magic, sizeof magic, 0);
    if (file_size < sizeof(layout::SegmentHeader)) {
      problem = HeaderProblem{Errc::truncated, "segment is " + num(file_size) + " bytes, smaller than its " +
                                                   num(sizeof(layout::SegmentHeader)) + "-byte header"};
      // Enough to tell a foreign file from a bus still being sized.
      if (have_magic && magic != 0 && magic != layout::kMagic)
        problem = HeaderProblem{Errc::not_a_bus, "not a shmbus segment (bad magic number)"};
    } else if (!allocated) {
      // Never map a sparse segment: touching it would allocate /dev/shm on our
      // behalf and raise SIGBUS once it is full. Only a creator still between
      // ftruncate and posix_fallocate (no header yet) is worth waiting for.
      read_at(fd, &version, sizeof version, offsetof(layout::SegmentHeader, layout_version));
      if (have_magic && magic != 0 && magic != layout::kMagic)
        fail(Errc::not_a_bus, name, "not a shmbus segment (bad magic number)");
      if (magic != 0 && version != 0) {
        // The header may be newer than our fstat: a creator reserves every
        // page (posix_fallocate) before writing it. If the allocation moved
        // since, look again from the top (a few times at most: a sparse
        // file stays sparse, and one whose size keeps changing is hostile).
        struct stat again {};
        if (rechecks < 3 && ::fstat(fd, &again) == 0 && again.st_blocks != st.st_blocks) {
          ++rechecks;
          continue;
        }
        fail(Errc::not_allocated, name,
             path + " claims " + num(file_size) + " bytes but has " + num(blocks_bytes) +
                 " allocated " + (blocks_bytes < file_size ? "(a sparse file)" : "(pages past its end)") +
                 ": refusing to map it");
      }
      problem = HeaderProblem{Errc::not_ready, "segment was never fully initialised (not yet allocated)"};
    } else {
      try {
        region = std::make_unique<bip::mapped_region>(obj, mode, 0, file_size);
      } catch (const bip::interprocess_exception& e) {
        fail(errc_from_interprocess(e), name, "cannot map " + path + ": " + describe(e));
      }
      HeaderValues values;
      problem = validate_header(*static_cast<const layout::SegmentHeader*>(region->get_address()), file_size, values);
      if (!problem) {
        std::shared_ptr<Segment> seg(new Segment);
        seg->region_ = std::move(region);
        seg->attach(name, values, access == Access::read_write);
        return seg;
      }
    }
    if (problem->code == Errc::not_ready) {
      // A creator that died before finishing never will.
      std::uint32_t creator_pid = 0;
      read_at(fd, &creator_pid, sizeof creator_pid, offsetof(layout::SegmentHeader, creator_pid));
      const pid_t creator = static_cast<pid_t>(creator_pid);
      if (creator > 0 && ::kill(creator, 0) != 0 && errno == ESRCH)
        fail(Errc::not_ready, name,
             "its creator (pid " + std::to_string(creator) +
                 ") died while initialising it; remove it (shmbus-inspect rm) and create it again");
    }
    // A creator may still be between shm_open, ftruncate and the version store.
    const bool maybe_initialising =
        problem->code == Errc::not_ready ||
        (problem->code == Errc::truncated && file_size < sizeof(layout::SegmentHeader));
    if (!maybe_initialising || monotonic_ns() >= deadline) fail(problem->code, name, problem->what);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // setup path only
  }
}

std::uint64_t oldest_retained(const Segment& s, std::uint64_t head) noexcept {
  const std::uint64_t floor = head > s.capacity() ? head - s.capacity() : 0;
  if (s.overwrite()) return floor;
  const std::uint64_t o = s.header()->oldest.load(std::memory_order_acquire);
  return (o < floor || o > head) ? floor : o;
}

bool reclaim_if_dead(Segment& s, std::uint32_t i) noexcept {
  layout::ReaderSlot* r = s.reader(i);
  std::uint64_t owner = r->owner.load(std::memory_order_acquire);
  if (owner == layout::kOwnerFree) return false;
  // A live owner keeps its slot; so does a live reclaimer. A dead reclaimer's
  // marker is taken over and the (idempotent) steps below redone.
  const std::uint64_t who = layout::is_reclaim_marker(owner) ? layout::reclaimer_of(owner) : owner;
  if (identity_liveness(who) == Liveness::alive) return false;
  // Only one reclaimer wins; a new reader cannot claim the slot meanwhile.
  if (!r->owner.compare_exchange_strong(owner, layout::reclaim_marker(self_identity()),
                                        std::memory_order_acq_rel))
    return false;
  // The producer stops counting this cursor once it sees kSlotFree (pairs with its acquire load).
  r->state.store(layout::kSlotFree, std::memory_order_release);
  // A reader killed while asleep still holds one count of data_sleepers:
  // give it back, or the inspector would go on showing it asleep.
  if (r->sleeping.exchange(0, std::memory_order_acq_rel) != 0)
    s.header()->data_sleepers.fetch_sub(1, std::memory_order_acq_rel);
  s.header()->readers_reclaimed.fetch_add(1, std::memory_order_relaxed);
  // Free for the next reader, which acquires owner before initialising the slot.
  r->owner.store(layout::kOwnerFree, std::memory_order_release);
  // A producer asleep on this reader can go on now.
  s.header()->space_futex.fetch_add(1, std::memory_order_release);
  futex_wake(&s.header()->space_futex, INT32_MAX);
  return true;
}

// ---- bookmarks ----
//
// Claiming an empty bookmark: CAS holder kOwnerFree (or a dead identity) ->
// us while state is empty, write the name, then publish state = valid with
// release. Two readers creating the same name at once both end up valid;
// each then looks again, and the one whose bookmark has the higher index
// withdraws, so a name is only ever held through its lowest bookmark.

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

// True if `holder` is free or a process that no longer exists.
bool holder_gone(std::uint64_t holder) {
  return holder == layout::kOwnerFree || identity_liveness(holder) != Liveness::alive;
}

[[noreturn]] void name_held(const Segment& s, std::string_view name, std::uint64_t holder) {
  fail(Errc::name_in_use, s.info().name,
       "reader name '" + std::string(name) + "' is held by a live reader (pid " +
           std::to_string(layout::identity_pid(holder)) + ")");
}

}  // namespace

std::optional<std::uint32_t> find_bookmark(const Segment& s, std::string_view name) noexcept {
  for (std::uint32_t i = 0; i < s.max_readers(); ++i) {
    if (holds_name(*s.bookmark(i), name)) return i;
  }
  return std::nullopt;
}

std::uint32_t hold_bookmark(Segment& s, std::string_view name, std::uint64_t identity,
                            std::uint64_t initial_cursor, bool& created) {
  created = false;
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (auto i = find_bookmark(s, name)) {
      layout::Bookmark& b = *s.bookmark(*i);
      std::uint64_t holder = b.holder.load(std::memory_order_acquire);
      if (!holder_gone(holder)) name_held(s, name, holder);  // us too: one holder per name
      // Acquire: we see the cursor its last holder stored.
      if (b.holder.compare_exchange_strong(holder, identity, std::memory_order_acq_rel)) {
        if (holds_name(b, name)) return *i;
        b.holder.store(layout::kOwnerFree, std::memory_order_release);  // forgotten meanwhile
      }
      continue;
    }
    bool claimed = false;
    for (std::uint32_t i = 0; i < s.max_readers() && !claimed; ++i) {
      layout::Bookmark& b = *s.bookmark(i);
      if (b.state.load(std::memory_order_acquire) != layout::kBookmarkEmpty) continue;
      std::uint64_t holder = b.holder.load(std::memory_order_acquire);
      if (!holder_gone(holder)) continue;  // being created by a live process
      if (!b.holder.compare_exchange_strong(holder, identity, std::memory_order_acq_rel)) continue;
      if (b.state.load(std::memory_order_acquire) != layout::kBookmarkEmpty) {
        b.holder.store(layout::kOwnerFree, std::memory_order_release);
        continue;
      }
      claimed = true;
      std::memset(b.name, 0, sizeof b.name);
      std::memcpy(b.name, name.data(), std::min(name.size(), sizeof b.name - 1));
      b.cursor.store(initial_cursor, std::memory_order_relaxed);
      b.updated_ns.store(realtime_ns(), std::memory_order_relaxed);
      // Publishes name and cursor: pairs with holds_name()'s acquire load.
      b.state.store(layout::kBookmarkValid, std::memory_order_release);
      // Did another reader create the same name at the same time?
      const auto first = find_bookmark(s, name);
      if (first && *first < i) {
        b.state.store(layout::kBookmarkEmpty, std::memory_order_release);
        b.holder.store(layout::kOwnerFree, std::memory_order_release);
        break;  // take the lower one from the top
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

void release_bookmark(Segment& s, std::uint32_t i, std::uint64_t identity) noexcept {
  layout::Bookmark& b = *s.bookmark(i);
  b.updated_ns.store(realtime_ns(), std::memory_order_relaxed);
  std::uint64_t me = identity;
  // Release: the next holder (acquire CAS) sees our last cursor.
  b.holder.compare_exchange_strong(me, layout::kOwnerFree, std::memory_order_acq_rel);
}

bool forget_bookmark(Segment& s, std::string_view name) {
  const auto i = find_bookmark(s, name);
  if (!i) return false;
  layout::Bookmark& b = *s.bookmark(*i);
  std::uint64_t holder = b.holder.load(std::memory_order_acquire);
  if (!holder_gone(holder)) name_held(s, name, holder);
  // Hold it ourselves while clearing, so no reader takes it half-cleared.
  const std::uint64_t me = self_identity();
  if (!b.holder.compare_exchange_strong(holder, me, std::memory_order_acq_rel)) {
    holder = b.holder.load(std::memory_order_acquire);
    if (!holder_gone(holder)) name_held(s, name, holder);
    return forget_bookmark(s, name);
  }
  b.state.store(layout::kBookmarkEmpty, std::memory_order_release);
  std::memset(b.name, 0, sizeof b.name);
  b.cursor.store(0, std::memory_order_relaxed);
  b.holder.store(layout::kOwnerFree, std::memory_order_release);
  return true;
}

}  // namespace shmbus::detail

