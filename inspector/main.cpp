// shmbus-inspect: looks inside shmbus buses without taking part in them.
//
// Every view maps the bus read-only through shmbus::Inspector (no reader
// slot, no effect on the producer or consumers); only `gc`, `reset`,
// `let-go` and `rm` change anything, and they say what they changed. Errors are one line on stderr
// naming the bus (with --json, one JSON object on stdout instead); the exit
// status is 0 on success, 1 on an error, a refusal or (check) a bus with
// problems, 2 on a usage error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "inspector/commands.hpp"
#include "inspector/let_go.hpp"
#include "inspector/metrics.hpp"
#include "inspector/reset.hpp"
#include "inspector/size.hpp"
#include "tools/common/choice.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/failure.hpp"
#include "tools/common/program.hpp"
#include "tools/common/bus_dir.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus::inspect_tool;
namespace tools = shmbus::tools;

constexpr const char* kProgram = "shmbus-inspect";

// The subcommand the command line names, checked before CLI11 sees it, so
// that "shmbus-inspect shw" is told which word it did not know. Empty when
// the line is fine (or asks for --help/--version).
std::string subcommand_problem(int argc, char** argv, const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "--version") return {};
    if (a == "--trust-owner" || a == "--trust-group" || a == "--dir") {
      ++i;  // its value
      continue;
    }
    if (a.starts_with("-")) continue;
    for (const std::string& n : names) {
      if (a == n) return {};
    }
    std::string msg = fmt::format("unknown subcommand '{}'", a);
    const std::string near = tools::nearest_name(a, names);
    if (!near.empty()) msg += fmt::format(" (did you mean '{}'?)", near);
    return msg + "; the subcommands are " + list + " (see --help)";
  }
  return "a subcommand is required: " + list + " (see --help)";
}

const tools::Choices<DumpFormat> dump_format_names = {
    {"text", DumpFormat::text}, {"hex", DumpFormat::hex}, {"json", DumpFormat::json}};

// --interval: the grammar of every program (500ms, 2s, 1h...; a bare number
// is seconds), up to a day ("forever" would never take a second sample).
CLI::Validator interval_validator() {
  using namespace std::chrono_literals;
  return tools::duration_validator(1s, 0s, 24h);
}

constexpr const char* kJsonHelp = "machine-readable JSON output (schema in docs/inspector.md)";

// The command line: what every subcommand's options are read into, and the
// subcommands, to tell which one was given.
struct CommandLine {
  tools::TrustArgs trust_args;
  std::string dir;
  bool json = false;
  std::string bus;
  std::string interval = "200ms";
  std::string watch_interval = "1s";
  std::uint64_t watch_count = 0;
  bool force = false;
  DumpArgs dump;
  DumpFormat dump_format = DumpFormat::text;
  std::vector<std::string> forget;
  std::string reset_reader;
  std::string reset_to;
  std::string let_go_reader;
  SizeArgs size_args;
  MetricsArgs metrics_args;

  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* dump_cmd = nullptr;
  CLI::App* watch = nullptr;
  CLI::App* check = nullptr;
  CLI::App* gc = nullptr;
  CLI::App* reset = nullptr;
  CLI::App* let_go = nullptr;
  CLI::App* rm = nullptr;
  CLI::App* size = nullptr;
  CLI::App* metrics = nullptr;
};

// A subcommand about one bus, named by its first argument.
CLI::App* add_bus_subcommand(CLI::App& app, const std::string& name, const std::string& help, std::string& bus) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("bus", bus, "bus name")->required();
  return sub;
}

