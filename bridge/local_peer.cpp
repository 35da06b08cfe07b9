#include "bridge/local_peer.hpp"

#include <arpa/inet.h>
#include <grp.h>
#include <ifaddrs.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

namespace shmbus::bridge {

namespace {

// An endpoint as inet_diag spells it: family, address in 16 bytes (IPv4 in
// the first 4), port in network order. A v4-mapped IPv6 address is the IPv4
// address it maps: the peer's socket is then an IPv4 one (or a dual-stack
// IPv6 one, which the kernel finds under its IPv4 addresses too).
struct Endpoint {
  int family = AF_UNSPEC;
  std::array<std::uint32_t, 4> addr{};
  std::uint16_t port_be = 0;
};

bool to_endpoint(const sockaddr_storage& ss, Endpoint& out) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
    out.family = AF_INET;
    std::memcpy(out.addr.data(), &a.sin_addr, 4);
    out.port_be = a.sin_port;
    return true;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
    out.port_be = a.sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) {
      out.family = AF_INET;
      std::memcpy(out.addr.data(), a.sin6_addr.s6_addr + 12, 4);
    } else {
      out.family = AF_INET6;
      std::memcpy(out.addr.data(), &a.sin6_addr, 16);
    }
    return true;
  }
  return false;
}

std::size_t addr_len(int family) { return family == AF_INET ? 4 : 16; }

bool same_addr(const Endpoint& e, const std::uint32_t* a) {
  return std::memcmp(e.addr.data(), a, addr_len(e.family)) == 0;
}

bool is_loopback(const Endpoint& e) {
  if (e.family == AF_INET) return (reinterpret_cast<const std::uint8_t*>(e.addr.data())[0]) == 127;
  in6_addr a;
  std::memcpy(&a, e.addr.data(), 16);
  return IN6_IS_ADDR_LOOPBACK(&a);
}

// Whether `e`'s address is assigned to an interface of this host.
bool is_own_address(const Endpoint& e) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return true;  // cannot tell: assume it is
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != e.family) continue;
    if (e.family == AF_INET) {
      found = std::memcmp(&reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, e.addr.data(), 4) == 0;
    } else {
      found = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, e.addr.data(), 16) == 0;
    }
  }
  ::freeifaddrs(list);
  return found;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// What the exact lookup found.
enum class Lookup { found, not_found, failed };

// Asks sock_diag for the socket whose local end is `src` and remote end
// `dst`. On `found`, `msg` is the kernel's answer; on `failed`, `why` says why.
Lookup lookup(const Endpoint& src, const Endpoint& dst, inet_diag_msg& msg, std::string& why) {
  Fd nl{::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)};
  if (nl.fd < 0) {
    why = fmt::format("sock_diag: {}", std::strerror(errno));
    return Lookup::failed;
  }
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } q{};
  q.nlh.nlmsg_len = sizeof q;
  q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  q.nlh.nlmsg_flags = NLM_F_REQUEST;
  q.nlh.nlmsg_seq = 1;
  q.req.sdiag_family = static_cast<std::uint8_t>(src.family);
  q.req.sdiag_protocol = IPPROTO_TCP;
  q.req.idiag_states = ~0u;
  q.req.id.idiag_sport = src.port_be;
  q.req.id.idiag_dport = dst.port_be;
  std::memcpy(q.req.id.idiag_src, src.addr.data(), 16);
  std::memcpy(q.req.id.idiag_dst, dst.addr.data(), 16);
  q.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  q.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(nl.fd, &q, sizeof q, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) < 0) {
    why = fmt::format("sock_diag: {}", std::strerror(errno));
    return Lookup::failed;
  }
  alignas(nlmsghdr) std::array<char, 8192> buf;
  const ssize_t n = ::recv(nl.fd, buf.data(), buf.size(), 0);
  if (n < 0) {
    why = fmt::format("sock_diag: {}", std::strerror(errno));
    return Lookup::failed;
  }
  int len = static_cast<int>(n);
  for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
    if (h->nlmsg_type == NLMSG_ERROR) {
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr))) break;
      const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
      if (err == ENOENT) return Lookup::not_found;
      why = fmt::format("sock_diag: {}", std::strerror(err));
      return Lookup::failed;
    }
    if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY && h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
      std::memcpy(&msg, NLMSG_DATA(h), sizeof msg);
      return Lookup::found;
    }
  }
  why = "sock_diag: unexpected answer";
  return Lookup::failed;
}

}  // namespace

