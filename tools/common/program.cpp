#include "tools/common/program.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/common/duration.hpp"
#include "tools/common/message_format.hpp"

namespace shmbus::tools {
namespace {

std::atomic<int> g_stop_signal{0};
shmbus::Interrupt g_stop_interrupt;
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  g_stop_interrupt.raise();
  if (!g_stop_signal.compare_exchange_strong(expected, sig, std::memory_order_relaxed)) {
    _exit(128 + sig);  // second signal: the user insists
  }
}

#ifndef SHMBUS_VERSION
#define SHMBUS_VERSION "unknown"
#endif

// Optimal string alignment distance: insertions, deletions, substitutions
// and swaps of two neighbours ("--fromat") each cost 1.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> d(n + 1, std::vector<std::size_t>(m + 1));
  for (std::size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

// "unknown option '--fromat' (did you mean '--format'?)" for each unexpected
// argument that looks like an option, from CLI11's "The following
// argument(s) ... expected: A B"; empty when none does.
std::string unknown_options(const CLI::App& app, const std::string& what) {
  const std::size_t colon = what.rfind(": ");
  if (colon == std::string::npos) return {};
  const std::vector<std::string> known = option_names(app);
  std::string out;
  const std::string rest = what.substr(colon + 2);
  std::size_t pos = 0;
  while (pos < rest.size()) {
    std::size_t end = rest.find(' ', pos);
    if (end == std::string::npos) end = rest.size();
    std::string arg = rest.substr(pos, end - pos);
    pos = end + 1;
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (const std::size_t eq = arg.find('='); eq != std::string::npos) arg.resize(eq);
    out += (out.empty() ? "" : "; ") + ("unknown option '" + arg + "'");
    const std::string near = nearest_name(arg, known);
    if (!near.empty()) out += " (did you mean '" + near + "'?)";
  }
  return out;
}

// True when `s` is all one finite number above 0, which goes into `v`.
bool parse_positive(const std::string& s, double& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(v) && v > 0;
}

}  // namespace

std::string version_line(std::string_view program) {
  return std::string(program) + " " + SHMBUS_VERSION;
}

void add_version_flag(CLI::App& app, std::string_view program) {
  app.set_version_flag("--version", version_line(program), "Print the version and exit");
}

std::string json_error(std::string_view program, std::string_view message, std::string_view code) {
  const auto bytes = [](std::string_view s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); };
  std::string one_line(message);
  for (char& c : one_line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  fmt::memory_buffer out;
  out.append(std::string_view("{\"program\":"));
  append_json_string(out, bytes(program));
  out.append(std::string_view(",\"error\":"));
  append_json_string(out, bytes(one_line));
  out.append(std::string_view(",\"code\":"));
  append_json_string(out, bytes(code));
  out.push_back('}');
  return fmt::to_string(out);
}

namespace {
std::atomic<bool> g_json_lines{false};  // relaxed: a setting made before any output, publishes nothing

void write_all(int fd, std::string_view s) noexcept {
  while (!s.empty()) {
    const ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}
}  // namespace

void set_json_lines(bool on) noexcept { g_json_lines.store(on, std::memory_order_relaxed); }
bool json_lines() noexcept { return g_json_lines.load(std::memory_order_relaxed); }

std::string json_notice(std::string_view program, std::string_view message) {
  const auto bytes = [](std::string_view s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); };
  std::string one_line(message);
  for (char& c : one_line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!one_line.empty() && one_line.back() == ' ') one_line.pop_back();
  fmt::memory_buffer out;
  out.append(std::string_view("{\"program\":"));
  append_json_string(out, bytes(program));
  out.append(std::string_view(",\"notice\":"));
  append_json_string(out, bytes(one_line));
  out.push_back('}');
  return fmt::to_string(out);
}

void print_notice(std::string_view program, std::string_view message) noexcept {
  try {
    if (json_lines()) {
      print_raw_line(json_notice(program, message));
      return;
    }
    std::string line;
    line.reserve(program.size() + message.size() + 2);
    line.append(program).append(": ");
    for (char c : message) line.push_back(c == '\n' || c == '\r' ? ' ' : c);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    print_raw_line(line);
  } catch (...) {
    // Out of memory while reporting: nothing better to do.
  }
}

void print_raw_line(std::string_view text) noexcept {
  try {
    std::string line(text);
    for (char& c : line) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    line.push_back('\n');
    std::fflush(stdout);
    std::fflush(stderr);
    write_all(STDERR_FILENO, line);
  } catch (...) {
    // Out of memory while reporting: nothing better to do.
  }
}

void ErrorSink::report(std::string_view message, std::string_view code) const {
  if (!json) {
    print_error(program, message);
    return;
  }
  const std::string line = json_error(program, message, code) + "\n";
  std::fflush(stdout);
  std::fwrite(line.data(), 1, line.size(), json_stream);
  std::fflush(json_stream);
}

bool wants_json(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") return false;
    if (a == "--json") return true;
  }
  return false;
}

