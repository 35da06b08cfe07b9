// Buses in a directory other than /dev/shm: BusOptions/OpenOptions::dir,
// set_bus_dir(), $SHMBUS_DIR, the checks on a directory, and huge pages on
// hugetlbfs (as root, when a private mount can be made; skipped otherwise).
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <shmbus/shmbus.hpp>

#include "layout.hpp"
#include "segment.hpp"

namespace {

using shmbus::Bus;
using shmbus::BusOptions;
using shmbus::Errc;
using shmbus::Error;
using shmbus::OpenOptions;

// A private directory under /dev/shm (tmpfs), removed with what is in it.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/dev/shm/shmbus-dirtest.XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p) path = p;
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Restores the process default and $SHMBUS_DIR when a test ends.
struct DefaultDirGuard {
  std::string env;
  bool had_env = false;
  DefaultDirGuard() {
    if (const char* e = std::getenv("SHMBUS_DIR")) {
      env = e;
      had_env = true;
    }
  }
  ~DefaultDirGuard() {
    shmbus::set_bus_dir("");
    if (had_env) {
      ::setenv("SHMBUS_DIR", env.c_str(), 1);
    } else {
      ::unsetenv("SHMBUS_DIR");
    }
  }
};

std::string name_for(const char* what) { return std::string("dirtest-") + what + "-" + std::to_string(::getpid()); }

BusOptions small(const std::string& dir) {
  BusOptions o;
  o.capacity = 64;
  o.record_size = 128;
  o.dir = dir;
  return o;
}

bool file_exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

TEST(BusDir, BusCreatedInADirectoryLivesThereAndNowhereElse) {
  TempDir a, b;
  ASSERT_FALSE(a.path.empty());
  const std::string name = name_for("where");
  Bus bus = Bus::create(name, small(a.path));
  EXPECT_EQ(bus.info().dir, a.path);
  EXPECT_EQ(bus.info().path, a.path + "/shmbus." + name);
  EXPECT_TRUE(file_exists(a.path + "/shmbus." + name));
  EXPECT_FALSE(file_exists("/dev/shm/shmbus." + name));
  EXPECT_TRUE(Bus::exists(name, a.path));
  EXPECT_FALSE(Bus::exists(name, b.path));
  EXPECT_FALSE(Bus::exists(name));
  EXPECT_EQ(shmbus::segment_path(name, a.path), a.path + "/shmbus." + name);

  // Visible from its own directory only; the error names the real path.
  OpenOptions in_b;
  in_b.dir = b.path;
  try {
    (void)Bus::open(name, in_b);
    FAIL() << "opened a bus of another directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::not_found);
    EXPECT_NE(std::string(e.what()).find(b.path + "/shmbus." + name), std::string::npos) << e.what();
  }
  OpenOptions in_a;
  in_a.dir = a.path;
  Bus again = Bus::open(name, in_a);
  shmbus::Producer producer(bus);
  shmbus::Consumer consumer(again);
  const std::string text = "in a";
  ASSERT_TRUE(producer.publish(std::as_bytes(std::span(text))));
  const shmbus::ReadResult r = consumer.next(std::chrono::seconds(1));
  ASSERT_EQ(r.status, shmbus::ReadStatus::message);
  EXPECT_EQ(r.message.payload.size(), text.size());

  const auto listed = shmbus::list_buses({}, a.path);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].name, name);
  EXPECT_TRUE(listed[0].snapshot.has_value()) << listed[0].error;
  EXPECT_TRUE(shmbus::list_buses({}, b.path).empty());
  EXPECT_EQ(shmbus::Inspector::open(name, {}, a.path).info().path, a.path + "/shmbus." + name);

  EXPECT_FALSE(Bus::remove(name, b.path));
  EXPECT_TRUE(Bus::remove(name, a.path));
  EXPECT_FALSE(file_exists(a.path + "/shmbus." + name));
}