// The subcommands that only look: list, show, dump, watch, check.
void add_view_commands(CLI::App& app, CommandLine& c) {
  c.list = app.add_subcommand(
      "list", "every shmbus bus on this machine, one line each, then the files of creations under way "
              "or killed mid-way (.shmbus.NAME.XXXXXX)");
  c.list->add_flag("--json", c.json, kJsonHelp);

  c.show = add_bus_subcommand(app, "show", "a bus's header, fill level, publish rate and reader table, with warnings",
                              c.bus);
  c.show->add_option("--interval", c.interval,
                     "how long to sample for rates: 500ms, 2s, 1m... (a bare number is seconds; 0: no rates)")
      ->capture_default_str()
      ->check(interval_validator());
  c.show->add_flag("--json", c.json, kJsonHelp);

  c.dump_cmd = add_bus_subcommand(app, "dump", "records with sequence, timestamp, length, payload", c.dump.bus);
  auto* from_opt = c.dump_cmd->add_option("--from", c.dump.from, "first sequence (default: oldest retained)");
  c.dump_cmd->add_option("--last", c.dump.last, "the newest N records instead of --from")
      ->excludes(from_opt);
  c.dump_cmd->add_option("--count", c.dump.count,
                         "sequence numbers to cover (a message that spans records takes several), 0 for all up to head")
      ->capture_default_str();
  tools::add_choice(*c.dump_cmd, "--format", c.dump_format, dump_format_names, "payload format");
  c.dump_cmd->add_flag("--json", c.json, "same as --format json");

  c.watch = add_bus_subcommand(app, "watch",
                               "a refreshing view of rates and lags until Ctrl-C (one line per interval "
                               "when stdout is not a terminal)",
                               c.bus);
  c.watch->add_option("--interval", c.watch_interval,
                      "time between refreshes: 500ms, 2s, 1m... (a bare number is seconds)")
      ->capture_default_str()
      ->check(interval_validator());
  c.watch->add_option("--count", c.watch_count, "stop after N refreshes (default: until Ctrl-C)");
  c.watch->add_flag("--json", c.json, "one JSON object (as show --json) per line");

  c.check = add_bus_subcommand(app, "check",
                               "validate header, reader table and every record; exit 0 only when clean (what a "
                               "live producer kept rewriting meanwhile is listed as not judged)",
                               c.bus);
  c.check->add_flag("--json", c.json, kJsonHelp);
}

// The subcommands that change a bus: gc, reset, let-go, rm.
void add_change_commands(CLI::App& app, CommandLine& c) {
  c.gc = add_bus_subcommand(app, "gc",
                            "reclaim the reader slots of dead consumers and remove what creations of the bus killed "
                            "mid-way left; --forget NAME drops a remembered reader name",
                            c.bus);
  c.gc->add_option("--forget", c.forget,
                   "also drop the remembered position of this durable reader name (repeatable); "
                   "refused while a live reader holds it");
  c.gc->add_flag("--json", c.json, kJsonHelp);

  c.reset = add_bus_subcommand(app, "reset",
                               "move a remembered reader name: the next consumer resuming under it starts at --to; "
                               "refused while a live reader holds the name",
                               c.bus);
  c.reset->add_option("--reader", c.reset_reader, "the durable reader name to move (shmbus-consumer --name)")
      ->required()
      ->check(tools::reader_name_validator());
  c.reset->add_option("--to", c.reset_to,
                      "earliest, latest, a sequence number (not inside a message that spans records), or a time: "
                      "the first message stamped at or after it (UTC 2026-11-22T03:53:43Z, as dump prints it, "
                      "or now-5m; needs records the producer stamped)")
      ->required();
  c.reset->add_flag("--json", c.json, kJsonHelp);

  c.let_go = add_bus_subcommand(app, "let-go",
                                "let a reader that holds the producer of a block bus go at once, as --max-hold does: "
                                "it reads on without holding the producer and is told what it loses",
                                c.bus);
  c.let_go->add_option("--reader", c.let_go_reader, "the reader: its slot number (as show prints it) or its name")
      ->required()
      ->type_name("SLOT|NAME");
  c.let_go->add_flag("--json", c.json, kJsonHelp);

  c.rm = add_bus_subcommand(app, "rm",
                            "remove a bus, and what creations of it killed mid-way left; refused while a live "
                            "producer or reader is attached",
                            c.bus);
  c.rm->add_flag("--force", c.force,
                 "remove even while in use: its consumers' streams end (reason removed) and its "
                 "producer's next publish fails");
  c.rm->add_flag("--json", c.json, kJsonHelp);
}

