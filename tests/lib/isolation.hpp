// A child process run as containers run theirs: sharing /dev/shm, but in a
// PID namespace of its own, or without /proc, or both, through util-linux
// unshare. What the multi-process tests' peers and the fault campaign's
// children share.
//
// The process started is the unshare wrapper; the program is its only child
// (--fork). SIGKILL of the wrapper kills the program too (--kill-child), a
// moment later: the program is gone once its state reads 'Z' or it is no
// longer there. Every other signal (SIGSTOP, SIGCONT, a handled SIGUSR1) must
// go to the program itself, by the pid it has in our namespace (only_child);
// the pid the program sees for itself is its namespace's (1).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace shmbus::test {

// Where a child runs.
enum class Isolation {
  none,
  pid_namespace,    // a PID namespace (and mount namespace with its own /proc) of its own
  no_proc,          // a mount namespace without /proc
  own_namespaces,   // both: its own PID namespace and no /proc at all
};

// The command that runs `args` (args[0] the program, an absolute path)
// isolated.
inline std::vector<std::string> isolated(Isolation iso, std::vector<std::string> args) {
  const std::vector<std::string> no_proc = {"/bin/sh", "-c", "umount -l /proc && exec \"$0\" \"$@\""};
  std::vector<std::string> pre;
  switch (iso) {
    case Isolation::none: return args;
    case Isolation::pid_namespace:
      pre = {"/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--mount-proc"};
      break;
    case Isolation::no_proc:
      pre = {"/usr/bin/unshare", "--mount", "--fork", "--kill-child"};
      pre.insert(pre.end(), no_proc.begin(), no_proc.end());
      break;
    case Isolation::own_namespaces:
      pre = {"/usr/bin/unshare", "--pid", "--mount", "--fork", "--kill-child"};
      pre.insert(pre.end(), no_proc.begin(), no_proc.end());
      break;
  }
  pre.insert(pre.end(), args.begin(), args.end());
  return pre;
}

// Why isolated children cannot run here, or "" if they can (they need root,
// or unprivileged user namespaces, and util-linux unshare).
inline std::string isolation_unavailable() {
  static const std::string why = [] {
    if (::access("/usr/bin/unshare", X_OK) != 0) return std::string("util-linux unshare is not installed");
    ChildProcess probe("/usr/bin/unshare", {"unshare", "--pid", "--mount", "--fork", "--kill-child", "/bin/sh", "-c",
                                            "umount -l /proc && test ! -e /proc/self"},
                       ChildProcess::Capture::stdout_and_stderr);
    probe.reap();
    if (probe.exit_code() != 0)
      return std::string("cannot make PID and mount namespaces here (needs root or CAP_SYS_ADMIN)");
    return std::string();
  }();
  return why;
}

// The only child of process `pid`, by its pid in our namespace (for an
// unshare wrapper: the program it runs); -1 if it has none, or more than one.
inline pid_t only_child(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::ifstream in("/proc/" + p + "/task/" + p + "/children");
  long child = -1, another = -1;
  if (!(in >> child)) return -1;
  if (in >> another) return -1;
  return static_cast<pid_t>(child);
}

}  // namespace shmbus::test
