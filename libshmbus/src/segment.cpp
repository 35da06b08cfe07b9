#include "segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/mman.h>
#include <sys/random.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "sys.hpp"
#include "trust.hpp"

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
         "capacity " + num(o.capacity) + " is not a power of two between 2 and 2^32 (or 0, the default)");
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
  if (layout::log_offset_for(o.max_readers, o.capacity) + o.capacity * o.record_size > (std::uint64_t{1} << 46))
    fail(Errc::invalid_options, name, "segment would be larger than 64 TiB");
}

std::uint64_t segment_size_for(const BusOptions& o) {
  return layout::log_offset_for(o.max_readers, o.capacity) + o.capacity * o.record_size;
}

}  // namespace

std::optional<HeaderProblem> validate_header(const layout::SegmentHeader& h, std::uint64_t file_size,
                                             HeaderValues& out, std::uint64_t granule) {
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
  if (log != layout::log_offset_for(max_readers, capacity))
    return problem(Errc::corrupt, "log offset " + num(log) + " does not match " + num(max_readers) + " readers and " +
                                      num(capacity) + " records");
  const std::uint64_t expected = log + capacity * record_size;  // no overflow: both bounded above
  if (size != expected)
    return problem(Errc::corrupt, "segment size field " + num(size) + " does not match capacity x record size (" +
                                      num(expected) + ")");
  if (file_size < size)
    return problem(Errc::truncated, "segment is " + num(file_size) + " bytes but its header needs " + num(size));
  if (file_size > size && (granule <= 1 || file_size != layout::align_up(size, granule)))
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

void Segment::attach(std::string_view name, const HeaderValues& v, bool writable, const std::string& dir) {
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
  spans_ = reinterpret_cast<layout::SpanMark*>(base_ + layout::span_table_offset_for(v.max_readers));
  log_ = base_ + v.log_offset;
  info_.name = std::string(name);
  info_.policy = v.policy;
  info_.capacity = v.capacity;
  info_.record_size = v.record_size;
  info_.max_payload = max_payload_for(v.record_size);
  info_.max_message = layout::max_message_for(v.capacity, v.record_size);
  info_.max_readers = v.max_readers;
  info_.segment_size = v.segment_size;
  info_.creation_time_ns = v.creation_time_ns;
  info_.layout_version = v.version;
  info_.dir = dir;
  info_.path = path_;
  info_.pages = describe_pages(fd_, info_.page_size);
}

namespace {

// Boost.Interprocess maps anything that hands it a descriptor.
struct FdMapping {
  int fd;
  bip::mapping_handle_t get_mapping_handle() const noexcept {
    return bip::ipcdetail::mapping_handle_from_file_handle(fd);
  }
};

std::string temp_prefix(std::string_view bus) { return ".shmbus." + std::string(bus) + "."; }
constexpr std::size_t kTempSuffix = 6;  // random_suffix()'s letters and digits

// The bus a directory entry named `fn` is a temporary file of
// (temp_prefix(NAME) and kTempSuffix letters or digits, NAME a valid bus
// name), or nullopt.
std::optional<std::string> temporary_of(std::string_view fn) {
  constexpr std::string_view lead = ".shmbus.";
  if (fn.size() < lead.size() + 2 + kTempSuffix || fn.substr(0, lead.size()) != lead) return std::nullopt;
  const std::string_view suffix = fn.substr(fn.size() - kTempSuffix);
  if (fn[fn.size() - kTempSuffix - 1] != '.' ||
      !std::all_of(suffix.begin(), suffix.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      }))
    return std::nullopt;
  std::string bus(fn.substr(lead.size(), fn.size() - lead.size() - kTempSuffix - 1));
  try {
    validate_name(bus);
  } catch (const Error&) {
    return std::nullopt;
  }
  return bus;
}

// The temporary files in `dir` of bus `bus` (of any bus when empty): each
// one's file name and the bus it is of; nullopt (errno set) if `dir` cannot
// be read.
using TempNames = std::vector<std::pair<std::string, std::string>>;
std::optional<TempNames> temporaries_in(const std::string& dir, std::string_view bus) {
  TempNames out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return std::nullopt;
  while (const dirent* e = ::readdir(d)) {
    std::optional<std::string> of = temporary_of(e->d_name);
    if (of && (bus.empty() || *of == bus)) out.emplace_back(e->d_name, std::move(*of));
  }
  ::closedir(d);
  return out;
}

std::string file_in(const std::string& dir, const std::string& fn) {
  return (dir == "/" ? std::string() : dir) + "/" + fn;
}

std::string random_suffix() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, 0) != sizeof r) r = monotonic_ns() ^ (std::uint64_t(::getpid()) << 32);
  std::string s(6, 'A');
  for (char& c : s) {
    c = kChars[r % 62];
    r /= 62;
  }
  return s;
}

