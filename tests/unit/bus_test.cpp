// Creating, opening and removing buses: options, names, permissions, every
// setup error, hostile segments, and racing creators.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <latch>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_support.hpp"
#include "shmbus/inspect.hpp"

namespace shmbus::test {
namespace {

using ::testing::HasSubstr;

// Runs `f`, which must throw shmbus::Error with `code`; returns what().
template <class F>
std::string expect_error(Errc code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.errc(), code) << "got " << e.code().message() << ": " << e.what();
    EXPECT_EQ(e.code().category(), category());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-shmbus exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw; expected " << make_error_code(code).message();
  return {};
}

BusOptions small_options() {
  BusOptions o;
  o.capacity = 16;
  o.record_size = 128;
  o.max_readers = 4;
  return o;
}

// ---------------------------------------------------------------- lifecycle

TEST(BusLifecycle, CreateThenOpenSeesTheSameBus) {
  ScopedName name("life");
  EXPECT_FALSE(Bus::exists(name));
  Bus created = Bus::create(name, small_options());
  EXPECT_TRUE(Bus::exists(name));
  Bus opened = Bus::open(name);
  EXPECT_EQ(opened.name(), name.str());
  EXPECT_EQ(opened.info().capacity, 16u);
  EXPECT_EQ(opened.info().record_size, 128u);
  EXPECT_EQ(opened.info().max_readers, 4u);
  EXPECT_EQ(opened.info().policy, Policy::block);
  EXPECT_EQ(opened.info().creation_time_ns, created.info().creation_time_ns);
  EXPECT_EQ(opened.head(), 0u);
  EXPECT_EQ(opened.oldest(), 0u);
}

TEST(BusLifecycle, SegmentLivesInDevShmUnderThePrefixedName) {
  EXPECT_EQ(segment_path("abc"), "/dev/shm/shmbus.abc");
  ScopedName name("path");
  Bus bus = Bus::create(name, small_options());
  EXPECT_GT(file_size(segment_path(name)), 0u);
  EXPECT_EQ(segment_path(name), name.path());
}

TEST(BusLifecycle, DefaultOptionsAreDocumentedValues) {
  BusOptions o;
  EXPECT_EQ(o.capacity, 0u);  // sized in bytes: default_capacity_for()
  EXPECT_EQ(o.record_size, 256u);
  EXPECT_EQ(o.policy, Policy::block);
  EXPECT_EQ(o.max_readers, 16u);
  EXPECT_EQ(o.mode, mode_t{0600});
  ScopedName name("defaults");
  Bus bus = Bus::create(name);
  EXPECT_EQ(bus.info().capacity, default_ring_bytes / 256);
  EXPECT_EQ(bus.info().segment_size, file_size(name.path()));
}

TEST(BusLifecycle, TheDefaultRingIsSizedInBytesWithAFloorOfRecords) {
  // Whatever the record size, a default ring is the power of two of records
  // nearest default_ring_bytes by ratio (within a factor of sqrt(2) of it),
  // never fewer than default_min_capacity.
  EXPECT_EQ(default_capacity_for(64), default_ring_bytes / 64);
  EXPECT_EQ(default_capacity_for(256), default_ring_bytes / 256);
  EXPECT_EQ(default_capacity_for(192), 16384u);   // 3 MiB: nearer than 6 MiB
  EXPECT_EQ(default_capacity_for(320), 16384u);   // 5 MiB: nearer than 2.5 MiB
  EXPECT_EQ(default_capacity_for(1088), 4096u);   // 4.25 MiB
  EXPECT_EQ(default_capacity_for(4160), 1024u);   // 4.06 MiB
  EXPECT_EQ(default_capacity_for(max_record_size), default_min_capacity);
  const double ring = static_cast<double>(default_ring_bytes);
  for (std::uint32_t rs = 64; rs <= max_record_size; rs += 8) {
    const std::uint64_t c = default_capacity_for(rs);
    ASSERT_TRUE(std::has_single_bit(c)) << rs;
    if (c == default_min_capacity) continue;
    const double bytes = static_cast<double>(c) * rs;
    ASSERT_LE(bytes, ring * std::sqrt(2.0)) << rs;
    ASSERT_GE(bytes, ring / std::sqrt(2.0)) << rs;
  }
  ScopedName name("bigrecords");
  Bus bus = Bus::create(name, {.capacity = 0, .record_size = 4160});
  EXPECT_EQ(bus.info().capacity, 1024u);
}

TEST(BusLifecycle, CreateIsExclusive) {
  ScopedName name("excl");
  Bus bus = Bus::create(name, small_options());
  const std::string what = expect_error(Errc::already_exists, [&] { Bus::create(name, small_options()); });
  EXPECT_THAT(what, HasSubstr(name.str()));
}

TEST(BusLifecycle, OpenOfMissingBusIsNotFound) {
  ScopedName name("missing");
  const std::string what = expect_error(Errc::not_found, [&] { Bus::open(name); });
  EXPECT_THAT(what, HasSubstr(name.str()));
}

TEST(BusLifecycle, RemoveReturnsWhetherItExisted) {
  ScopedName name("remove");
  EXPECT_FALSE(Bus::remove(name));
  { Bus bus = Bus::create(name, small_options()); }
  EXPECT_TRUE(Bus::remove(name));
  EXPECT_FALSE(Bus::exists(name));
  EXPECT_FALSE(Bus::remove(name));
  expect_error(Errc::not_found, [&] { Bus::open(name); });
}

TEST(BusLifecycle, RemovedBusStaysUsableByProcessesThatMappedIt) {
  ScopedName name("unlinked");
  Bus bus = Bus::create(name, small_options());
  Consumer c(bus);
  Producer p(bus);
  EXPECT_TRUE(Bus::remove(name));
  ASSERT_TRUE(p.publish(bytes("still here")));
  ReadResult r = c.next(1s);
  ASSERT_EQ(r.status, ReadStatus::message);
  EXPECT_EQ(text(r.message.payload), "still here");
  // The name is free again: a new bus can be created under it.
  Bus fresh = Bus::create(name, small_options());
  EXPECT_EQ(fresh.head(), 0u);
}

TEST(BusLifecycle, OpenOrCreateCreatesOnceThenOpensOnlyWithTheOptionsAskedUnlessAsIs) {
  ScopedName name("ooc");
  BusOptions a = small_options();
  a.capacity = 32;
  Bus first = Bus::open_or_create(name, a);
  EXPECT_EQ(first.info().capacity, 32u);
  Bus again = Bus::open_or_create(name, a);
  EXPECT_EQ(again.info().creation_time_ns, first.info().creation_time_ns);

  BusOptions b = small_options();
  b.capacity = 1024;
  b.policy = Policy::overwrite;
  const std::string what = expect_error(Errc::options_differ, [&] { Bus::open_or_create(name, b); });
  EXPECT_NE(what.find("exists as block 32 x"), std::string::npos) << what;
  EXPECT_NE(what.find("not overwrite 1024 x"), std::string::npos) << what;
  for (auto change : std::initializer_list<void (*)(BusOptions&)>{
           [](BusOptions& o) { o.record_size += 64; }, [](BusOptions& o) { o.max_readers += 1; },
           [](BusOptions& o) { o.capacity = 0; }}) {
    BusOptions c = a;
    change(c);
    expect_error(Errc::options_differ, [&] { Bus::open_or_create(name, c); });
  }

  b.existing = Existing::as_is;
  Bus second = Bus::open_or_create(name, b);
  EXPECT_EQ(second.info().capacity, 32u) << "as_is: an existing bus keeps its own options";
  EXPECT_EQ(second.info().policy, Policy::block);
  EXPECT_EQ(second.info().creation_time_ns, first.info().creation_time_ns);
}

TEST(BusLifecycle, OpenOrCreateTakesCapacityZeroAsTheDefaultRingForItsRecordSize) {
  ScopedName name("ooc-default");
  BusOptions d;
  d.record_size = 128;
  Bus first = Bus::open_or_create(name, d);
  EXPECT_EQ(first.info().capacity, default_capacity_for(128));
  d.capacity = default_capacity_for(128);
  EXPECT_EQ(Bus::open_or_create(name, d).info().creation_time_ns, first.info().creation_time_ns);
}

TEST(BusLifecycle, BusHandleKeepsTheMappingAliveForProducersAndConsumers) {
  ScopedName name("handle");
  std::optional<Producer> p;
  std::optional<Consumer> c;
  {
    Bus bus = Bus::create(name, small_options());
    Bus copy = bus;  // cheap copy sharing the mapping
    c.emplace(copy);
    p.emplace(bus);
  }
  ASSERT_TRUE(p->publish(bytes("x")));
  EXPECT_EQ(c->next(1s).status, ReadStatus::message);
  EXPECT_EQ(p->bus().name(), name.str());
  EXPECT_EQ(c->bus().name(), name.str());
}

// ---------------------------------------------------------------- options

struct BadOptions {
  const char* why;
  BusOptions options;
};

BusOptions with(void (*edit)(BusOptions&)) {
  BusOptions o = small_options();
  edit(o);
  return o;
}

TEST(BusOptionsValidation, ImpossibleOptionsAreRejectedBeforeAnythingIsCreated) {
  const BadOptions cases[] = {
      {"capacity 1", with([](BusOptions& o) { o.capacity = 1; })},
      {"capacity 3", with([](BusOptions& o) { o.capacity = 3; })},
      {"capacity 1000", with([](BusOptions& o) { o.capacity = 1000; })},
      {"capacity 2^33", with([](BusOptions& o) { o.capacity = std::uint64_t{1} << 33; })},
      {"record size 0", with([](BusOptions& o) { o.record_size = 0; })},
      {"record size 32 (too small)", with([](BusOptions& o) { o.record_size = 32; })},
      {"record size 100 (not a multiple of 8)", with([](BusOptions& o) { o.record_size = 100; })},
      {"record size 130", with([](BusOptions& o) { o.record_size = 130; })},
      {"record size 60 (too small)", with([](BusOptions& o) { o.record_size = 60; })},
      {"record size above max", with([](BusOptions& o) { o.record_size = max_record_size + 64; })},
      {"max readers 0", with([](BusOptions& o) { o.max_readers = 0; })},
      {"max readers 1025", with([](BusOptions& o) { o.max_readers = 1025; })},
      {"policy 0", with([](BusOptions& o) { o.policy = static_cast<Policy>(0); })},
      {"policy 7", with([](BusOptions& o) { o.policy = static_cast<Policy>(7); })},
  };
  for (const BadOptions& c : cases) {
    SCOPED_TRACE(c.why);
    ScopedName name("badopt");
    const std::string what = expect_error(Errc::invalid_options, [&] { Bus::create(name, c.options); });
    EXPECT_THAT(what, HasSubstr(name.str()));
    EXPECT_FALSE(Bus::exists(name)) << "a rejected create must not leave a segment behind";
    expect_error(Errc::invalid_options, [&] { Bus::open_or_create(name, c.options); });
    EXPECT_FALSE(Bus::exists(name));
  }
}

TEST(BusOptionsValidation, BoundaryOptionsAreAccepted) {
  const BusOptions cases[] = {
      with([](BusOptions& o) { o.capacity = 2; }),
      with([](BusOptions& o) { o.record_size = 64; }),
      with([](BusOptions& o) { o.record_size = 152; }),  // a multiple of 8: records share cache lines
      with([](BusOptions& o) { o.record_size = 4096; }),
      with([](BusOptions& o) { o.max_readers = 1; }),
      with([](BusOptions& o) { o.max_readers = 1024; }),
      with([](BusOptions& o) { o.policy = Policy::overwrite; }),
  };
  for (const BusOptions& o : cases) {
    ScopedName name("okopt");
    Bus bus = Bus::create(name, o);
    EXPECT_EQ(bus.info().capacity, o.capacity);
    EXPECT_EQ(bus.info().record_size, o.record_size);
    EXPECT_EQ(bus.info().max_readers, o.max_readers);
    EXPECT_EQ(bus.info().max_payload, o.record_size - 24);
    EXPECT_EQ(bus.info().segment_size, file_size(name.path()));
  }
}

TEST(BusOptionsValidation, SegmentLargerThanDevShmIsNoSpaceAtCreation) {
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs("/dev/shm", &vfs), 0);
  const std::uint64_t total = std::uint64_t{vfs.f_blocks} * vfs.f_frsize;
  if (total == 0) GTEST_SKIP() << "/dev/shm has no size limit";
  BusOptions o;
  o.record_size = max_record_size;
  o.capacity = 2;
  while (o.capacity * o.record_size <= total) o.capacity *= 2;
  ScopedName name("nospace");
  const std::string what = expect_error(Errc::no_space, [&] { Bus::create(name, o); });
  EXPECT_THAT(what, HasSubstr(name.str()));
  EXPECT_FALSE(Bus::exists(name)) << "a failed create must remove its half-made segment";
}

