// shmbus tools — what every shmbus program does the same way: one-line errors,
// exit codes, command-line errors from CLI11, durations and wait strategies as
// options, and stopping on SIGINT/SIGTERM.
#pragma once

#include <CLI/CLI.hpp>
#include <shmbus/errors.hpp>
#include <shmbus/wait.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "tools/common/choice.hpp"
#include "tools/common/failure.hpp"  // the exit codes

namespace shmbus::tools {

// "shmbus-producer 0.1.0" (the project's version).
std::string version_line(std::string_view program);
// Adds --version, which prints version_line() on stdout and exits 0.
void add_version_flag(CLI::App& app, std::string_view program);

// The block every program's --help ends with, one line per exit status:
//
//   Exit status:
//     0      success ...
//     1      ...
//
// `rows` are {status, meaning}; a meaning stays on one line. The build
// turns this block into the EXIT STATUS section of the program's man page
// (cmake/man_include.sh), so the two cannot disagree.
struct ExitStatus {
  std::string_view status;
  std::string_view meaning;
};
std::string exit_status_help(std::initializer_list<ExitStatus> rows);
// The row every program that stops on SIGINT/SIGTERM shares (see
// install_stop_handlers()).
inline constexpr ExitStatus exit_status_second_signal{
    "128+N", "a second SIGINT (N = 2) or SIGTERM (N = 15) while the first is handled: exits at once"};

// Prints "PROGRAM: message" as one line on stderr (newlines become spaces).
void print_error(std::string_view program, std::string_view message);

// {"program": PROGRAM, "error": message, "code": code} as one line.
std::string json_error(std::string_view program, std::string_view message, std::string_view code);

// With --json, every line a program writes on stderr is one JSON object
// (docs/programs.md, "Every line is JSON"): a program given --json calls
// set_json_lines(true) before it prints anything, and print_notice() then
// writes {"program": PROGRAM, "notice": message} instead of a text line.
void set_json_lines(bool on) noexcept;
bool json_lines() noexcept;
// {"program": PROGRAM, "notice": message} as one line.
std::string json_notice(std::string_view program, std::string_view message);
// Something that happened during a run (a reconnect, a gap, a verify
// problem, a warning): "PROGRAM: message" on stderr, or json_notice() under
// set_json_lines(true). One write(), so lines from several threads never
// interleave.
void print_notice(std::string_view program, std::string_view message) noexcept;
// One line, as it is (a JSON object of the program's own shape), on stderr
// the way print_notice() writes its lines.
void print_raw_line(std::string_view line) noexcept;

// How a failure is reported: one line "PROGRAM: message" on stderr, or with
// --json one JSON object (json_error) on `json_stream` (the stream where the
// program writes its JSON: stderr for the producer's and consumer's
// summaries, stdout for shmbus-inspect's reports).
struct ErrorSink {
  std::string_view program;
  bool json = false;
  std::FILE* json_stream = stderr;
  void report(std::string_view message, std::string_view code) const;
};

// True when "--json" is among the arguments (before any "--"): a command line
// that fails to parse is still reported as JSON.
bool wants_json(int argc, const char* const* argv);

// The stable name of a library error code ("not_found", ...), used as the
// "code" of JSON errors.
const char* errc_name(Errc e) noexcept;

// The exit status for a library error: exit_usage when the command line asked
// for something impossible (a bad bus name, a capacity that is not a power
// of two), exit_failure otherwise.
int exit_code_for(Errc e) noexcept;

// Handles a CLI11 parse error: --help and --version print on stdout and
// return exit_ok; anything else is reported as one line (JSON with --json,
// code "usage") and returns exit_usage. An unknown option close to a known
// one gets "did you mean '--format'?".
int cli_exit(const CLI::App& app, const CLI::ParseError& e, std::string_view program);
int cli_exit(const CLI::App& app, const CLI::ParseError& e, const ErrorSink& sink);

// The known name nearest to `given` (a few typing mistakes away), or empty.
std::string nearest_name(std::string_view given, const std::vector<std::string>& known);
// "--format", "-n", ... every option of `app` and of its subcommands.
std::vector<std::string> option_names(const CLI::App& app);

// "1 message", "2 messages"; irregular plurals given explicitly.
std::string plural(std::uint64_t n, std::string_view singular, std::string_view plural_form = {});

// A check for options that must be a positive number ("--rate 0" is refused
// with "must be a positive number", not a range of 300-digit limits).
CLI::Validator positive_number();

// A check for --rate R, in messages per second: a positive number (as
// positive_number()) of at least min_message_rate. Pacing puts message i at
// start + i/R on a 64-bit nanosecond clock; below one message every 1000 s a
// rate stops being a pace (and 1e-300 overflows the interval, so nothing
// after the first message would ever be published).
inline constexpr double min_message_rate = 0.001;
CLI::Validator message_rate();

// CLI11 reads an unsigned option with strtoull, which takes "-1" as 2^64-1
// and saturates a number past 2^64-1 instead of refusing it. This adds to
// every option of `app` and of its subcommands whose type is an unsigned
// integer (CLI11 type name UINT; an option given another type_name() is
// missed) a check that refuses both: "--count: must be 0 or more, not '-1'".
// Call it once every option is added, before parsing.
void refuse_negative_numbers(CLI::App& app);

// Reader names are stored in 31 bytes (and a NUL) in the segment: a longer
// --name is refused rather than cut silently.
inline constexpr std::size_t max_reader_name = 31;
CLI::Validator reader_name_validator();

// A CLI11 check that accepts what parse_duration accepts (a bare number
// counting in `bare_unit`), optionally only from `min` to `max`.
CLI::Validator duration_validator(std::chrono::nanoseconds bare_unit = std::chrono::seconds(1),
                                  std::chrono::nanoseconds min = std::chrono::nanoseconds::zero(),
                                  std::chrono::nanoseconds max = std::chrono::nanoseconds::max());

// Adds an option that takes a duration (parse_duration's grammar, a bare
// number counting in `bare_unit`) from `min` to `max` and stores it in `ms`
// in whole milliseconds; --help shows the current value ("2000ms") as the
// default. For settings kept in milliseconds, such as the NATS client's.
CLI::Option* add_milliseconds_option(CLI::App& app, const std::string& name, std::int64_t& ms,
                                     const std::string& help, std::chrono::nanoseconds bare_unit,
                                     std::chrono::nanoseconds min, std::chrono::nanoseconds max);

// --wait adaptive|spin-yield|busy-spin, the one spelling every program uses:
// wait_strategy_choice() turns the word into a WaitStrategy when the command
// line is parsed (an option bound to a WaitStrategy), wait_strategy_check()
// only checks it (an option kept as a string); both refuse any other word
// with "'x' is not one of adaptive, spin-yield, busy-spin".
WaitOptions wait_options(WaitStrategy strategy);
inline constexpr const char* wait_strategy_names = "adaptive|spin-yield|busy-spin";
const Choices<WaitStrategy>& wait_strategies();
CLI::Validator wait_strategy_choice();
CLI::Validator wait_strategy_check();

// The first SIGINT or SIGTERM sets the stop flag (programs check it between
// messages and at least every 100 ms); a second one exits at once with 128+N.
void install_stop_handlers() noexcept;
// Raised by those handlers: give it to the library's waits
// (WaitOptions::interrupt) so that a signal ends them within milliseconds.
const shmbus::Interrupt& stop_interrupt() noexcept;
bool stop_requested() noexcept;
int stop_signal() noexcept;  // the signal that asked to stop, or 0

// CLOCK_REALTIME in nanoseconds (the clock synthetic messages are stamped with).
std::uint64_t realtime_ns() noexcept;

}  // namespace shmbus::tools
