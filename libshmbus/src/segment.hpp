// shmbus — a mapped, validated segment. Private to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "layout.hpp"
#include "record_ring.hpp"
#include "role_lock.hpp"
#include "shmbus/bus.hpp"

namespace boost::interprocess {
class mapped_region;
}

namespace shmbus::detail {

// A bus directory as a segment uses it.
struct BusDir {
  std::string path;             // absolute, no trailing '/'
  bool hugetlbfs = false;
  std::uint64_t huge_page = 0;  // on hugetlbfs: its page size, which a file's size must be a multiple of
};
// `dir` (empty: bus_dir()) made absolute against the working directory.
std::string absolute_dir(std::string_view dir);
// absolute_dir(dir), checked (check_bus_dir). Errors name `bus` if not empty.
BusDir resolve_dir(std::string_view dir, std::string_view bus);
// DIR/shmbus.NAME
std::string path_in(const std::string& dir, std::string_view name);
// What backs the memory of the file open at `fd` (BusInfo::pages), and its
// page size.
std::string describe_pages(int fd, std::uint64_t& page_size);

// "bus 'NAME': " — every error message starts with it.
std::string bus_prefix(std::string_view name);
[[noreturn]] void fail(Errc code, std::string_view bus, const std::string& what);

// The result of checking a header against the real size of its segment.
struct HeaderProblem {
  Errc code;
  std::string what;
};
// The header fields a mapping is built from, as read (once) and validated.
struct HeaderValues {
  std::uint32_t version = 0;
  std::uint32_t record_size = 0;
  std::uint32_t max_readers = 0;
  std::uint64_t capacity = 0;
  Policy policy = Policy::block;
  std::uint64_t log_offset = 0;
  std::uint64_t segment_size = 0;
  std::uint64_t creation_time_ns = 0;
};
// Checks magic, version, every size and offset of `h` against `file_size`,
// reading each field once into `out`. Never touches memory past
// `file_size`. The mapping must be built from `out`, never by reading the
// shared header again (another process could change it after the check).
// On hugetlbfs a file's size is a whole number of huge pages: `granule`
// (1 elsewhere) lets the file be the header's size rounded up to one.
std::optional<HeaderProblem> validate_header(const layout::SegmentHeader& h, std::uint64_t file_size,
                                             HeaderValues& out, std::uint64_t granule = 1);

// The mapping behind a Bus, for the library's own sources (Producer,
// Consumer); Bus keeps it private so that users never see a Segment.
struct BusAccess {
  static const std::shared_ptr<Segment>& segment(const Bus& b) noexcept { return b.segment_; }
};
inline const std::shared_ptr<Segment>& segment_of(const Bus& b) noexcept { return BusAccess::segment(b); }

class Segment {
 public:
  enum class Access { read_write, read_only };

  static std::shared_ptr<Segment> create(std::string_view name, const BusOptions& options);
  // Opens an existing segment: a regular file with one link, owner checked
  // against `trust`, allocation checked against its size, header
  // validated, all before it is used. With `max_mode`, a segment whose mode
  // grants more than it is refused too.
  // `dir` as in OpenOptions::dir.
  static std::shared_ptr<Segment> open(std::string_view name, Access access, const Trust& trust,
                                       std::optional<mode_t> max_mode = std::nullopt, std::string_view dir = {});
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const BusInfo& info() const noexcept { return info_; }
  layout::SegmentHeader* header() const noexcept { return header_; }
  layout::ReaderSlot* reader(std::uint32_t i) const noexcept { return readers_ + i; }
  // There are max_readers() bookmarks.
  layout::Bookmark* bookmark(std::uint32_t i) const noexcept { return bookmarks_ + i; }
  std::uint32_t max_readers() const noexcept { return info_.max_readers; }
  std::uint64_t capacity() const noexcept { return info_.capacity; }
  std::uint32_t record_size() const noexcept { return info_.record_size; }
  std::uint32_t max_payload() const noexcept { return info_.max_payload; }
  std::uint32_t max_message() const noexcept { return info_.max_message; }
  bool overwrite() const noexcept { return info_.policy == Policy::overwrite; }
  std::byte* base() const noexcept { return base_; }
  std::uint64_t size() const noexcept { return size_; }

  // The log, as a ring of records (record_ring.hpp).
  RecordRing ring() const noexcept { return RecordRing(log_, spans_, info_.capacity, info_.record_size); }
  layout::RecordHeader* record(std::uint64_t seq) const noexcept { return ring().record(seq); }

  // A new open file description of this same file (checked by device and
  // inode), through which a role is held. Throws Error (not_found if the
  // bus was removed or replaced since it was opened).
  RoleFd open_role_fd() const;
  // Whether a live process holds a role (layout.hpp, "Role locks"), tested
  // through this mapping's own description, which never holds one.
  Holder reader_holder(std::uint32_t i) const noexcept;
  Holder producer_holder() const noexcept;
  Holder bookmark_holder(std::uint32_t i) const noexcept;
  // The descriptor of the mapped file: never holds a role, only a dead
  // reader's slot lock for as long as it takes to clean it (reclaim_if_dead),
  // one thread at a time.
  int fd() const noexcept { return fd_; }
  std::mutex& reclaim_mutex() const noexcept { return reclaim_mutex_; }

 private:
  Segment() = default;
  void attach(std::string_view name, const HeaderValues& v, bool writable, const std::string& dir);

  BusInfo info_{};
  int fd_ = -1;
  mutable std::mutex reclaim_mutex_;
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::unique_ptr<boost::interprocess::mapped_region> region_;
  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  layout::SegmentHeader* header_ = nullptr;
  layout::ReaderSlot* readers_ = nullptr;
  layout::Bookmark* bookmarks_ = nullptr;
  layout::SpanMark* spans_ = nullptr;
  std::byte* log_ = nullptr;
};

// The oldest sequence a joining reader may start from, given `head`: in a
// block bus the producer's published floor (header.oldest), in an overwrite
// bus head - capacity. The field is untrusted: clamped to what can exist.
std::uint64_t oldest_retained(const Segment& s, std::uint64_t head) noexcept;

// Removes the temporary files (.shmbus.NAME.XXXXXX) that creators of `bus`
// who died mid-way left behind in `dir` (absolute): those whose creator lock
// nobody holds, and that this process may remove. Returns their paths.
std::vector<std::string> remove_dead_temporaries(std::string_view bus, const std::string& dir);

// A creation's temporary file (layout.hpp: .shmbus.NAME.XXXXXX), as found.
struct Temporary {
  std::string bus;   // the NAME it is (or was) to become
  std::string path;
  std::uint64_t file_size = 0;
  // Its creator lock: alive while a creator builds it, none once the
  // creator is gone, unknown if it could not be tested (a file we may not
  // open, or not a regular file).
  Holder creator = Holder::unknown;
};
// Every temporary file in `dir` (absolute), unsorted. Looks at each file
// without taking its lock or changing it. Throws Errc::bad_directory if
// `dir` cannot be read.
std::vector<Temporary> find_temporaries(const std::string& dir);

}  // namespace shmbus::detail