// Moves the finished segment to its bus name, never replacing one.
// Returns 0 or an errno (EEXIST: the name is taken).
int publish_name(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return errno;
  // A file system without RENAME_NOREPLACE: link() never replaces either.
  if (::link(from.c_str(), to.c_str()) != 0) return errno;
  ::unlink(from.c_str());
  return 0;
}

}  // namespace

// Removes temporary files of earlier creations of `bus` whose creator died
// (nobody holds their creator lock). Only files this process may remove.
std::vector<std::string> remove_dead_temporaries(std::string_view bus, const std::string& dir) {
  std::vector<std::string> removed;
  if (bus.empty()) return removed;
  for (const auto& [fn, of] : temporaries_in(dir, bus).value_or(TempNames{})) {
    const std::string path = file_in(dir, fn);
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {}, now {};
    // Held by us while we unlink it, so a creator still alive (which holds
    // it from its first moment) is never cut short.
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && try_lock(fd, layout::kCreatorLockByte) &&
        ::lstat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev &&
        ::unlink(path.c_str()) == 0)
      removed.push_back(path);
    ::close(fd);
  }
  return removed;
}

std::vector<Temporary> find_temporaries(const std::string& dir) {
  std::vector<Temporary> out;
  auto found = temporaries_in(dir, {});
  if (!found) throw Error(Errc::bad_directory, "bus directory " + dir + ": " + std::strerror(errno));
  for (auto& [fn, of] : *found) {
    Temporary t;
    t.bus = std::move(of);
    t.path = file_in(dir, fn);
    struct stat st {};
    // lstat first: a FIFO, device or symlink planted under such a name is
    // listed, never opened.
    if (::lstat(t.path.c_str(), &st) != 0) continue;  // renamed into place or removed meanwhile
    t.file_size = static_cast<std::uint64_t>(st.st_size);
    if (S_ISREG(st.st_mode)) {
      // Read-only: a lock test needs no write access, and takes nothing.
      const int fd = ::open(t.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
      struct stat opened {};
      if (fd >= 0 && ::fstat(fd, &opened) == 0 && opened.st_ino == st.st_ino && opened.st_dev == st.st_dev)
        t.creator = test_lock(fd, layout::kCreatorLockByte);
      if (fd >= 0) ::close(fd);
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::shared_ptr<Segment> Segment::create(std::string_view name, const BusOptions& requested) {
  validate_name(name);
  BusOptions o = requested;
  if (o.capacity == 0) o.capacity = default_capacity_for(o.record_size);
  validate_options(name, o);
  const BusDir dir = resolve_dir(o.dir, name);
  const std::string path = path_in(dir.path, name);
  const std::uint64_t size = segment_size_for(o);
  // hugetlbfs sizes (ftruncate) and maps files only in whole huge pages;
  // the header keeps the bus's own size and open() accepts the rounding.
  const std::uint64_t file_size = dir.hugetlbfs ? layout::align_up(size, dir.huge_page) : size;
  remove_dead_temporaries(name, dir.path);
  for (int attempt = 0;; ++attempt) {
    // Built under a temporary name and renamed into place once complete
    // (layout.hpp): nobody ever opens a half-made bus.
    const std::string temp = file_in(dir.path, temp_prefix(name) + random_suffix());
    const int raw = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (raw < 0) {
      if (errno == EEXIST && attempt < 16) continue;
      const int err = errno;
      fail(err == EACCES || err == EPERM ? Errc::permission_denied : err == ENOSPC ? Errc::no_space : Errc::system,
           name, "cannot create a segment in " + dir.path + ": " + std::strerror(err));
    }
    std::shared_ptr<Segment> seg(new Segment);
    seg->fd_ = raw;
    seg->path_ = path;
    bool renamed = false;
    try {
      // Ours from the first moment: a cleaner of dead creators' files skips
      // it. One that opened it in the instant before holds the lock and
      // removes it: build again under another name.
      if (!try_lock(raw, layout::kCreatorLockByte)) {
        if ((errno == EAGAIN || errno == EACCES) && attempt < 16) {
          ::unlink(temp.c_str());
          continue;
        }
        fail(Errc::system, name, std::string("cannot lock the new segment: ") + std::strerror(errno));
      }
      if (::fchmod(raw, o.mode) != 0)  // the umask applied; the user asked for exactly o.mode
        fail(Errc::system, name, std::string("fchmod: ") + std::strerror(errno));
      if (::ftruncate(raw, static_cast<off_t>(file_size)) != 0)
        fail(errno == ENOSPC || errno == EFBIG ? Errc::no_space : Errc::system, name,
             "cannot size segment to " + num(file_size) + " bytes in " + dir.path + ": " + std::strerror(errno));
      // Reserve every page now: on a full /dev/shm (or a hugetlbfs short of
      // free huge pages) this fails here instead of raising SIGBUS on first
      // touch in the middle of a run. hugetlbfs allocates on fallocate too.
      if (int rc = ::posix_fallocate(raw, 0, static_cast<off_t>(file_size)); rc != 0)
        fail(rc == ENOSPC ? Errc::no_space : Errc::system, name,
             "cannot reserve " + num(file_size) + " bytes in " + dir.path + ": " + std::strerror(rc) +
                 (dir.hugetlbfs && rc == ENOSPC ? " (too few free huge pages: see HugePages_Free in /proc/meminfo, "
                                                  "raise /proc/sys/vm/nr_hugepages)"
                                                : ""));
      // The whole file: a hugetlbfs mapping cannot end inside a huge page.
      seg->region_ = std::make_unique<bip::mapped_region>(FdMapping{raw}, bip::read_write, 0, file_size);
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
      h->log_offset = layout::log_offset_for(o.max_readers, o.capacity);
      h->segment_size = size;
      h->creation_time_ns = realtime_ns();
      h->creator_pid = static_cast<std::uint32_t>(::getpid());
      // Written last: publishes every field above to whoever maps the file
      // after the rename below (and to the inspector, which acquire-loads it).
      h->layout_version.store(layout::kLayoutVersion, std::memory_order_release);
      HeaderValues v;
      v.version = layout::kLayoutVersion;
      v.record_size = o.record_size;
      v.max_readers = o.max_readers;
      v.capacity = o.capacity;
      v.policy = o.policy;
      v.log_offset = layout::log_offset_for(o.max_readers, o.capacity);
      v.segment_size = size;
      v.creation_time_ns = h->creation_time_ns;
      seg->attach(name, v, true, dir.path);
      struct stat st {};
      if (::fstat(raw, &st) != 0) fail(Errc::system, name, std::string("fstat: ") + std::strerror(errno));
      seg->dev_ = st.st_dev;
      seg->ino_ = st.st_ino;
      const int err = publish_name(temp, path);
      if (err == ENOENT && attempt < 16) {
        // A creator of the same name took our file for a dead one's in the
        // instant before we locked it: build again.
        continue;
      }
      if (err == EEXIST) fail(Errc::already_exists, name, path + " already exists");
      if (err != 0) fail(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system, name,
                         "cannot move the new segment to " + path + ": " + std::strerror(err));
      renamed = true;
      unlock(raw, layout::kCreatorLockByte);
      return seg;
    } catch (...) {
      if (!renamed) ::unlink(temp.c_str());
      throw;
    }
  }
}

namespace {

std::string file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Reads `n` bytes at `off` without mapping (a sparse file stays sparse).
bool read_at(int fd, void* to, std::size_t n, std::uint64_t off) {
  return ::pread(fd, to, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
}

}  // namespace

std::shared_ptr<Segment> Segment::open(std::string_view name, Access access, const Trust& trust,
                                       std::optional<mode_t> max_mode, std::string_view dir_option) {
  validate_name(name);
  const std::string dir = absolute_dir(dir_option);
  const std::string path = path_in(dir, name);
  const bool rw = access == Access::read_write;
  // No symlink is followed, and a FIFO or device planted at the path does
  // not block the open (O_NONBLOCK); both are refused below.
  const int raw = ::open(path.c_str(), (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (raw < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      resolve_dir(dir, name);  // a missing or unusable directory says so
      fail(Errc::not_found, name, "no such bus (" + path + " does not exist)");
    }
    if (err == ELOOP) fail(Errc::unsafe_file, name, path + " is a symbolic link: refusing to follow it");
    fail(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system, name,
         "cannot open " + path + ": " + std::strerror(err));
  }
  std::shared_ptr<Segment> seg(new Segment);
  seg->fd_ = raw;
  seg->path_ = path;
  struct stat st {};
  if (::fstat(raw, &st) != 0) fail(Errc::system, name, std::string("fstat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    fail(Errc::unsafe_file, name, path + " is not a regular file (" + file_kind(st.st_mode) + "): not a bus");
  // Whose it is, before reading a byte of it.
  check_owner(name, path, st, trust);
  // Another name for the same file (a hard link) lets whoever made it read
  // and write the bus under a name we never chose.
  if (st.st_nlink != 1)
    fail(Errc::unsafe_file, name,
         path + " has " + num(st.st_nlink) + " hard links: another name reaches the same memory; refusing it");
  if (max_mode && (st.st_mode & 0777 & ~*max_mode) != 0)
    fail(Errc::insecure_mode, name,
         path + " exists with mode " + mode_label(st.st_mode) + ", more permissive than the requested " +
             mode_label(*max_mode) + "; not joining it (remove it, or ask for that mode)");
  seg->dev_ = st.st_dev;
  seg->ino_ = st.st_ino;
  const std::uint64_t file_size = static_cast<std::uint64_t>(st.st_size);
  std::uint64_t magic = 0;
  const bool have_magic = file_size >= sizeof magic && read_at(raw, &magic, sizeof magic, 0);
  if (have_magic && magic != 0 && magic != layout::kMagic)
    fail(Errc::not_a_bus, name, "not a shmbus segment (bad magic number)");
  if (file_size < sizeof(layout::SegmentHeader))
    fail(Errc::truncated, name, "segment is " + num(file_size) + " bytes, smaller than its " +
                                    num(sizeof(layout::SegmentHeader)) + "-byte header");
  // A bus appears under its name only once complete (create() renames it
  // into place), so there is nothing to wait for: a header never written
  // is not a bus this library made.
  if (magic == 0) fail(Errc::not_ready, name, "segment was never initialised (no header): not made by shmbus create");
  // A creator reserves every page (posix_fallocate) before the rename.
  // tmpfs counts allocated pages in st_blocks (512-byte units). Pages
  // allocated past the end (FALLOC_FL_KEEP_SIZE) count too and could hide a
  // hole, so more than a huge page's worth of them is refused as well.
  // (SEEK_HOLE cannot tell: tmpfs reports reserved, unwritten pages as holes.)
  // hugetlbfs counts its huge pages the same way.
  const std::uint64_t blocks_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512u;
  (void)resolve_dir(dir, name);  // refuses a directory on a disk file system
  // The file's own file system decides its page size.
  struct statfs fs {};
  const std::uint64_t huge_page = ::fstatfs(raw, &fs) == 0 && static_cast<std::uint64_t>(fs.f_type) == HUGETLBFS_MAGIC
                                      ? static_cast<std::uint64_t>(fs.f_bsize)
                                      : 0;
  const std::uint64_t kHugePage = std::max<std::uint64_t>(huge_page, 2u << 20);
  if (blocks_bytes < file_size || blocks_bytes > layout::align_up(file_size, kHugePage))
    fail(Errc::not_allocated, name,
         path + " claims " + num(file_size) + " bytes but has " + num(blocks_bytes) + " allocated " +
             (blocks_bytes < file_size ? "(a sparse file)" : "(pages past its end)") + ": refusing to map it");
  try {
    seg->region_ = std::make_unique<bip::mapped_region>(FdMapping{raw}, rw ? bip::read_write : bip::read_only, 0,
                                                        file_size);
  } catch (const bip::interprocess_exception& e) {
    fail(errc_from_interprocess(e), name, "cannot map " + path + ": " + describe(e));
  }
  HeaderValues values;
  if (const auto problem =
          validate_header(*static_cast<const layout::SegmentHeader*>(seg->region_->get_address()), file_size, values,
                          huge_page ? huge_page : 1))
    fail(problem->code, name, problem->what);
  seg->attach(name, values, rw, dir);
  return seg;
}

Segment::~Segment() {
  if (fd_ >= 0) ::close(fd_);
}

RoleFd Segment::open_role_fd() const {
  // Through our own descriptor where /proc is mounted (the file may have
  // lost its name meanwhile), else by path; either way it must be the
  // file we mapped.
  const std::string self = "/proc/self/fd/" + std::to_string(fd_);
  struct stat st {};
  RoleFd f = RoleFd::open(self.c_str(), O_RDWR | O_NONBLOCK | O_NOCTTY);
  if (f && ::fstat(f.get(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) return f;
  f = RoleFd::open(path_.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  const int err = f ? 0 : errno;
  if (f && ::fstat(f.get(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) return f;
  if (err == ENOENT || err == 0)
    fail(Errc::not_found, info_.name, path_ + " was removed (or replaced by another file) since it was opened");
  fail(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system, info_.name,
       "cannot open " + path_ + " again: " + std::strerror(err));
}

Holder Segment::reader_holder(std::uint32_t i) const noexcept {
  return test_lock(fd_, layout::reader_lock_byte(i));
}
Holder Segment::producer_holder() const noexcept { return test_lock(fd_, layout::kProducerLockByte); }
Holder Segment::bookmark_holder(std::uint32_t i) const noexcept {
  return test_lock(fd_, layout::bookmark_lock_byte(info_.max_readers, i));
}

std::uint64_t oldest_retained(const Segment& s, std::uint64_t head) noexcept {
  const std::uint64_t floor = head > s.capacity() ? head - s.capacity() : 0;
  if (s.overwrite()) return floor;
  const std::uint64_t o = s.header()->oldest.load(std::memory_order_acquire);
  return (o < floor || o > head) ? floor : o;
}

}  // namespace shmbus::detail
