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
  tools::TrustArgs trust_args;
  tools::add_trust_options(app, trust_args);
  std::string dir;
  tools::add_dir_option(app, dir);

  bool json = false;
  const char* json_help = "machine-readable JSON output (schema in docs/inspector.md)";
  std::string bus;
  std::string interval = "200ms";
  std::string watch_interval = "1s";
  std::uint64_t watch_count = 0;
  bool force = false;
  DumpArgs dump;
  DumpFormat dump_format = DumpFormat::text;

  auto* list = app.add_subcommand(
      "list", "every shmbus bus on this machine, one line each, then the files of creations under way "
              "or killed mid-way (.shmbus.NAME.XXXXXX)");
  list->add_flag("--json", json, json_help);

  auto* show = app.add_subcommand(
      "show", "a bus's header, fill level, publish rate and reader table, with warnings");
  show->add_option("bus", bus, "bus name")->required();
  show->add_option("--interval", interval,
                   "how long to sample for rates: 500ms, 2s, 1m... (a bare number is seconds; 0: no rates)")
      ->capture_default_str()
      ->check(interval_validator());
  show->add_flag("--json", json, json_help);

  auto* dump_cmd = app.add_subcommand("dump", "records with sequence, timestamp, length, payload");
  dump_cmd->add_option("bus", dump.bus, "bus name")->required();
  auto* from_opt = dump_cmd->add_option("--from", dump.from, "first sequence (default: oldest retained)");
  dump_cmd->add_option("--last", dump.last, "the newest N records instead of --from")
      ->excludes(from_opt);
  dump_cmd->add_option("--count", dump.count, "sequence numbers to cover (a message that spans records takes several), 0 for all up to head")->capture_default_str();
  tools::add_choice(*dump_cmd, "--format", dump_format, dump_format_names, "payload format");
  dump_cmd->add_flag("--json", json, "same as --format json");

  auto* watch = app.add_subcommand(
      "watch", "a refreshing view of rates and lags until Ctrl-C (one line per interval "
               "when stdout is not a terminal)");
  watch->add_option("bus", bus, "bus name")->required();
  watch->add_option("--interval", watch_interval,
                    "time between refreshes: 500ms, 2s, 1m... (a bare number is seconds)")
      ->capture_default_str()
      ->check(interval_validator());
  watch->add_option("--count", watch_count, "stop after N refreshes (default: until Ctrl-C)");
  watch->add_flag("--json", json, "one JSON object (as show --json) per line");

  auto* check = app.add_subcommand(
      "check", "validate header, reader table and every record; exit 0 only when clean (what a live "
               "producer kept rewriting meanwhile is listed as not judged)");
  check->add_option("bus", bus, "bus name")->required();
  check->add_flag("--json", json, json_help);

  auto* gc = app.add_subcommand(
      "gc", "reclaim the reader slots of dead consumers and remove what creations of the bus killed "
            "mid-way left; --forget NAME drops a remembered reader name");
  gc->add_option("bus", bus, "bus name")->required();
  std::vector<std::string> forget;
  gc->add_option("--forget", forget,
                 "also drop the remembered position of this durable reader name (repeatable); "
                 "refused while a live reader holds it");
  gc->add_flag("--json", json, json_help);

  auto* reset = app.add_subcommand(
      "reset", "move a remembered reader name: the next consumer resuming under it starts at --to; "
               "refused while a live reader holds the name");
  reset->add_option("bus", bus, "bus name")->required();
  std::string reset_reader;
  std::string reset_to;
  reset->add_option("--reader", reset_reader, "the durable reader name to move (shmbus-consumer --name)")
      ->required()
      ->check(tools::reader_name_validator());
  reset->add_option("--to", reset_to,
                    "earliest, latest, a sequence number (not inside a message that spans records), or a time: "
                    "the first message stamped at or after it (UTC 2026-11-22T03:53:43Z, as dump prints it, "
                    "or now-5m; needs records the producer stamped)")
      ->required();
  reset->add_flag("--json", json, json_help);

  auto* let_go = app.add_subcommand(
      "let-go", "let a reader that holds the producer of a block bus go at once, as --max-hold does: it reads "
                "on without holding the producer and is told what it loses");
  let_go->add_option("bus", bus, "bus name")->required();
  std::string let_go_reader;
  let_go->add_option("--reader", let_go_reader, "the reader: its slot number (as show prints it) or its name")
      ->required()
      ->type_name("SLOT|NAME");
  let_go->add_flag("--json", json, json_help);

  auto* rm = app.add_subcommand(
      "rm", "remove a bus, and what creations of it killed mid-way left; refused while a live producer "
            "or reader is attached");
  rm->add_option("bus", bus, "bus name")->required();
  rm->add_flag("--force", force,
               "remove even while in use: its consumers' streams end (reason removed) and its "
               "producer's next publish fails");
  rm->add_flag("--json", json, json_help);

  SizeArgs size_args;
  auto* size = app.add_subcommand(
      "size", "print the --record-size and --capacity of a bus that takes the longest message and keeps what "
              "slow or late readers should find (touches no bus)");
  size->add_option("--max-message", size_args.max_message,
                   "the longest message the bus must take: 1MiB, 64KiB, 900 (B, KiB, MiB, GiB)")
      ->type_name("SIZE");
  size->add_option("--message", size_args.message,
                   "the usual message: records are the fewest 64-byte lines that hold it (default: 256-byte records)")
      ->type_name("SIZE");
  size->add_option("--retain", size_args.retain,
                   "usual messages the ring should still hold for a slow or late reader: N, or DURATION@RATE "
                   "(2s@50000/s: two seconds of 50,000 messages a second)")
      ->type_name("N|DURATION@RATE");
  size->add_option("--record-size", size_args.record_size, "use this record size instead (a multiple of 8, 64 to 1 MiB)");
  size->add_flag("--json", size_args.json, json_help);

  MetricsArgs metrics_args;
  auto* metrics = app.add_subcommand(
      "metrics", "counters of every bus (or of BUS...) in the Prometheus text format; "
                 "--listen HOST:PORT serves them at /metrics until Ctrl-C");
  metrics->add_option("bus", metrics_args.buses, "bus names (default: every bus)");
  metrics->add_option("--listen", metrics_args.listen,
                      "serve over HTTP, e.g. 127.0.0.1:9464 (port 0: any free port, printed on stderr)");

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
        set_trust(tools::resolve_trust(trust_args));
        tools::apply_dir(dir);
        if (list->parsed()) return run_list(json);
        if (show->parsed()) return run_show(bus, tools::parse_duration(interval), json);
        if (dump_cmd->parsed()) {
          dump.format = json ? DumpFormat::json : dump_format;
          return run_dump(dump);
        }
        if (watch->parsed()) {
          return run_watch(bus, tools::parse_duration(watch_interval),
                           watch_count ? std::optional<std::uint64_t>(watch_count) : std::nullopt, json);
        }
        if (check->parsed()) return run_check(bus, json);
        if (gc->parsed()) return run_gc(bus, forget, json);
        if (reset->parsed()) return run_reset(bus, reset_reader, reset_to, json);
        if (rm->parsed()) return run_rm(bus, force, json);
        if (let_go->parsed()) return run_let_go(bus, let_go_reader, json);
        if (size->parsed()) return run_size(size_args);
        if (metrics->parsed()) return run_metrics(metrics_args, tools::resolve_trust(trust_args));
        return tools::exit_usage;
      },
      [&] {
        // The library's messages already name the bus; others get it in front.
        const std::string& target = dump_cmd->parsed() ? dump.bus : bus;
        return target.empty() ? std::string() : fmt::format("bus '{}'", target);
      });
}