TEST(BusDir, ProcessDefaultWinsOverEnvironmentWhichWinsOverDevShm) {
  DefaultDirGuard restore;
  TempDir a, b;
  const std::string name = name_for("default");
  ::setenv("SHMBUS_DIR", a.path.c_str(), 1);
  EXPECT_EQ(shmbus::bus_dir(), a.path);
  {
    Bus bus = Bus::create(name, small(""));
    EXPECT_EQ(bus.info().dir, a.path);
  }
  EXPECT_TRUE(file_exists(a.path + "/shmbus." + name));
  shmbus::set_bus_dir(b.path);
  EXPECT_EQ(shmbus::bus_dir(), b.path);
  EXPECT_FALSE(Bus::exists(name));
  {
    Bus bus = Bus::create(name, small(""));
    EXPECT_EQ(bus.info().dir, b.path);
  }
  EXPECT_TRUE(Bus::remove(name));  // from b, the process default
  shmbus::set_bus_dir("");
  EXPECT_EQ(shmbus::bus_dir(), a.path);
  EXPECT_TRUE(Bus::remove(name));  // from a, $SHMBUS_DIR
  ::unsetenv("SHMBUS_DIR");
  EXPECT_EQ(shmbus::bus_dir(), "/dev/shm");
}

// Every unusable directory is one line naming it, and the call fails.
void expect_bad_dir(const std::string& dir, const std::string& says) {
  const std::string name = name_for("bad");
  for (int call = 0; call < 4; ++call) {
    try {
      switch (call) {
        case 0: (void)Bus::create(name, small(dir)); break;
        case 1: (void)Bus::open(name, OpenOptions{.dir = dir}); break;
        case 2: (void)shmbus::list_buses({}, dir); break;
        case 3: shmbus::set_bus_dir(dir); break;
      }
      ADD_FAILURE() << "call " << call << " accepted " << dir;
    } catch (const Error& e) {
      EXPECT_EQ(e.errc(), Errc::bad_directory) << e.what();
      const std::string what = e.what();
      EXPECT_NE(what.find("bus directory " + dir), std::string::npos) << what;
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_EQ(shmbus::bus_dir(), std::getenv("SHMBUS_DIR") ? std::getenv("SHMBUS_DIR") : "/dev/shm");
}

TEST(BusDir, MissingDirectoryIsRefusedNamingIt) {
  TempDir a;
  expect_bad_dir(a.path + "/missing", "does not exist");
}

TEST(BusDir, FileIsNotADirectory) {
  TempDir a;
  const std::string file = a.path + "/plain";
  std::ofstream(file) << "x";
  expect_bad_dir(file, "is not a directory");
}

TEST(BusDir, DiskFileSystemIsRefused) {
  // The first of these that is not on tmpfs or hugetlbfs.
  for (const char* dir : {"/var/tmp", "/tmp", "/var", "/usr", "/"}) {
    struct statfs fs {};
    if (::statfs(dir, &fs) != 0 || fs.f_type == TMPFS_MAGIC || fs.f_type == HUGETLBFS_MAGIC) continue;
    expect_bad_dir(dir == std::string("/") ? "/" : dir, "not tmpfs or hugetlbfs");
    return;
  }
  GTEST_SKIP() << "every candidate directory is on tmpfs";
}

TEST(BusDir, AbandonedCreationsAreCleanedInTheirOwnDirectory) {
  TempDir a;
  const std::string name = name_for("temps");
  const std::string temp = a.path + "/.shmbus." + name + ".ABCDEF";
  std::ofstream(temp) << "half made";
  const auto removed = shmbus::remove_abandoned_creations(name, a.path);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], temp);
  EXPECT_FALSE(file_exists(temp));
}

TEST(BusDir, HeaderRoundedToAHugePageValidatesOnlyWithThatGranule) {
  // A segment on hugetlbfs is its header's size rounded up to a huge page.
  std::vector<std::byte> bytes(sizeof(shmbus::layout::SegmentHeader));
  auto* h = new (bytes.data()) shmbus::layout::SegmentHeader{};
  const std::uint64_t cap = 64, rec = 128;
  h->magic = shmbus::layout::kMagic;
  h->header_size = sizeof(shmbus::layout::SegmentHeader);
  h->record_size = rec;
  h->max_readers = 4;
  h->capacity = cap;
  h->policy = 1;
  h->reader_slot_size = sizeof(shmbus::layout::ReaderSlot);
  h->reader_table_offset = sizeof(shmbus::layout::SegmentHeader);
  h->log_offset = shmbus::layout::log_offset_for(4, cap);
  h->segment_size = h->log_offset + cap * rec;
  h->layout_version.store(shmbus::layout::kLayoutVersion, std::memory_order_relaxed);
  const std::uint64_t size = h->segment_size;
  const std::uint64_t huge = 2u << 20;
  shmbus::detail::HeaderValues v;
  EXPECT_FALSE(shmbus::detail::validate_header(*h, size, v));
  EXPECT_TRUE(shmbus::detail::validate_header(*h, shmbus::layout::align_up(size, huge), v));
  EXPECT_FALSE(shmbus::detail::validate_header(*h, shmbus::layout::align_up(size, huge), v, huge));
  EXPECT_TRUE(shmbus::detail::validate_header(*h, shmbus::layout::align_up(size, huge) + huge, v, huge));
  EXPECT_TRUE(shmbus::detail::validate_header(*h, size + 4096, v, huge));
}

