#include "program.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "duration.hpp"

namespace shmbus::tools {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used from a signal handler");

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_stop_signal.compare_exchange_strong(expected, sig, std::memory_order_relaxed)) {
    _exit(128 + sig);  // second signal: the user insists
  }
}

}  // namespace

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
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(e);  // --help
  }
  print_error(program, std::string(e.what()) + " (see --help)");
  return exit_usage;
}

CLI::Validator duration_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          (void)parse_duration(text);
          return {};
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "DURATION", "duration");
}

WaitOptions wait_options(std::string_view strategy) {
  WaitOptions w;
  if (strategy == "busy-spin") {
    w.strategy = WaitStrategy::busy_spin;
  } else if (strategy == "spin-yield") {
    w.strategy = WaitStrategy::spin_yield;
  } else {
    w.strategy = WaitStrategy::adaptive;
  }
  return w;
}

void install_stop_handlers() noexcept {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read() returns EINTR so the flag is seen
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() noexcept { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

int stop_signal() noexcept { return g_stop_signal.load(std::memory_order_relaxed); }

std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace shmbus::tools