// ---------------------------------------------------------------- names

TEST(BusNames, InvalidNamesAreRejectedByEveryEntryPoint) {
  const std::string bad[] = {
      "",
      "/",
      "a/b",
      "/abs",
      "..",
      "a..b",
      "../etc",
      ".hidden",
      "-looks-like-an-option",
      "has space",
      std::string("nul\0byte", 8),
      "tab\tname",
      "newline\n",
      "bell\x07",
      "del\x7f",
      "\xc3\xa9t\xc3\xa9",  // UTF-8 "été"
      std::string(max_name_length + 1, 'a'),
  };
  for (const std::string& n : bad) {
    SCOPED_TRACE(::testing::PrintToString(n));
    expect_error(Errc::invalid_name, [&] { validate_name(n); });
    expect_error(Errc::invalid_name, [&] { Bus::create(n, small_options()); });
    expect_error(Errc::invalid_name, [&] { Bus::open(n); });
    expect_error(Errc::invalid_name, [&] { Bus::open_or_create(n, small_options()); });
    expect_error(Errc::invalid_name, [&] { Bus::remove(n); });
    expect_error(Errc::invalid_name, [&] { Bus::exists(n); });
  }
}

TEST(BusNames, ValidNamesWork) {
  const std::string tag = std::to_string(::getpid());
  const std::string good[] = {
      "a" + tag,
      "Market-Data_v2.ticks-" + tag,
      "x." + tag,
      std::string(max_name_length - tag.size(), 'n') + tag,
  };
  for (const std::string& n : good) {
    SCOPED_TRACE(n);
    EXPECT_NO_THROW(validate_name(n));
    {
      Bus bus = Bus::create(n, small_options());
      EXPECT_EQ(bus.name(), n);
      EXPECT_TRUE(Bus::exists(n));
    }
    EXPECT_TRUE(Bus::remove(n));
  }
}