PeerOwner peer_owner(int fd) {
  PeerOwner out;
  sockaddr_storage ours{}, theirs{};
  socklen_t l1 = sizeof ours, l2 = sizeof theirs;
  Endpoint local, remote;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &l1) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &l2) != 0 || !to_endpoint(ours, local) ||
      !to_endpoint(theirs, remote) || local.family != remote.family) {
    out.where = PeerOwner::Where::refused;
    out.why = fmt::format("cannot name the connection's endpoints: {}", std::strerror(errno));
    return out;
  }
  const bool ours_address = is_loopback(remote) || same_addr(remote, local.addr.data());
  inet_diag_msg msg{};
  std::string why;
  switch (lookup(remote, local, msg, why)) {
    case Lookup::found:
      break;
    case Lookup::not_found:
      if (ours_address || is_own_address(remote)) {
        out.where = PeerOwner::Where::refused;
        out.why = "the peer has this host's address but its socket is not found (closed already?)";
      }
      return out;  // another host, or another network namespace: the rules for remote peers
    case Lookup::failed:
      if (ours_address || is_own_address(remote)) {
        out.where = PeerOwner::Where::refused;
        out.why = fmt::format("cannot tell which user the local peer is: {}", why);
      }
      return out;
  }
  // An exact lookup may also match a listening socket on the peer's port:
  // only the connection whose ends are exactly these counts.
  if (msg.idiag_state == TCP_LISTEN || msg.id.idiag_sport != remote.port_be || msg.id.idiag_dport != local.port_be ||
      !same_addr(remote, msg.id.idiag_src) || !same_addr(local, msg.id.idiag_dst)) {
    if (ours_address || is_own_address(remote)) {
      out.where = PeerOwner::Where::refused;
      out.why = "the peer has this host's address but its socket is not found";
    }
    return out;
  }
  // A socket that is still open: established, or shut down for writing. A
  // TIME_WAIT or SYN_RECV entry has no owner (the kernel says uid 0).
  if (msg.idiag_state != TCP_ESTABLISHED && msg.idiag_state != TCP_FIN_WAIT1 &&
      msg.idiag_state != TCP_FIN_WAIT2) {
    out.where = PeerOwner::Where::refused;
    out.why = fmt::format("the local peer's socket is no longer open (TCP state {})", msg.idiag_state);
    return out;
  }
  out.where = PeerOwner::Where::local;
  out.uid = static_cast<uid_t>(msg.idiag_uid);
  return out;
}

bool may_read(uid_t uid, const struct stat& st) {
  if (uid == 0 || uid == st.st_uid) return true;
  if (st.st_mode & S_IROTH) return true;
  if (!(st.st_mode & S_IRGRP)) return false;
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) return false;
  if (pw.pw_gid == st.st_gid) return true;
  std::vector<gid_t> groups(64);
  int n = static_cast<int>(groups.size());
  if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    if (n <= 0 || n > 65536) return false;
    groups.resize(static_cast<std::size_t>(n));
    if (::getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) return false;
  }
  for (int i = 0; i < n; ++i) {
    if (groups[static_cast<std::size_t>(i)] == st.st_gid) return true;
  }
  return false;
}

std::string describe_uid(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found) {
    return fmt::format("uid {} ({})", uid, pw.pw_name);
  }
  return fmt::format("uid {}", uid);
}

}  // namespace shmbus::bridge
