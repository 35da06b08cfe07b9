// shmbus tools — what every shmbus program does the same way: one-line errors,
// exit codes, command-line errors from CLI11, durations and wait strategies as
// options, and stopping on SIGINT/SIGTERM.
#pragma once

#include <CLI/CLI.hpp>
#include <shmbus/wait.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace shmbus::tools {

// Exit codes shared by the programs.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;  // a bus error, a failed --verify, an I/O error
inline constexpr int exit_usage = 2;    // bad command line

// Prints "PROGRAM: message" as one line on stderr (newlines become spaces).
void print_error(std::string_view program, std::string_view message);

// Handles a CLI11 parse error: --help prints the help on stdout and returns
// exit_ok; anything else prints one line and returns exit_usage.
int cli_exit(const CLI::App& app, const CLI::ParseError& e, std::string_view program);

// A CLI11 check that accepts what parse_duration accepts.
CLI::Validator duration_validator();

// Parses --wait adaptive|spin-yield|busy-spin.
WaitOptions wait_options(std::string_view strategy);
inline constexpr const char* wait_strategy_names = "adaptive|spin-yield|busy-spin";

// The first SIGINT or SIGTERM sets the stop flag (programs check it between
// messages and at least every 100 ms); a second one exits at once with 128+N.
void install_stop_handlers() noexcept;
bool stop_requested() noexcept;
int stop_signal() noexcept;  // the signal that asked to stop, or 0

// CLOCK_REALTIME in nanoseconds (the clock synthetic messages are stamped with).
std::uint64_t realtime_ns() noexcept;

}  // namespace shmbus::tools
