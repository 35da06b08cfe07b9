// shmbus — owner trust: whose segment a process may map (docs/SECURITY.md).
#include "trust.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "segment.hpp"

namespace shmbus::detail {

namespace {

std::string user_label(uid_t uid) {
  std::string s = "uid " + std::to_string(uid);
  passwd pw{}, *found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) s += " (" + std::string(pw.pw_name) + ")";
  return s;
}

std::string group_label(gid_t gid) {
  std::string s = "gid " + std::to_string(gid);
  group gr{}, *found = nullptr;
  char buf[1024];
  if (::getgrgid_r(gid, &gr, buf, sizeof buf, &found) == 0 && found) s += " (" + std::string(gr.gr_name) + ")";
  return s;
}

}  // namespace

std::string mode_label(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

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

}  // namespace shmbus::detail
