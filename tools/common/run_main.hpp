// shmbus tools — the one place where a program's failures become a line on
// stderr and an exit status. Every program's main() is
//
//   return run_main(app, sink, [&] { app.parse(argc, argv); return run(options); }, context);
//
// and nothing else catches to report.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "tools/common/program.hpp"

namespace shmbus::tools {

// Runs `body` (which parses the command line and does the work) and returns
// its exit status. Whatever it throws is reported once, through `sink`
// (one line "PROGRAM: message", or one JSON object with --json):
//   CLI::ParseError        --help and --version (exit 0), else a usage error (exit 2), as cli_exit()
//   Failure                its message and code, its exit status
//   shmbus::Error          its message (the library's messages name the bus), errc_name(), exit_code_for()
//   std::invalid_argument  a usage error, exit 2 (an unknown --trust-owner, a bad address)
//   std::exception         exit 1
// `context`, when given and not empty at that point, goes in front of the
// last two ("bus 'NAME'" gives "bus 'NAME': what").
int run_main(const CLI::App& app, const ErrorSink& sink, const std::function<int()>& body,
             const std::function<std::string()>& context = {});

}  // namespace shmbus::tools
