// shmbus tools — the one failure type of the programs. Code that finds a
// problem the user must hear about throws a Failure; run_main()
// (tools/common/run_main.hpp) reports it as one line and exits with its code.
// Header-only, so the libraries behind the programs (bridge/, nats/) can
// throw it too without linking tools/common.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace shmbus::tools {

// Exit codes shared by the programs (docs/programs.md lists them). A second
// SIGINT/SIGTERM ends a program at once with 128 + the signal's number.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;  // a bus error, a failed --verify, an I/O error
inline constexpr int exit_usage = 2;    // bad command line

class Failure : public std::runtime_error {
 public:
  // `message` is the whole line after "PROGRAM: " (it names the bus when
  // there is one); `code` is the "code" of its JSON form (docs/programs.md);
  // `exit_code` the process's exit status (one of those above).
  Failure(int exit_code, const std::string& message, std::string code = "error")
      : std::runtime_error(message), exit_code_(exit_code), code_(std::move(code)) {}

  int exit_code() const noexcept { return exit_code_; }
  const std::string& code() const noexcept { return code_; }

 private:
  int exit_code_;
  std::string code_;
};

}  // namespace shmbus::tools