TEST(BusNames, InvalidNameErrorSaysWhatIsWrong) {
  const std::string what = expect_error(Errc::invalid_name, [] { validate_name("a/b"); });
  EXPECT_FALSE(what.empty());
  EXPECT_THAT(what, HasSubstr("a/b"));
}

// ---------------------------------------------------------------- permissions

mode_t segment_mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(BusPermissions, SegmentIsOwnerOnlyByDefault) {
  ScopedName name("mode");
  Bus bus = Bus::create(name, small_options());
  EXPECT_EQ(segment_mode(name.path()), mode_t{0600});
}

TEST(BusPermissions, CustomModeIsApplied) {
  const mode_t old = ::umask(022);
  for (mode_t m : {mode_t{0640}, mode_t{0660}, mode_t{0400}}) {
    ScopedName name("mode-custom");
    BusOptions o = small_options();
    o.mode = m;
    Bus bus = Bus::create(name, o);
    EXPECT_EQ(segment_mode(name.path()), m) << std::oct << m;
  }
  ::umask(old);
}

TEST(BusPermissions, OpeningABusWeMayNotReadIsPermissionDenied) {
  ScopedName name("denied");
  { Bus bus = Bus::create(name, small_options()); }
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(name.path().c_str(), 0), 0);
    const std::string what = expect_error(Errc::permission_denied, [&] { Bus::open(name); });
    EXPECT_THAT(what, HasSubstr(name.str()));
    return;
  }
  // As root, permission bits do not apply: open as an unprivileged user in a child.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    int code = 1;
    try {
      Bus::open(name);
      code = 2;
    } catch (const Error& e) {
      code = e.errc() == Errc::permission_denied &&
                     std::string(e.what()).find(name.str()) != std::string::npos
                 ? 0
                 : 3;
    } catch (...) {
      code = 4;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1/3: wrong error (expected permission_denied naming the bus), 2: open succeeded, "
         "10: could not drop privileges";
}

