#include "tools/common/trust.hpp"

#include <grp.h>
#include <pwd.h>

#include <charconv>
#include <stdexcept>

namespace shmbus::tools {
namespace {

// A decimal id, or nothing.
template <class Id>
bool parse_id(const std::string& s, Id& out) {
  unsigned long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return false;
  out = static_cast<Id>(v);
  return static_cast<unsigned long>(out) == v;
}

}  // namespace

void add_trust_options(CLI::App& app, TrustArgs& args) {
  app.add_option("--trust-owner", args.owners,
                 "Also use a bus whose segment belongs to USER (name or uid); by default only your "
                 "own and root's are used (repeatable)")
      ->type_name("USER")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--trust-group", args.groups,
                 "Also use a bus whose segment's group is GROUP (name or gid), e.g. a bus shared "
                 "with mode 0660 (repeatable)")
      ->type_name("GROUP")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

Trust resolve_trust(const TrustArgs& args) {
  Trust t;
  char buf[4096];
  for (const std::string& o : args.owners) {
    uid_t uid = 0;
    if (!parse_id(o, uid)) {
      passwd pw{}, *found = nullptr;
      if (::getpwnam_r(o.c_str(), &pw, buf, sizeof buf, &found) != 0 || !found)
        throw std::invalid_argument("--trust-owner: no such user '" + o + "'");
      uid = pw.pw_uid;
    }
    t.owners.push_back(uid);
  }
  for (const std::string& g : args.groups) {
    gid_t gid = 0;
    if (!parse_id(g, gid)) {
      group gr{}, *found = nullptr;
      if (::getgrnam_r(g.c_str(), &gr, buf, sizeof buf, &found) != 0 || !found)
        throw std::invalid_argument("--trust-group: no such group '" + g + "'");
      gid = gr.gr_gid;
    }
    t.groups.push_back(gid);
  }
  return t;
}

}  // namespace shmbus::tools