// The subcommands about buses in general: size, metrics.
void add_tool_commands(CLI::App& app, CommandLine& c) {
  c.size = app.add_subcommand(
      "size", "print the --record-size and --capacity of a bus that takes the longest message and keeps what "
              "slow or late readers should find (touches no bus)");
  c.size->add_option("--max-message", c.size_args.max_message,
                     "the longest message the bus must take: 1MiB, 64KiB, 900 (B, KiB, MiB, GiB)")
      ->type_name("SIZE");
  c.size->add_option("--message", c.size_args.message,
                     "the usual message: records are the fewest 64-byte lines that hold it (default: 256-byte "
                     "records)")
      ->type_name("SIZE");
  c.size->add_option("--retain", c.size_args.retain,
                     "usual messages the ring should still hold for a slow or late reader: N, or DURATION@RATE "
                     "(2s@50000/s: two seconds of 50,000 messages a second)")
      ->type_name("N|DURATION@RATE");
  c.size->add_option("--record-size", c.size_args.record_size,
                     "use this record size instead (a multiple of 8, 64 to 1 MiB)");
  c.size->add_flag("--json", c.size_args.json, kJsonHelp);

  c.metrics = app.add_subcommand(
      "metrics", "counters of every bus (or of BUS...) in the Prometheus text format; "
                 "--listen HOST:PORT serves them at /metrics until Ctrl-C");
  c.metrics->add_option("bus", c.metrics_args.buses, "bus names (default: every bus)");
  c.metrics->add_option("--listen", c.metrics_args.listen,
                        "serve over HTTP, e.g. 127.0.0.1:9464 (port 0: any free port, printed on stderr)");
}

// Runs the subcommand given; its exit status.
int run_command(CommandLine& c) {
  if (c.list->parsed()) return run_list(c.json);
  if (c.show->parsed()) return run_show(c.bus, tools::parse_duration(c.interval), c.json);
  if (c.dump_cmd->parsed()) {
    c.dump.format = c.json ? DumpFormat::json : c.dump_format;
    return run_dump(c.dump);
  }
  if (c.watch->parsed()) {
    return run_watch(c.bus, tools::parse_duration(c.watch_interval),
                     c.watch_count ? std::optional<std::uint64_t>(c.watch_count) : std::nullopt, c.json);
  }
  if (c.check->parsed()) return run_check(c.bus, c.json);
  if (c.gc->parsed()) return run_gc(c.bus, c.forget, c.json);
  if (c.reset->parsed()) return run_reset(c.bus, c.reset_reader, c.reset_to, c.json);
  if (c.rm->parsed()) return run_rm(c.bus, c.force, c.json);
  if (c.let_go->parsed()) return run_let_go(c.bus, c.let_go_reader, c.json);
  if (c.size->parsed()) return run_size(c.size_args);
  if (c.metrics->parsed()) return run_metrics(c.metrics_args, tools::resolve_trust(c.trust_args));
  return tools::exit_usage;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "shmbus-inspect: look inside shmbus buses (DIR/shmbus.*: /dev/shm, $SHMBUS_DIR or --dir) without disturbing them.\n"
      "Views map a bus read-only and take no reader slot; gc, reset, let-go and rm say what they change."};
  tools::add_version_flag(app, kProgram);
  app.footer(tools::exit_status_help({
      {"0", "success; for check, the bus is clean"},
      {"1", "an error (no such bus, permission, a segment that does not validate), check found problems, "
            "dump met a record with an impossible length, or rm, gc --forget, reset or let-go refused"},
      {"2", "a bad command line (unknown option or subcommand, bad duration or --to, missing or invalid "
            "bus name)"},
  }));
  app.require_subcommand(1);
  app.fallthrough();  // --trust-owner/--trust-group/--dir may follow the subcommand
  CommandLine c;
  tools::add_trust_options(app, c.trust_args);
  tools::add_dir_option(app, c.dir);
  add_view_commands(app, c);
  add_change_commands(app, c);
  add_tool_commands(app, c);
  tools::refuse_negative_numbers(app);

  // With --json, errors are a JSON object on stdout, where the reports go.
  const tools::ErrorSink sink{kProgram, tools::wants_json(argc, argv), stdout};
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return tools::run_main(
      app, sink,
      [&] {
        if (const std::string problem = subcommand_problem(argc, argv, names); !problem.empty()) {
          throw tools::Failure(tools::exit_usage, problem, "usage");
        }
        app.parse(argc, argv);
        set_trust(tools::resolve_trust(c.trust_args));
        tools::apply_dir(c.dir);
        return run_command(c);
      },
      [&] {
        // The library's messages already name the bus; others get it in front.
        const std::string& target = c.dump_cmd->parsed() ? c.dump.bus : c.bus;
        return target.empty() ? std::string() : fmt::format("bus '{}'", target);
      });
}