const char* errc_name(Errc e) noexcept {
  switch (e) {
    case Errc::invalid_name: return "invalid_name";
    case Errc::invalid_options: return "invalid_options";
    case Errc::already_exists: return "already_exists";
    case Errc::not_found: return "not_found";
    case Errc::permission_denied: return "permission_denied";
    case Errc::no_space: return "no_space";
    case Errc::not_a_bus: return "not_a_bus";
    case Errc::version_mismatch: return "version_mismatch";
    case Errc::truncated: return "truncated";
    case Errc::corrupt: return "corrupt";
    case Errc::not_ready: return "not_ready";
    case Errc::producer_active: return "producer_active";
    case Errc::reader_table_full: return "reader_table_full";
    case Errc::not_retained: return "not_retained";
    case Errc::system: return "system";
    case Errc::timeout: return "timeout";
    case Errc::foreign_owner: return "foreign_owner";
    case Errc::insecure_mode: return "insecure_mode";
    case Errc::not_allocated: return "not_allocated";
    case Errc::name_in_use: return "name_in_use";
    case Errc::bookmarks_full: return "bookmarks_full";
    case Errc::unsafe_file: return "unsafe_file";
    case Errc::bad_directory: return "bad_directory";
    case Errc::options_differ: return "options_differ";
    default: break;  // a code newer than this list
  }
  return "error";
}

int exit_code_for(Errc e) noexcept {
  return e == Errc::invalid_name || e == Errc::invalid_options ? exit_usage : exit_failure;
}

std::string nearest_name(std::string_view given, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = SIZE_MAX;
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(given, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  // "--fromat" -> "--format"; "--x" matches nothing.
  const std::size_t core = given.size() > 2 ? given.size() - 2 : given.size();
  const std::size_t limit = core <= 3 ? 1 : core <= 6 ? 2 : 3;
  return best_d > 0 && best_d <= limit ? best : std::string();
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  for (const CLI::App* sub : const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; })) {
    for (std::string& n : option_names(*sub)) names.push_back(std::move(n));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string plural(std::uint64_t n, std::string_view singular, std::string_view plural_form) {
  std::string out = std::to_string(n) + " ";
  if (n == 1) {
    out += singular;
  } else if (!plural_form.empty()) {
    out += plural_form;
  } else {
    out += singular;
    out += 's';
  }
  return out;
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        return parse_positive(s, v) ? std::string() : "must be a positive number, not '" + s + "'";
      },
      "POSITIVE");
}

CLI::Validator message_rate() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (!parse_positive(s, v)) return "must be a positive number, not '" + s + "'";
        if (v < min_message_rate) {
          return fmt::format("must be at least {} (one message every {} s), not '{}'",
                             min_message_rate, 1 / min_message_rate, s);
        }
        return {};
      },
      "POSITIVE");
}

void refuse_negative_numbers(CLI::App& app) {
  const CLI::Validator check(
      [](std::string& s) -> std::string {
        const std::size_t first = s.find_first_not_of(" \t\n\v\f\r");  // strtoull skips these
        if (first != std::string::npos && s[first] == '-') {
          return "must be 0 or more, not '" + s + "'";
        }
        errno = 0;
        char* end = nullptr;
        (void)std::strtoull(s.c_str(), &end, 0);  // how CLI11 reads it (base 0)
        if (errno == ERANGE) {
          return "must be at most " + std::to_string(UINT64_MAX) + ", not '" + s + "'";
        }
        return {};  // anything else CLI11 refuses or range-checks itself
      },
      "");  // no description: the help keeps showing UINT
  for (CLI::Option* o : app.get_options([](CLI::Option*) { return true; })) {
    const std::string type = o->get_type_name();
    if (type == "UINT" || type.starts_with("UINT:")) o->check(check);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    refuse_negative_numbers(*sub);
  }
}