// A private hugetlbfs mount with a few free 2 MiB pages, or a reason why not.
struct HugeMount {
  std::string path;
  std::string skip;
  long saved_pages = -1;
  HugeMount() {
    if (::geteuid() != 0) {
      skip = "not root: cannot mount hugetlbfs";
      return;
    }
    char tmpl[] = "/tmp/shmbus-huge.XXXXXX";
    if (!::mkdtemp(tmpl)) {
      skip = "mkdtemp failed";
      return;
    }
    if (::mount("none", tmpl, "hugetlbfs", 0, "pagesize=2M,mode=0700") != 0) {
      skip = std::string("cannot mount hugetlbfs: ") + std::strerror(errno);
      ::rmdir(tmpl);
      return;
    }
    path = tmpl;
    if (free_pages() < 4) {
      std::ifstream("/proc/sys/vm/nr_hugepages") >> saved_pages;
      std::ofstream("/proc/sys/vm/nr_hugepages") << saved_pages + 4;
      if (free_pages() < 4) skip = "cannot raise /proc/sys/vm/nr_hugepages to get 4 free 2 MiB pages";
    }
  }
  static long free_pages() {
    std::ifstream in("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    long n = 0;
    in >> n;
    return n;
  }
  ~HugeMount() {
    if (!path.empty()) {
      std::system(("rm -f '" + path + "'/* '" + path + "'/.shmbus.* 2>/dev/null").c_str());
      ::umount(path.c_str());
      ::rmdir(path.c_str());
    }
    if (saved_pages >= 0) std::ofstream("/proc/sys/vm/nr_hugepages") << saved_pages;
  }
};

TEST(BusDir, HugetlbfsBusIsRoundedToHugePagesAndWorks) {
  HugeMount m;
  if (!m.skip.empty()) GTEST_SKIP() << m.skip;
  const std::string name = name_for("huge");
  BusOptions o = small(m.path);  // a few KiB: one 2 MiB page
  Bus bus = Bus::create(name, o);
  EXPECT_EQ(bus.info().page_size, 2u << 20);
  EXPECT_EQ(bus.info().pages, "hugetlbfs, 2 MiB huge pages");
  struct stat st {};
  ASSERT_EQ(::stat(bus.info().path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 2 << 20);
  EXPECT_LT(bus.info().segment_size, std::uint64_t{2} << 20);
  Bus opened = Bus::open(name, OpenOptions{.dir = m.path});
  shmbus::Producer producer(bus);
  shmbus::Consumer consumer(opened);
  for (int i = 0; i < 200; ++i) {  // laps of the ring
    const std::string text = "huge " + std::to_string(i);
    ASSERT_TRUE(producer.publish(std::as_bytes(std::span(text))));
    const shmbus::ReadResult r = consumer.next(std::chrono::seconds(1));
    ASSERT_EQ(r.status, shmbus::ReadStatus::message);
    ASSERT_EQ(r.message.seq, static_cast<std::uint64_t>(i));
  }
  EXPECT_TRUE(shmbus::Inspector::open(name, {}, m.path).check().empty());
  EXPECT_TRUE(Bus::remove(name, m.path));
}

TEST(BusDir, HugetlbfsWithoutFreePagesIsNoSpaceAtCreation) {
  HugeMount m;
  if (!m.skip.empty()) GTEST_SKIP() << m.skip;
  // More huge pages than are free.
  BusOptions o = small(m.path);
  o.record_size = 1u << 20;
  o.capacity = static_cast<std::uint64_t>(std::bit_ceil(static_cast<unsigned long>(HugeMount::free_pages() * 2 + 2)));
  try {
    (void)Bus::create(name_for("nospace"), o);
    FAIL() << "created a bus larger than the free huge pages";
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), Errc::no_space) << e.what();
    EXPECT_NE(std::string(e.what()).find("nr_hugepages"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(Bus::exists(name_for("nospace"), m.path));
}

}  // namespace
