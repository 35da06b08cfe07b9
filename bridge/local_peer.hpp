// shmbus-bridge serve: who is at the other end of a connection from this host.
//
// A bus's segment is a file with an owner and a mode; a subscriber on this
// host must not read through the bridge what it could not read from
// /dev/shm. The kernel knows which user owns the peer's socket when the peer
// is a socket on this host (in this network namespace): sock_diag
// (NETLINK_SOCK_DIAG, inet_diag) looks the connection up from the peer's
// side, (src, dst) = our (remote, local) endpoints, and reports its
// `idiag_uid`.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>

namespace shmbus::bridge {

struct PeerOwner {
  enum class Where {
    remote,   // no socket on this host holds the other end: another host (or network namespace)
    local,    // a socket on this host owned by `uid`
    refused,  // the peer's address is this host's but its socket cannot vouch for a user (`why`)
  };
  Where where = Where::remote;
  uid_t uid = 0;
  std::string why;  // Where::refused: one line
};

// For the connected TCP socket `fd` (IPv4, IPv6 or v4-mapped IPv6). A peer
// whose address is this host's (loopback, or an address of an interface)
// and whose socket cannot be found, or is no longer an open socket (a
// TIME_WAIT entry reports uid 0), is `refused`, not `remote`: a local peer
// is never judged by the rules for other hosts. Never throws.
PeerOwner peer_owner(int fd);

// Whether user `uid` may read a file with the owner, group and mode in `st`:
// it owns it, is root, is in its group (primary or supplementary, from the
// user database) and the group may read, or others may read.
bool may_read(uid_t uid, const struct stat& st);

// "uid 1000 (alice)", or "uid 1000" when the user database has no name.
std::string describe_uid(uid_t uid);

}  // namespace shmbus::bridge