CLI::Validator reader_name_validator() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.size() > max_reader_name) {
          return "'" + s + "' is " + std::to_string(s.size()) + " bytes; reader names hold at most " +
                 std::to_string(max_reader_name);
        }
        return {};
      },
      "NAME");
}

std::string exit_status_help(std::initializer_list<ExitStatus> rows) {
  std::string out = "Exit status:";
  for (const ExitStatus& r : rows) out += fmt::format("\n  {:<6} {}", r.status, r.meaning);
  return out;
}

void print_error(std::string_view program, std::string_view message) {
  std::string line;
  line.reserve(program.size() + message.size() + 3);
  line.append(program).append(": ");
  for (char c : message) line.push_back(c == '\n' || c == '\r' ? ' ' : c);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  line.push_back('\n');
  std::fflush(stdout);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

int cli_exit(const CLI::App& app, const CLI::ParseError& e, std::string_view program) {
  return cli_exit(app, e, ErrorSink{program});
}

int cli_exit(const CLI::App& app, const CLI::ParseError& e, const ErrorSink& sink) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(e);  // --help, --version
  }
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    if (std::string unknown = unknown_options(app, what); !unknown.empty()) what = std::move(unknown);
  }
  sink.report(what + " (see --help)", "usage");
  return exit_usage;
}

CLI::Validator duration_validator(std::chrono::nanoseconds bare_unit, std::chrono::nanoseconds min,
                                  std::chrono::nanoseconds max) {
  return CLI::Validator(
      [bare_unit, min, max](std::string& text) -> std::string {
        std::chrono::nanoseconds d{};
        try {
          d = parse_duration(text, bare_unit);
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
        if (d < min || d > max) {
          return fmt::format("'{}' is not from {} to {}", text, format_duration(min), format_duration(max));
        }
        return {};
      },
      "DURATION", "duration");
}

CLI::Option* add_milliseconds_option(CLI::App& app, const std::string& name, std::int64_t& ms,
                                     const std::string& help, std::chrono::nanoseconds bare_unit,
                                     std::chrono::nanoseconds min, std::chrono::nanoseconds max) {
  return app
      .add_option_function<std::string>(
          name, [&ms, bare_unit](const std::string& text) { ms = parse_duration_ms(text, bare_unit).count(); }, help)
      ->check(duration_validator(bare_unit, min, max))
      ->default_str(std::to_string(ms) + "ms");
}

namespace {

std::string not_a_wait_strategy(const std::string& s) {
  return "'" + s + "' is not one of adaptive, spin-yield, busy-spin";
}

}  // namespace

const Choices<WaitStrategy>& wait_strategies() {
  static const Choices<WaitStrategy> names = {{"adaptive", WaitStrategy::adaptive},
                                              {"spin-yield", WaitStrategy::spin_yield},
                                              {"busy-spin", WaitStrategy::busy_spin}};
  return names;
}

WaitOptions wait_options(WaitStrategy strategy) {
  WaitOptions w;
  w.strategy = strategy;
  return w;
}

CLI::Validator wait_strategy_choice() {
  return choice(wait_strategies(), wait_strategy_names, not_a_wait_strategy);
}

CLI::Validator wait_strategy_check() {
  CLI::Validator v = wait_strategy_choice();
  v.non_modifying();  // the option keeps its word
  return v;
}

void install_stop_handlers() noexcept {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read() returns EINTR so the flag is seen
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

const shmbus::Interrupt& stop_interrupt() noexcept { return g_stop_interrupt; }

bool stop_requested() noexcept { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

int stop_signal() noexcept { return g_stop_signal.load(std::memory_order_relaxed); }

std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace shmbus::tools
