// shmbus — a bus: one named POSIX shared-memory segment.
//
// A bus is a ring-shaped log of fixed-size records in DIR/shmbus.NAME, where
// DIR is /dev/shm unless the caller, the process or $SHMBUS_DIR names another
// tmpfs or hugetlbfs directory (see bus_dir()).
// One Producer appends; any number of Consumers each read every message from
// their own cursor. Create, open or remove a bus here; attach a Producer or a
// Consumer to a Bus to move messages (producer.hpp, consumer.hpp).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shmbus/errors.hpp"

namespace shmbus {

namespace detail {
class Segment;
struct BusAccess;  // the library's own way to a Bus's mapping
}

// What a producer does when the ring is full.
enum class Policy : std::uint32_t {
  // Never overwrite a record a live, attached consumer has not read: wait
  // (spin, then sleep on a futex) until it frees space. Nothing is lost. With
  // no consumer attached, the ring keeps the newest records for late joiners.
  block = 1,
  // Never wait: overwrite the oldest record. A consumer that falls a full ring
  // behind is told exactly how many messages it lost.
  overwrite = 2,
};

const char* to_string(Policy p) noexcept;

// Whose segments a process uses besides its own (docs/SECURITY.md). Every
// open checks the owner of the segment it maps (fstat on that descriptor):
// by default a segment must belong to the caller's effective uid, or to root
// (a system-wide bus; root can read any process's memory anyway). Anything
// else is refused with Errc::foreign_owner unless it is trusted here.
struct Trust {
  std::vector<uid_t> owners;  // also use segments owned by these users
  std::vector<gid_t> groups;  // also use segments whose group is one of these
};

// The ring a bus gets when BusOptions::capacity is 0 (the default), in bytes
// of records: sized to stay in the caches of the cores that write and read
// it rather than to a count of records, so big records do not make a ring
// that lives in memory (docs/bench.md, "The default ring").
inline constexpr std::uint64_t default_ring_bytes = std::uint64_t{4} << 20;
// Never fewer records than this by default, however large they are.
inline constexpr std::uint64_t default_min_capacity = 64;

// The capacity BusOptions::capacity = 0 stands for: the power of two of
// records of `record_size` bytes whose ring is nearest default_ring_bytes
// (between 2.8 and 5.7 MiB), at least default_min_capacity. 256-byte
// records: 16,384 (4 MiB); 192-byte: 16,384 (3 MiB); 4,160-byte: 1,024
// (4.06 MiB).
std::uint64_t default_capacity_for(std::uint32_t record_size) noexcept;

// Where buses live. Every call that names a bus takes an optional directory;
// an empty one means bus_dir(): the directory set_bus_dir() set in this
// process, else $SHMBUS_DIR (when set and not empty), else /dev/shm. A
// directory must be on tmpfs or hugetlbfs: a bus on a disk file system would
// be written back to the disk behind the producer's back and outlive a
// reboot, so it is refused (Errc::bad_directory). On hugetlbfs the segment
// file is rounded up to whole huge pages (docs/huge-pages.md). Every process
// of a bus must name the same directory: a bus in one is not visible in
// another. Anything a bus needs besides its segment (the temporary file it
// is built in) lives beside it there.
inline constexpr const char* system_bus_dir = "/dev/shm";

// The directory an empty `dir` stands for, as given (not checked).
std::string bus_dir();
// Makes `dir` this process's default directory (over $SHMBUS_DIR), after
// check_bus_dir(dir). An empty `dir` goes back to $SHMBUS_DIR or /dev/shm.
// Safe to call from any thread; buses already open keep theirs.
void set_bus_dir(std::string_view dir);
// Checks that `dir` (empty: bus_dir()) can hold buses: it exists, is a
// directory, and is on tmpfs or hugetlbfs. Throws Error(Errc::bad_directory)
// with one line naming the directory and what is wrong.
void check_bus_dir(std::string_view dir = {});

// What open_or_create() does with a bus that already exists with other
// options (policy, capacity, record size or reader slots) than asked.
enum class Existing : std::uint8_t {
  same,   // refuse it: Errc::options_differ, naming both (the default)
  as_is,  // join it with its own options (check info() if they matter)
};

struct BusOptions {
  std::uint64_t capacity = 0;      // records in the ring; a power of two, >= 2; 0: default_capacity_for(record_size)
  std::uint32_t record_size = 256; // bytes per record, header included; a multiple of 8
  Policy policy = Policy::block;
  std::uint32_t max_readers = 16;  // reader slots, 1..1024
  mode_t mode = 0600;              // permission bits of the segment
  Trust trust{};                   // open_or_create: whose existing segment it may join
  Existing existing = Existing::same;  // open_or_create: one with other options than these
  std::string dir{};               // directory of the segment; empty: bus_dir()
};

struct OpenOptions {
  // Unused: a bus appears under its name only once its creator has finished
  // it (create() builds it under a temporary name and renames it), so an
  // open never waits. Kept so that existing callers still compile.
  std::chrono::milliseconds ready_timeout{2000};
  Trust trust{};
  std::string dir{};  // directory of the segment; empty: bus_dir()
};

// Limits checked by create() (and by open(), which trusts nothing it maps).
inline constexpr std::uint64_t max_capacity = std::uint64_t{1} << 32;
inline constexpr std::uint32_t max_record_size = 1u << 20;
inline constexpr std::uint32_t max_readers_limit = 1024;
inline constexpr std::size_t max_name_length = 200;

// Bytes of payload a record of `record_size` bytes can carry.
std::uint32_t max_payload_for(std::uint32_t record_size) noexcept;
// The record size for `payload`-byte messages: the fewest whole cache lines
// (64 bytes) that hold it with its header, so 128-byte payloads take 192
// (0 if none does: more than max_record_size - 24). A record size that is
// only a multiple of 8 saves memory, but then neighbouring records share a
// cache line, which the producer writes while a reader close behind reads
// it, and fewer messages per second get through (docs/bench.md, "Figures
// behind the defaults").
std::uint32_t record_size_for(std::uint32_t payload) noexcept;

// Checks a bus name: 1..max_name_length characters from [A-Za-z0-9._-], not
// starting with '.', no "..". Throws Error(Errc::invalid_name) naming the
// problem.
void validate_name(std::string_view name);

// The path of a bus's segment in `dir` (empty: bus_dir()), e.g.
// "/dev/shm/shmbus.NAME".
std::string segment_path(std::string_view name, std::string_view dir = {});

// A fixed description of an open bus.
struct BusInfo {
  std::string name;
  Policy policy;
  std::uint64_t capacity;
  std::uint32_t record_size;
  std::uint32_t max_payload;  // the longest message that fits one record (record_size - 24)
  // The longest message the bus accepts: one longer than max_payload spans
  // consecutive records (half the ring at most, and at most 1 GiB).
  std::uint32_t max_message;
  std::uint32_t max_readers;
  std::uint64_t segment_size;
  std::uint64_t creation_time_ns;  // CLOCK_REALTIME
  std::uint32_t layout_version;
  std::string dir;        // the directory the segment is in (absolute)
  std::string path;       // dir + "/shmbus." + name
  // Bytes per page of the memory behind the segment: the huge page size on
  // hugetlbfs, else the base page size (transparent huge pages aside).
  std::uint64_t page_size = 0;
  // What backs it, for people: "hugetlbfs, 2 MiB huge pages", "tmpfs, 4 KiB
  // pages", "tmpfs huge=always, 2 MiB transparent huge pages where aligned".
  std::string pages;
};

// A handle to a mapped bus. Cheap to copy (it shares the mapping); the mapping
// lives as long as any Bus, Producer or Consumer made from it.
class Bus {
 public:
  // Creates a new bus, exclusively: throws Errc::already_exists if it exists.
  // The whole segment is reserved up front, so a full /dev/shm (or a
  // hugetlbfs without enough free huge pages) is Errc::no_space here, never
  // a SIGBUS later.
  static Bus create(std::string_view name, const BusOptions& options = {});

