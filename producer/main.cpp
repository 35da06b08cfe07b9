// shmbus-producer: publishes lines from stdin or a file, length-prefixed
// binary frames, or synthetic messages (see tools/common/synthetic.hpp) to a
// bus, then marks end-of-stream. Summary on stderr; stdout is unused.
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <shmbus/shmbus.hpp>

#include "producer/options.hpp"
#include "producer/run.hpp"
#include "tools/common/choice.hpp"
#include "tools/common/duration.hpp"
#include "tools/common/program.hpp"
#include "tools/common/run_main.hpp"
#include "tools/common/bus_dir.hpp"
#include "tools/common/trust.hpp"

namespace {

using namespace shmbus;
using namespace shmbus::tools;
using namespace shmbus::producer;

const Choices<Policy> policy_names = {{"block", Policy::block}, {"overwrite", Policy::overwrite}};
const Choices<Oversize> oversize_names = {
    {"error", Oversize::error}, {"skip", Oversize::skip}, {"truncate", Oversize::truncate}};
const Choices<Timestamps> timestamp_names = {
    {"off", Timestamps::off}, {"coarse", Timestamps::coarse}, {"precise", Timestamps::precise}};

// --mode: permission bits in octal.
CLI::Validator octal_mode() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos) {
          return "must be octal permission bits like 0600 or 660";
        }
        return {};
      },
      "OCTAL");
}

// --size N or MIN..MAX: no minus sign, refused as refuse_negative_numbers()
// refuses one in the numeric options.
CLI::Validator not_negative_text() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::size_t first = s.find_first_not_of(" \t\n\v\f\r");
        return first != std::string::npos && s[first] == '-' ? "must be 0 or more, not '" + s + "'" : "";
      },
      "");
}

// An option that takes a duration (250us, 2s, forever...), its default
// shown in --help.
CLI::Option* add_duration_option(CLI::App& app, const std::string& name, std::string& value,
                                 const std::string& help) {
  return app.add_option(name, value, help)->check(duration_validator())->capture_default_str();
}

// The bus, and the options of the one --create makes.
void add_bus_options(CLI::App& app, Options& o) {
  app.add_option("bus", o.bus, "Bus name ([A-Za-z0-9._-], the segment is DIR/shmbus.NAME, DIR /dev/shm unless --dir)")
      ->required();
  auto* create = app.add_flag("--create", o.create,
                              "Create the bus if it does not exist. An existing bus is used if the options "
                              "given (--capacity, --record-size, --policy, --max-readers) are its own; one with "
                              "others is an error naming both, unless --as-is");
  app.add_flag("--as-is", o.as_is,
               "With --create: use an existing bus with its own options even where they differ from those given")
      ->needs(create);
  app.add_option("--capacity", o.capacity,
                 "Records in the ring, a power of two (with --create); 0: the power of two whose ring is nearest 4 MiB, at least 64")
      ->needs(create)
      ->capture_default_str();
  app.add_option("--record-size", o.record_size,
                 "Bytes per record incl. its 24-byte header, a multiple of 8 (with --create; "
                 "with --count, the default is the fewest 64-byte lines that fit --size, or MIN of "
                 "a mix). A longer message spans consecutive records")
      ->needs(create)
      ->capture_default_str();
  add_choice(app, "--policy", o.policy, policy_names, "When the ring is full: block or overwrite (with --create)")
      ->needs(create);
  app.add_option("--mode", o.mode, "Permission bits of the segment, octal (with --create)")
      ->check(octal_mode())
      ->needs(create)
      ->capture_default_str();
  app.add_option("--max-message", o.max_message,
                 "The longest message the bus must take (1MiB, 64KiB, 900; B, KiB, MiB, GiB): with --create "
                 "and no --capacity, the ring is made large enough (capacity x record size / 2 - 24 at least "
                 "this); a bus that would not take it (an existing one, or --capacity too small) is an error "
                 "before anything is published")
      ->type_name("SIZE");
  app.add_option("--max-readers", o.max_readers, "Reader slots (with --create)")
      ->needs(create)
      ->capture_default_str();
}

