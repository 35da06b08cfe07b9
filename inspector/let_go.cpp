#include "inspector/let_go.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <shmbus/inspect.hpp>

#include <charconv>
#include <cstdio>
#include <optional>
#include <vector>

#include "inspector/commands.hpp"
#include "inspector/report.hpp"

namespace shmbus::inspect_tool {

namespace {

// The slot `reader` names in `snap`: a number is a slot, anything else a
// name that exactly one reader in use carries.
const ReaderView& find_reader(const std::string& bus, const Snapshot& snap, const std::string& reader) {
  std::uint32_t slot = 0;
  const auto [p, ec] = std::from_chars(reader.data(), reader.data() + reader.size(), slot);
  const bool numeric = !reader.empty() && ec == std::errc() && p == reader.data() + reader.size();
  std::vector<const ReaderView*> found;
  for (const ReaderView& r : snap.readers) {
    if (numeric ? r.slot == slot : r.name == reader) found.push_back(&r);
  }
  if (found.empty()) {
    throw bus_failure(bus, numeric ? fmt::format("no reader in slot {}", slot)
                                   : fmt::format("no reader named '{}' is attached", reader),
                      "not_found");
  }
  if (found.size() > 1) {
    std::string slots;
    for (const ReaderView* r : found) slots += (slots.empty() ? "" : ", ") + std::to_string(r->slot);
    throw tools::Failure(tools::exit_usage,
                         fmt::format("bus '{}': {} readers are named '{}' (slots {}): give the slot", bus,
                                     found.size(), reader, slots),
                         "usage");
  }
  return *found.front();
}

}  // namespace

int run_let_go(const std::string& bus, const std::string& reader, bool json_out) {
  const Snapshot snap = Inspector::open(bus, inspect_trust()).snapshot();
  const ReaderView& target = find_reader(bus, snap, reader);
  ReaderView was;
  try {
    was = let_go_reader(bus, target.slot, target.generation, inspect_trust());
  } catch (const Error& e) {
    // Refusals are a state of the bus, not a bad command line.
    if (e.errc() == Errc::invalid_options) throw tools::Failure(tools::exit_failure, e.what(), "refused");
    throw;
  }
  const std::uint64_t behind = snap.head > was.cursor ? snap.head - was.cursor : 0;
  const bool held_back = snap.producer.attached && snap.producer.waiting_for_space &&
                         snap.producer.blocked_on_slot == was.slot;
  if (json_out) {
    const nlohmann::ordered_json j{{"bus", bus},
                                   {"let_go", to_json(was)},
                                   {"behind", behind},
                                   {"producer_unblocked", held_back}};
    std::puts(dump_json(j, false).c_str());
    return 0;
  }
  std::fputs(fmt::format("bus '{}': let reader {} '{}' ({}) go: it no longer holds the producer; it was {} "
                         "records behind, and its next reads tell it what it loses\n",
                         bus, was.slot, display_name(was.name), pid_label(was.pid, was.pid_namespace), behind)
                 .c_str(),
             stdout);
  if (held_back) {
    std::fputs(fmt::format("bus '{}': producer {} was waiting for it and can continue\n", bus,
                           pid_label(snap.producer.pid, snap.producer.pid_namespace))
                   .c_str(),
               stdout);
  }
  return 0;
}

}  // namespace shmbus::inspect_tool
