// Where buses live: the default directory, checking a directory, and what
// backs the memory of a segment in it.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "segment.hpp"

namespace shmbus {
namespace {

std::mutex g_dir_mutex;
std::string g_dir;  // set_bus_dir's; empty: $SHMBUS_DIR or /dev/shm

std::string size_label(std::uint64_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

// A file system's name, for messages.
std::string fs_name(std::uint64_t magic) {
  switch (magic) {
    case TMPFS_MAGIC: return "tmpfs";
    case HUGETLBFS_MAGIC: return "hugetlbfs";
    case RAMFS_MAGIC: return "ramfs";
    case EXT4_SUPER_MAGIC: return "ext2/3/4";
    case XFS_SUPER_MAGIC: return "xfs";
    case BTRFS_SUPER_MAGIC: return "btrfs";
    case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
    case NFS_SUPER_MAGIC: return "nfs";
    case 0x65735546: return "fuse";
    case 0x01021997: return "9p";
    default: break;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "file system type 0x%llx", static_cast<unsigned long long>(magic));
  return buf;
}

[[noreturn]] void bad_dir(std::string_view bus, const std::string& dir, const std::string& what) {
  std::string msg = bus.empty() ? std::string() : detail::bus_prefix(bus);
  throw Error(Errc::bad_directory, msg + "bus directory " + dir + what);
}

// The super options of the mount holding device `dev` ("rw,size=...,huge=always"),
// from /proc/self/mountinfo; empty if it cannot be told.
std::string mount_options(dev_t dev) {
  std::ifstream in("/proc/self/mountinfo");
  const std::string want = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, parent, devno;
    if (!(f >> id >> parent >> devno) || devno != want) continue;
    const auto sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    std::istringstream rest(line.substr(sep + 3));
    std::string type, source, opts;
    if (rest >> type >> source >> opts) return opts;
  }
  return {};
}

std::uint64_t read_number(const char* path, std::uint64_t fallback) {
  std::ifstream in(path);
  std::uint64_t v = 0;
  return (in >> v) ? v : fallback;
}

}  // namespace

std::string bus_dir() {
  {
    std::lock_guard lock(g_dir_mutex);
    if (!g_dir.empty()) return g_dir;
  }
  const char* env = std::getenv("SHMBUS_DIR");
  return env && *env ? std::string(env) : std::string(system_bus_dir);
}

void set_bus_dir(std::string_view dir) {
  std::string resolved = dir.empty() ? std::string() : detail::resolve_dir(dir, {}).path;
  std::lock_guard lock(g_dir_mutex);
  g_dir = std::move(resolved);
}

void check_bus_dir(std::string_view dir) { (void)detail::resolve_dir(dir, {}); }

namespace detail {

std::string absolute_dir(std::string_view dir) {
  std::string d = dir.empty() ? bus_dir() : std::string(dir);
  if (d.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) d = std::string(cwd) + "/" + d;
  }
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

BusDir resolve_dir(std::string_view dir, std::string_view bus) {
  BusDir out;
  out.path = absolute_dir(dir);
  // The directory is the user's choice, so a symlink to one is followed.
  struct stat st {};
  if (::stat(out.path.c_str(), &st) != 0) {
    const int err = errno;
    bad_dir(bus, out.path, err == ENOENT ? std::string(" does not exist") : std::string(": ") + std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) bad_dir(bus, out.path, " is not a directory");
  struct statfs fs {};
  if (::statfs(out.path.c_str(), &fs) != 0) bad_dir(bus, out.path, std::string(": statfs: ") + std::strerror(errno));
  const auto type = static_cast<std::uint64_t>(fs.f_type);
  if (type == HUGETLBFS_MAGIC) {
    out.hugetlbfs = true;
    out.huge_page = static_cast<std::uint64_t>(fs.f_bsize);
  } else if (type != TMPFS_MAGIC) {
    bad_dir(bus, out.path,
            " is on " + fs_name(type) +
                ", not tmpfs or hugetlbfs: a bus there would be written back to disk (use /dev/shm or another "
                "tmpfs or hugetlbfs mount)");
  }
  return out;
}

std::string path_in(const std::string& dir, std::string_view name) {
  return (dir == "/" ? std::string() : dir) + "/shmbus." + std::string(name);
}

std::string describe_pages(int fd, std::uint64_t& page_size) {
  page_size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  struct statfs fs {};
  struct stat st {};
  if (::fstatfs(fd, &fs) != 0 || ::fstat(fd, &st) != 0) return "unknown";
  if (static_cast<std::uint64_t>(fs.f_type) == HUGETLBFS_MAGIC) {
    page_size = static_cast<std::uint64_t>(fs.f_bsize);
    return "hugetlbfs, " + size_label(page_size) + " huge pages";
  }
  const std::string name = fs_name(static_cast<std::uint64_t>(fs.f_type));
  const std::string base = name + ", " + size_label(page_size) + " pages";
  if (static_cast<std::uint64_t>(fs.f_type) != TMPFS_MAGIC) return base;
  // tmpfs hands out transparent huge pages as its huge= mount option says,
  // unless the system-wide shmem_enabled forbids (deny) or forces them.
  std::string policy;
  {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    std::string word;
    while (in >> word) {
      if (word.front() == '[') policy = word.substr(1, word.size() - 2);
    }
  }
  std::string huge;
  std::string opts = mount_options(st.st_dev);
  opts.insert(opts.begin(), ',');
  opts.push_back(',');
  if (const auto at = opts.find(",huge="); at != std::string::npos)
    huge = opts.substr(at + 6, opts.find(',', at + 1) - at - 6);
  if (policy == "force") huge = "always";
  if (policy == "deny" || huge.empty() || huge == "never") return base;
  const std::uint64_t pmd = read_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", 2u << 20);
  if (huge == "advise") return "tmpfs huge=advise, " + size_label(page_size) + " pages (shmbus does not madvise)";
  return "tmpfs huge=" + huge + ", " + size_label(pmd) + " transparent huge pages where aligned";
}

}  // namespace detail
}  // namespace shmbus
