// shmbus-consumer: reads a bus from a chosen start and prints its messages
// (text, hex, JSON lines, or nothing) on stdout; verifies synthetic messages
// (tools/common/synthetic.hpp) and measures their one-way latency. Summary on
// stderr. Wiring only: the command line here; the reading is consumer/run.cpp,
// where messages come from consumer/source.cpp, how they are written
// consumer/output.cpp, how they are checked consumer/verifier.cpp.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "consumer/options.hpp"
#include "consumer/run.hpp"
#include "tools/common/choice.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/bus_dir.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::consumer;

const Choices<Format> format_names = {{"text", Format::text},     {"hex", Format::hex},  {"json", Format::json},
                                      {"binary", Format::binary}, {"none", Format::none}};

// --wait-for-bus takes an optional DURATION. CLI11 would swallow the bus name
// after it ("--wait-for-bus demo"), so an argument that is not a duration is
// left alone and the option gets "forever".
std::vector<std::string> normalise_args(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "--wait-for-bus") continue;
    bool has_value = false;
    if (i + 1 < args.size()) {
      try {
        (void)parse_duration(args[i + 1]);
        has_value = true;
      } catch (const std::invalid_argument&) {
      }
    }
    if (!has_value) args[i] = "--wait-for-bus=forever";
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes them in reverse order
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Reads a shmbus bus and writes its messages to stdout: text (one per line), hex "
      "(\"SEQ HEX\"), json (one object per line), binary (length-prefixed frames) or none. "
      "--verify checks the synthetic messages "
      "of shmbus-producer --count; --stats measures their one-way latency. --name makes a durable "
      "reader that resumes where it stopped. Stops at "
      "end-of-stream (closed: exit 0; producer died or bus removed: exit 1), or when its reader slot is "
      "taken from it (exit 1), unless --follow, at "
      "--count, --idle-timeout, SIGINT or SIGTERM. The summary goes to stderr.",
      program_name};
  app.footer(shmbus::tools::exit_status_help({
      {"0", "success: end-of-stream after a close, --count, --idle-timeout, or stopped by SIGINT/SIGTERM"},
      {"1", "a bus or connection error, a failed --verify, a skipped corrupt record, a stream that ended "
            "without a close (producer died, bus removed), or a reader slot taken from it"},
      {"2", "a bad command line, or a bus name the library refuses"},
      shmbus::tools::exit_status_second_signal,
  }));
  Options o;
  app.add_option("bus", o.bus,
                 "Bus name, or tcp://HOST:PORT/BUS to read BUS from a shmbus-bridge (numeric address; "
                 "IPv6 as [::1])")
      ->required();
  app.add_option_function<std::string>(
         "--from", [&o](const std::string& s) { o.from = *parse_from(s); },
         "Where to start: earliest (oldest retained), latest (only new), a sequence number, "
         "or resume (where the reader --name stopped; earliest for a new name). Default: "
         "resume with --name, else earliest")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return parse_from(s) ? std::string() : "must be earliest, latest, resume or a sequence number";
          },
          "earliest|latest|resume|SEQ"));
  auto* name = app.add_option("--name", o.name,
                              "Make this a durable reader with this name (up to 31 bytes): its "
                              "position is remembered in the bus when it stops, and the next "
                              "consumer with the name resumes there (--from resume is then the "
                              "default); one live reader per name. Without it the reader is "
                              "anonymous and shown as shmbus-consumer")
      ->check(reader_name_validator());
  app.add_flag("--best-effort", o.best_effort,
               "Never hold a block bus's producer back: when this reader falls a whole ring "
               "behind, the messages it missed are reported as lost (exactly) and it goes on at "
               "the oldest one still in the ring, as on an overwrite bus. Without it a reader of a "
               "block bus is lossless and the producer waits for it");
  app.add_flag("--follow", o.follow,
               "Keep reading across producer close, crash and takeover (like tail -F), and after "
               "the reader slot was taken from it (the loss is reported), until SIGINT, --count or "
               "--idle-timeout. With tcp://: a subscription lost after it was made (connection "
               "dropped or silent; server error slow, shutdown, idle, not-retained, "
               "too-many-subscribers, handshake-timeout or internal) is made again, backing off "
               "from 100 ms doubling to 5 s, at the first sequence not yet printed (never twice; "
               "what the server no longer has is reported lost); after the server's end of stream "
               "it asks again at least every second for a later producer's messages. Still fatal: "
               "the first connection, bad-token, bad-version, bad-request, unknown-bus, an untrusted "
               "certificate");
  app.add_option("--count", o.count, "Stop after N messages");
  app.add_option("--idle-timeout", o.idle_timeout,
                 "Stop after this long with nothing new: 250us, 500ms, 2s, 1.5m, 1h or forever (a bare "
                 "number is seconds)")
      ->check(duration_validator());
  add_choice(app, "--format", o.format, format_names,
                 "Output: text (one line per message, control bytes and backslash escaped), hex "
                 "(\"SEQ HEX\"), json (one object per line, see docs/programs.md), binary (u32 "
                 "little-endian length + bytes: what shmbus-producer --binary reads) or none");
  app.add_flag("--verify", o.verify,
               "Check synthetic messages: sequence, payload sequence, checksum; exit 1 on any gap "
               "not reported as lost, duplicate or corruption");
  app.add_flag("--stats", o.stats, "Measure one-way latency from the synthetic messages' timestamps");
  app.add_flag("--json", o.json, "Write the summary to stderr as one JSON object");
  app.add_option("--wait-for-bus", o.wait_for_bus,
                 "Wait up to DURATION (default: forever; 500ms, 2s, 1h...) for the bus to exist instead "
                 "of failing")
      ->type_name("[DURATION]")
      ->check(duration_validator());
  add_choice(app, "--wait", o.wait, wait_strategies(), "How to wait for data: adaptive, spin-yield or busy-spin",
             wait_strategy_choice());
  add_trust_options(app, o.trust);
  std::string dir;
  add_dir_option(app, dir);
  app.add_option("--tls-ca", o.tls_ca,
                 "tcp:// only: speak TLS and trust only servers whose certificate chains to this PEM CA "
                 "and names the address connected to");
  app.add_option("--token-file", o.token_file, "tcp:// only: present the token in this file's first line");
  add_version_flag(app, program_name);
  refuse_negative_numbers(app);

  const ErrorSink sink{program_name, wants_json(argc, argv)};
  return run_main(
      app, sink,
      [&] {
        app.parse(normalise_args(argc, argv));
        o.named = name->count() > 0;
        // A tcp:// bus lives on another host: only a local one needs the directory.
        if (!dir.empty() || o.bus.rfind("tcp://", 0) != 0) apply_dir(dir);
        install_stop_handlers();
        signal(SIGPIPE, SIG_IGN);  // a closed stdout is seen as EPIPE and stops the consumer
        return run(o);
      },
      [&] { return fmt::format("bus '{}'", o.bus); });
}