// ---------------------------------------------------------------- hostile local users

// Runs `f` in a child process as uid/gid 65534 (nobody); returns its exit code.
template <class F>
int as_nobody(F&& f) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    ::_exit(f());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ForeignSegments, AnotherUsersSegmentIsRefusedUnlessTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create a segment as a second user";
  ScopedName name("squat");
  // The squatter creates the name first, open to everyone.
  ASSERT_EQ(as_nobody([&] {
              BusOptions o = small_options();
              o.mode = 0666;
              Bus::create(name, o);
              return 0;
            }),
            0);
  const std::string what = expect_error(Errc::foreign_owner, [&] { Bus::open(name); });
  EXPECT_THAT(what, HasSubstr("uid 65534"));
  EXPECT_THAT(what, HasSubstr("mode 0666"));
  EXPECT_THAT(what, HasSubstr(name.str()));
  expect_error(Errc::foreign_owner, [&] { Bus::open_or_create(name, small_options()); });
  expect_error(Errc::foreign_owner, [&] { Inspector::open(name); });
  expect_error(Errc::foreign_owner, [&] { reclaim_dead_readers(name); });

  OpenOptions by_owner;
  by_owner.trust.owners = {65534};
  EXPECT_EQ(Bus::open(name, by_owner).info().capacity, 16u);
  OpenOptions by_group;
  by_group.trust.groups = {65534};
  EXPECT_EQ(Bus::open(name, by_group).info().capacity, 16u);
  BusOptions joining = small_options();
  joining.mode = 0666;
  joining.trust.owners = {65534};
  EXPECT_EQ(Bus::open_or_create(name, joining).info().capacity, 16u);
}

TEST(ForeignSegments, RootsSegmentIsTrustedByEveryone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
  ScopedName name("rootbus");
  BusOptions o = small_options();
  o.mode = 0666;
  Bus bus = Bus::create(name, o);
  EXPECT_EQ(as_nobody([&] { return Bus::open(name).info().capacity == 16u ? 0 : 1; }), 0);
}