  // Opens an existing bus and validates its header against the real segment
  // size before using anything in it. Never waits (`ready_timeout` is
  // unused: see OpenOptions). A FIFO, device, symlink or hard-linked file at
  // the path is refused (Errc::unsafe_file).
  // The segment must be owned by us, by root, or be trusted (Errc::foreign_owner),
  // and be fully allocated (Errc::not_allocated: a sparse file would fill
  // /dev/shm on first touch and then raise SIGBUS).
  static Bus open(std::string_view name,
                  std::chrono::milliseconds ready_timeout = std::chrono::milliseconds(2000));
  static Bus open(std::string_view name, const OpenOptions& options);

  // Creates the bus, or opens it if it exists. When two processes race, one
  // creates and the other opens the finished segment. An existing bus is
  // joined only if open() would accept it with options.trust and its mode
  // grants nobody more than options.mode does (Errc::insecure_mode
  // otherwise), and only with the policy, capacity (0: default_capacity_for()
  // the record size), record size and reader slots asked: one with others is
  // refused with Errc::options_differ naming both, unless options.existing
  // is Existing::as_is, which joins it as it is. The C API, the Python
  // module and `shmbus-producer --create` follow the same rule.
  static Bus open_or_create(std::string_view name, const BusOptions& options = {});

  // Removes the segment's name. Processes that have it mapped keep using it.
  // Returns false if it did not exist; throws Errc::permission_denied if we may
  // not remove it (in /dev/shm, sticky, only a segment's owner or root may).
  static bool remove(std::string_view name, std::string_view dir = {});

  // True if a segment of that name exists in `dir` (it may still fail to open).
  static bool exists(std::string_view name, std::string_view dir = {});

  const BusInfo& info() const noexcept;
  const std::string& name() const noexcept;

  // Next sequence number the producer will publish (messages published so far).
  std::uint64_t head() const noexcept;
  // Oldest sequence a late joiner can still start from.
  std::uint64_t oldest() const noexcept;

 private:
  friend struct detail::BusAccess;
  explicit Bus(std::shared_ptr<detail::Segment> s);
  std::shared_ptr<detail::Segment> segment_;
};

}  // namespace shmbus