// What is published: the input, or synthetic messages. Returns --count,
// whose presence makes the messages synthetic.
CLI::Option* add_message_options(CLI::App& app, Options& o) {
  auto* file = app.add_option("--file", o.file, "Read messages from this file instead of stdin");
  auto* binary = app.add_flag("--binary", o.binary,
                              "Input is frames of a u32 little-endian length and that many bytes, "
                              "not lines");
  auto* count = app.add_option("--count", o.count,
                               "Publish N synthetic messages (sequence, timestamp, checksum, "
                               "filler) instead of reading input");
  app.add_option("--size", o.size,
                 "Bytes per synthetic message (>= 24, up to the bus's max message), or MIN..MAX: "
                 "a mix of sizes drawn uniformly from that range, the same sizes every run")
      ->type_name("N|MIN..MAX")
      ->check(not_negative_text())
      ->needs(count)
      ->capture_default_str();
  app.add_option("--rate", o.rate,
                 "Messages per second, synthetic or from the input (replays a log at a fixed "
                 "rate; default: as fast as possible); at least 0.001, one message every 1000 s")
      ->check(message_rate());
  add_choice(app, "--oversize", o.oversize, oversize_names,
                 "An input line or frame longer than the bus's max message: error (stop there, "
                 "exit 1, leave the bus open), skip it, or truncate it; counted in the summary");
  count->excludes(file)->excludes(binary);
  return count;
}

// How it is published: the end of the stream, waits, stamps, the summary.
void add_publish_options(CLI::App& app, Options& o) {
  app.add_flag("--keep-open", o.keep_open,
               "Do not mark end-of-stream at the end (another producer may continue the bus)");
  add_duration_option(app, "--wait-timeout", o.wait_timeout,
                      "Give up with an error when the ring stays full this long, or when "
                      "--wait-for-readers are not attached in time: 250us, 500ms, 2s, 1.5m, 1h or forever "
                      "(a bare number is seconds)");
  app.add_option("--wait-for-readers", o.wait_for_readers,
                 "Wait until N consumers are attached before the first message");
  add_duration_option(app, "--max-hold", o.max_hold,
                      "Block bus: a reader that holds the producer back without moving for this long of its "
                      "waiting is let go: it reads on without holding the producer and is told what it "
                      "loses (shmbus-inspect show names it). Same grammar as --wait-timeout");
  add_choice(app, "--wait", o.wait, wait_strategies(), "How to wait for space: adaptive, spin-yield or busy-spin",
             wait_strategy_choice());
  app.add_option("--stamp-every", o.stamp_every,
                 "Synthetic messages: carry the send time (for shmbus-consumer --stats) in every "
                 "Nth message, 0 in the others. Default: every message with --rate, every 64th at "
                 "full speed, where a clock read per message would cost more than publishing it")
      ->check(positive_number());
  add_choice(app, "--timestamps", o.timestamps, timestamp_names,
                 "What each record's publish time holds: off (0), coarse (the kernel's last tick, "
                 "1-4 ms) or precise (ns; costs 10-60 ns per message depending on the CPU). "
                 "Synthetic messages carry their own send time either way");
  app.add_flag("--json", o.json, "Write the summary to stderr as one JSON object");
}

// The end of --help: message sizes, then the exit statuses.
std::string help_footer() {
  return "Message sizes: a message longer than one record's payload (record size - 24) spans "
         "consecutive records, up to the bus's max message: capacity x record size / 2 - 24 bytes (at most "
         "1 GiB), printed by shmbus-inspect show. --max-message SIZE with --create sizes the ring for you "
         "(and checks an existing bus); for a mix of sizes pick --record-size near the common small message "
         "(less wasted space per record). shmbus-inspect size --max-message 4MiB --message 100 --retain 2s@50000/s "
         "prints the options for a bus that takes the largest message and keeps what slow or late readers "
         "should find.\n\n" +
         exit_status_help({
             {"0", "success: the input or --count was published, or the run was stopped by SIGINT/SIGTERM"},
             {"1", "a bus error (missing, another layout version, a second producer, permission), an I/O error, "
                   "a message longer than the bus's max message, a full ring past --wait-timeout, SIGINT/SIGTERM "
                   "while waiting for --wait-for-readers (nothing published; a bus this run created is removed)"},
             {"2", "a bad command line, or bus options the library refuses (--capacity not a power of two)"},
             exit_status_second_signal,
         });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Publishes messages to a shmbus bus: lines from stdin (the default) or --file, "
      "length-prefixed frames (--binary), or synthetic messages (--count/--size/--rate) that "
      "shmbus-consumer --verify --stats can check. Marks end-of-stream when the input ends. "
      "The summary goes to stderr.",
      kProgram};
  app.footer(help_footer());
  Options o;
  add_bus_options(app, o);
  const CLI::Option* count = add_message_options(app, o);
  add_publish_options(app, o);
  add_trust_options(app, o.trust);
  std::string dir;
  add_dir_option(app, dir);
  add_version_flag(app, kProgram);
  refuse_negative_numbers(app);

  const ErrorSink sink{kProgram, wants_json(argc, argv)};
  return run_main(
      app, sink,
      [&] {
        app.parse(argc, argv);
        apply_dir(dir);
        o.synthetic = count->count() > 0;
        prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // --rate pacing wakes within ~1 us of its target
        return run(o, app);
      },
      [&] { return fmt::format("bus '{}'", o.bus); });
}