TEST(ForeignSegments, OpenOrCreateRefusesAModeWiderThanAsked) {
  ScopedName name("wide");
  BusOptions wide = small_options();
  wide.mode = 0644;
  { Bus bus = Bus::create(name, wide); }
  const std::string what = expect_error(Errc::insecure_mode, [&] { Bus::open_or_create(name, small_options()); });
  EXPECT_THAT(what, HasSubstr("mode 0644, more permissive than the requested 0600"));
  EXPECT_EQ(Bus::open_or_create(name, wide).info().capacity, 16u);
  BusOptions narrower = wide;
  narrower.mode = 0664;  // grants more than the bus does: joining is fine
  EXPECT_EQ(Bus::open_or_create(name, narrower).info().capacity, 16u);
}

TEST(ForeignSegments, RemovingABusWeMayNotRemoveIsPermissionDenied) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to act as a second user";
  ScopedName name("keep");
  BusOptions o = small_options();
  o.mode = 0666;
  { Bus bus = Bus::create(name, o); }
  EXPECT_EQ(as_nobody([&] {
              try {
                Bus::remove(name);
                return 1;
              } catch (const Error& e) {
                return e.errc() == Errc::permission_denied ? 0 : 2;
              }
            }),
            0);
  EXPECT_TRUE(Bus::exists(name));
}

// A sparse segment claims a size it has not allocated: mapping and touching
// it would fill /dev/shm on the opener's behalf, then raise SIGBUS.
TEST(HostileSegments, SparseSegmentIsRefusedBeforeItIsMapped) {
  ScopedName name("sparse");
  BusOptions o = small_options();
  o.capacity = 1u << 16;
  o.record_size = 1024;  // 64 MiB
  { Bus bus = Bus::create(name, o); }
  const int fd = ::open(name.path().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1 << 20, 32 << 20), 0);
  struct stat before {};
  ASSERT_EQ(::fstat(fd, &before), 0);
  ASSERT_LT(before.st_blocks * 512, before.st_size);
  const std::string what = expect_error(Errc::not_allocated, [&] { Bus::open(name, 100ms); });
  EXPECT_THAT(what, HasSubstr("sparse"));
  expect_error(Errc::not_allocated, [&] { Inspector::open(name); });
  expect_error(Errc::not_allocated, [&] { Bus::open_or_create(name, o); });
  struct stat after {};
  ASSERT_EQ(::fstat(fd, &after), 0);
  EXPECT_EQ(after.st_blocks, before.st_blocks) << "opening allocated memory on the opener's behalf";

  // Pages allocated past the end count in st_blocks too: the hole is still found.
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, before.st_size, 40 << 20), 0);
  struct stat padded {};
  ASSERT_EQ(::fstat(fd, &padded), 0);
  ASSERT_GE(padded.st_blocks * 512, padded.st_size) << "the padding did not hide the hole from st_blocks";
  expect_error(Errc::not_allocated, [&] { Bus::open(name, 100ms); });
  expect_error(Errc::not_allocated, [&] { Inspector::open(name); });
  ::close(fd);
}

// ---------------------------------------------------------------- hostile segments

// Creates a valid bus, lets `edit` damage its raw bytes, then expects open()
// to fail with `code` and a message naming the bus.
template <class Edit>
void expect_open_rejects(Errc code, Edit&& edit, std::chrono::milliseconds ready_timeout = 2000ms) {
  ScopedName name("hostile");
  { Bus bus = Bus::create(name, small_options()); }
  {
    RawSegment raw(name.path());
    edit(raw);
  }
  const std::string what = expect_error(code, [&] { Bus::open(name, ready_timeout); });
  EXPECT_THAT(what, HasSubstr(name.str()));
  // The same bus is refused by open_or_create too: it exists, and is not trusted.
  expect_error(code, [&] { Bus::open_or_create(name, small_options()); });
}

TEST(HostileSegments, WrongMagicIsNotABus) {
  expect_open_rejects(Errc::not_a_bus, [](RawSegment& r) { r.header().magic = 0x1122334455667788ULL; });
}

TEST(HostileSegments, OtherLayoutVersionIsRefused) {
  expect_open_rejects(Errc::version_mismatch,
                      [](RawSegment& r) { r.header().layout_version.store(layout::kLayoutVersion + 1); });
  expect_open_rejects(Errc::version_mismatch,
                      [](RawSegment& r) { r.header().layout_version.store(0xffffffffu); });
}

TEST(HostileSegments, SegmentWithoutVersionIsRefusedWithoutWaiting) {
  // A bus appears under its name only once complete, so nothing is worth
  // waiting for: a header without a version is refused at once, however
  // long the caller would have waited.
  const auto start = Clock::now();
  expect_open_rejects(Errc::not_ready, [](RawSegment& r) { r.header().layout_version.store(0); }, 10'000ms);
  EXPECT_LT(Clock::now() - start, 5s);
}

// A temporary file as a creator leaves it at the moment it is killed.
std::string plant_temporary(const std::string& bus, const char* suffix) {
  const std::string path = "/dev/shm/.shmbus." + bus + "." + suffix;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(::ftruncate(fd, 1 << 20), 0);
  EXPECT_EQ(::posix_fallocate(fd, 0, 1 << 20), 0);
  ::close(fd);
  return path;
}

// What a creator at work does to its temporary file: an OFD write lock on
// byte 0, held while the returned descriptor is open; -1 if that failed.
int hold_creation(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(Creation, ABusAppearsUnderItsNameOnlyOnceCompleteAndADeadCreatorsFileIsRemoved) {
  ScopedName name("atomic-create");
  // A creator killed mid-way left only its temporary file: the bus name is
  // free, and the next creation removes the leftover (nobody holds its lock).
  const std::string dead = plant_temporary(name.str(), "DEAD01");
  EXPECT_FALSE(Bus::exists(name));
  expect_error(Errc::not_found, [&] { Bus::open(name); });
  // A creator still at work holds its file's lock: its file is left alone.
  const std::string live = plant_temporary(name.str(), "LIVE01");
  const int held = hold_creation(live);
  ASSERT_GE(held, 0);
  Bus bus = Bus::create(name, small_options());
  struct stat st {};
  EXPECT_NE(::stat(dead.c_str(), &st), 0) << "a dead creator's temporary file is left behind";
  EXPECT_EQ(::stat(live.c_str(), &st), 0) << "a live creator's temporary file was removed";
  ::close(held);
  ::unlink(live.c_str());
  // What is under the name is the whole bus, with one link.
  ASSERT_EQ(::stat(name.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
  EXPECT_EQ(Bus::open(name).info().capacity, 16u);
}

TEST(Creation, GcRemovesWhatADeadCreatorLeftEvenWithoutTheBus) {
  ScopedName name("abandoned");
  const std::string dead = plant_temporary(name.str(), "DEAD02");
  const std::vector<std::string> removed = remove_abandoned_creations(name.str());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], dead);
  struct stat st {};
  EXPECT_NE(::stat(dead.c_str(), &st), 0);
  EXPECT_TRUE(remove_abandoned_creations(name.str()).empty());
}

// list_creations() tells a file a live creator is building (its byte 0
// locked) from one a creator killed mid-way left, without taking either's
// lock; only the dead one's is removed.
TEST(Creation, ListedCreationsTellOneUnderWayFromOneKilledMidWay) {
  ScopedName name("creations");
  const std::string dead = plant_temporary(name.str(), "DEAD03");
  const std::string live = plant_temporary(name.str(), "LIVE03");
  // Names that only look like a creation's are not one.
  const std::string odd = "/dev/shm/.shmbus." + name.str() + ".short";
  std::ofstream(odd) << "x";
  const int held = hold_creation(live);
  ASSERT_GE(held, 0);
  const auto mine = [&] {
    std::vector<CreationFile> out;
    for (CreationFile& f : list_creations())
      if (f.name == name.str()) out.push_back(std::move(f));
    return out;
  };
  std::vector<CreationFile> found = mine();
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].path, dead);
  EXPECT_EQ(found[0].creator, Liveness::dead);
  EXPECT_EQ(found[0].file_size, 1u << 20);
  EXPECT_EQ(found[1].path, live);
  EXPECT_EQ(found[1].creator, Liveness::alive);
  EXPECT_EQ(mine().size(), 2u) << "listing took or changed something";
  EXPECT_EQ(remove_abandoned_creations(name.str()), std::vector<std::string>{dead});
  found = mine();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].path, live);
  ::close(held);  // as its creator's death does
  EXPECT_EQ(mine().at(0).creator, Liveness::dead);
  EXPECT_EQ(remove_abandoned_creations(name.str()), std::vector<std::string>{live});
  EXPECT_TRUE(mine().empty());
  ::unlink(odd.c_str());
}

TEST(HostileSegments, ImpossibleHeaderFieldsAreCorrupt) {
  using H = layout::SegmentHeader;
  const std::pair<const char*, void (*)(H&)> cases[] = {
      {"capacity 0", [](H& h) { h.capacity = 0; }},
      {"capacity 3", [](H& h) { h.capacity = 3; }},
      {"capacity 12", [](H& h) { h.capacity = 12; }},
      {"record_size 0", [](H& h) { h.record_size = 0; }},
      {"record_size 100", [](H& h) { h.record_size = 100; }},
      {"record_size 32", [](H& h) { h.record_size = 32; }},
      {"max_readers 0", [](H& h) { h.max_readers = 0; }},
      {"max_readers 5000", [](H& h) { h.max_readers = 5000; }},
      {"policy 0", [](H& h) { h.policy = 0; }},
      {"policy 9", [](H& h) { h.policy = 9; }},
      {"header_size 100", [](H& h) { h.header_size = 100; }},
      {"reader_slot_size 64", [](H& h) { h.reader_slot_size = 64; }},
      {"reader_table_offset 0", [](H& h) { h.reader_table_offset = 0; }},
      {"reader_table_offset 1 GiB", [](H& h) { h.reader_table_offset = 1ull << 30; }},
      {"log_offset 0", [](H& h) { h.log_offset = 0; }},
      {"log_offset 100", [](H& h) { h.log_offset = 100; }},
      {"log_offset huge", [](H& h) { h.log_offset = ~0ull - 10; }},
      {"segment_size smaller than its parts", [](H& h) { h.segment_size -= 64; }},
      {"segment_size overflow", [](H& h) { h.capacity = 1ull << 62; }},
  };
  for (const auto& [why, edit] : cases) {
    SCOPED_TRACE(why);
    expect_open_rejects(Errc::corrupt, [edit = edit](RawSegment& r) { edit(r.header()); });
  }
}

TEST(HostileSegments, FileShorterThanTheHeaderSaysIsTruncated) {
  // Cut the file: the header is intact but the log is gone.
  expect_open_rejects(Errc::truncated, [](RawSegment& r) {
    ASSERT_EQ(::ftruncate(r.fd(), static_cast<off_t>(r.size() - 4096)), 0);
  });
  expect_open_rejects(Errc::truncated, [](RawSegment& r) {
    ASSERT_EQ(::ftruncate(r.fd(), static_cast<off_t>(r.size() - 1)), 0);
  });
  // Consistent header claiming a bigger ring than the file holds.
  expect_open_rejects(Errc::truncated, [](RawSegment& r) {
    auto& h = r.header();
    h.capacity *= 4;
    h.segment_size = h.log_offset + h.capacity * h.record_size;
  });
}

TEST(HostileSegments, FileCutInsideTheHeaderIsRefused) {
  for (off_t size : {off_t{100}, off_t{511}}) {
    SCOPED_TRACE(size);
    ScopedName name("cut-header");
    { Bus bus = Bus::create(name, small_options()); }
    {
      RawSegment raw(name.path());
      ASSERT_EQ(::ftruncate(raw.fd(), size), 0);
    }
    const std::string what = expect_error(Errc::truncated, [&] { Bus::open(name, 100ms); });
    EXPECT_THAT(what, HasSubstr(name.str()));
  }
}

void write_file(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
}

TEST(HostileSegments, ForeignFileUnderABusNameIsNotABus) {
  ScopedName name("foreign");
  std::string junk;
  for (int i = 0; i < 8192; ++i) junk += static_cast<char>("not a shmbus segment\n"[i % 21]);
  write_file(name.path(), junk);
  const std::string what = expect_error(Errc::not_a_bus, [&] { Bus::open(name, 100ms); });
  EXPECT_THAT(what, HasSubstr(name.str()));
  expect_error(Errc::not_a_bus, [&] { Bus::open_or_create(name, small_options()); });
  EXPECT_EQ(file_size(name.path()), 8192u) << "a foreign file must be left untouched";
}

TEST(HostileSegments, ZeroFilledFileIsNeverTrusted) {
  // All zeros looks like a creator that has not written the header yet.
  ScopedName name("zeros");
  write_file(name.path(), std::string(65536, '\0'));
  try {
    Bus::open(name, 100ms);
    ADD_FAILURE() << "opened an all-zero segment";
  } catch (const Error& e) {
    EXPECT_TRUE(e.errc() == Errc::not_ready || e.errc() == Errc::not_a_bus) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
}

TEST(HostileSegments, EmptyFileIsNeverTrusted) {
  // Zero bytes: a creator between shm_open and reserving the segment, or junk.
  ScopedName name("empty");
  write_file(name.path(), "");
  const auto start = Clock::now();
  try {
    Bus::open(name, 100ms);
    ADD_FAILURE() << "opened an empty segment";
  } catch (const Error& e) {
    EXPECT_TRUE(e.errc() == Errc::not_ready || e.errc() == Errc::truncated) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
  EXPECT_LT(Clock::now() - start, 5s) << "the ready timeout must bound the wait";
}

TEST(HostileSegments, SmallForeignFileIsRefused) {
  ScopedName name("tiny");
  write_file(name.path(), "hello");
  try {
    Bus::open(name, 100ms);
    ADD_FAILURE() << "opened a 5-byte file";
  } catch (const Error& e) {
    EXPECT_TRUE(e.errc() == Errc::truncated || e.errc() == Errc::not_a_bus ||
                e.errc() == Errc::not_ready)
        << e.what();
    EXPECT_THAT(e.what(), HasSubstr(name.str()));
  }
}

// ---------------------------------------------------------------- racing creators

TEST(ConcurrentCreation, TwoThreadsOpenOrCreateOneCreatesBothGetAValidBus) {
  for (int round = 0; round < 25; ++round) {
    ScopedName name("race-t");
    BusOptions o = small_options();
    o.capacity = 256;
    std::latch go(2);
    std::optional<Bus> buses[2];
    std::string errors[2];
    auto run = [&](int i) {
      go.arrive_and_wait();
      try {
        buses[i] = Bus::open_or_create(name, o);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    std::thread a(run, 0), b(run, 1);
    a.join();
    b.join();
    ASSERT_TRUE(buses[0] && buses[1]) << "round " << round << ": " << errors[0] << " | " << errors[1];
    EXPECT_EQ(buses[0]->info().capacity, 256u);
    EXPECT_EQ(buses[1]->info().capacity, 256u);
    EXPECT_EQ(buses[0]->info().creation_time_ns, buses[1]->info().creation_time_ns)
        << "both must see the same segment";
    // They really share it.
    Consumer c(*buses[1]);
    Producer p(*buses[0]);
    ASSERT_TRUE(p.publish(bytes("shared")));
    ReadResult r = c.next(1s);
    ASSERT_EQ(r.status, ReadStatus::message);
    EXPECT_EQ(text(r.message.payload), "shared");
  }
}

TEST(ConcurrentCreation, ProcessesRacingOpenOrCreateAllGetTheSameFinishedBus) {
  constexpr int kProcs = 4;
  for (int round = 0; round < 5; ++round) {
    ScopedName name("race-p");
    BusOptions o = small_options();
    o.capacity = 1u << 14;  // big enough that initialisation takes a moment
    o.record_size = 512;
    int go[2];
    ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
    pid_t pids[kProcs];
    for (pid_t& pid : pids) {
      pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // returns 0 when the parent closes the pipe
        int code = 0;
        try {
          Bus bus = Bus::open_or_create(name, o);
          if (bus.info().capacity != o.capacity || bus.info().record_size != 512) code = 2;
          if (bus.info().segment_size != file_size(segment_path(name))) code = 3;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
          code = 1;
        }
        ::_exit(code);
      }
    }
    ::close(go[0]);
    ::close(go[1]);  // start them all at once
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0) << "1: open_or_create threw, 2: wrong options, 3: size";
    }
    Bus bus = Bus::open(name);
    EXPECT_EQ(bus.info().capacity, o.capacity);
  }
}

}  // namespace
}  // namespace shmbus::test

namespace shmbus::test {
namespace {

TEST(Errors, EveryErrcHasAMessageInTheShmbusCategory) {
  EXPECT_STREQ(category().name(), "shmbus");
  std::set<std::string> messages;
  for (int v = static_cast<int>(Errc::invalid_name); v <= static_cast<int>(Errc::timeout); ++v) {
    const std::error_code ec = static_cast<Errc>(v);  // is_error_code_enum
    EXPECT_EQ(&ec.category(), &category());
    EXPECT_FALSE(ec.message().empty()) << v;
    messages.insert(ec.message());
  }
  EXPECT_EQ(messages.size(), static_cast<std::size_t>(Errc::timeout)) << "messages must tell the codes apart";
  const Error e(Errc::not_found, "bus 'x': no such bus");
  EXPECT_EQ(e.errc(), Errc::not_found);
  EXPECT_EQ(e.code(), make_error_code(Errc::not_found));
  EXPECT_NE(std::string(e.what()).find("bus 'x'"), std::string::npos);
}

TEST(Errors, StatusEnumsHaveNames) {
  EXPECT_STREQ(to_string(Policy::block), "block");
  EXPECT_STREQ(to_string(Policy::overwrite), "overwrite");
  for (ReadStatus s : {ReadStatus::message, ReadStatus::timeout, ReadStatus::end_of_stream, ReadStatus::lost,
                       ReadStatus::corrupt})
    EXPECT_GT(std::strlen(to_string(s)), 0u);
  for (PublishStatus s : {PublishStatus::ok, PublishStatus::too_large, PublishStatus::timeout, PublishStatus::closed})
    EXPECT_GT(std::strlen(to_string(s)), 0u);
}

TEST(ProcessStat, ReadsThisProcessAndNothingForNoProcess) {
  const std::optional<ProcessStat> s = process_stat(::getpid());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->state, 'R');
  EXPECT_GT(s->start_ticks, 0u);
  EXPECT_FALSE(process_stat(0).has_value());
  EXPECT_FALSE(process_stat(-1).has_value());
}

}  // namespace
}  // namespace shmbus::test
