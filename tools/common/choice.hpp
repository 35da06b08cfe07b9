// shmbus tools — options that take one of a few words (--policy block, --format
// json), turned into an enum when the command line is parsed, so the programs
// compare enums, never strings.
//
//   add_choice(app, "--oversize", o.oversize, oversize_names, "What to do with ...");
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace shmbus::tools {

// Each word with the value it stands for.
template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

// A CLI11 transform for an option bound to an enum: the word becomes its
// value; anything else is refused with "'x' not in {a,b,c}", or with what
// `refuse` says. `description` is what --help shows (default "{a,b,c}").
template <class E>
CLI::Validator choice(const Choices<E>& choices, std::string description = {},
                      std::function<std::string(const std::string&)> refuse = {}) {
  std::string names;
  for (const auto& c : choices) names += (names.empty() ? "" : ",") + c.first;
  if (!refuse) {
    refuse = [names](const std::string& s) { return s + " not in {" + names + "}"; };
  }
  return CLI::Validator(
      [choices, refuse](std::string& s) -> std::string {
        for (const auto& [name, value] : choices) {
          if (s == name) {
            s = std::to_string(static_cast<std::underlying_type_t<E>>(value));
            return {};
          }
        }
        return refuse(s);
      },
      description.empty() ? "{" + names + "}" : description);
}

// The word for `value` (for messages and --help defaults); empty if none.
template <class E>
std::string choice_name(const Choices<E>& choices, E value) {
  for (const auto& [name, v] : choices) {
    if (v == value) return name;
  }
  return {};
}

// Adds an option bound to the enum `value`, taking the words of `choices`
// (refused as `check` says: choice(choices) unless given), its current value
// shown as the default in --help.
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& name, E& value, const Choices<E>& choices,
                        const std::string& help, CLI::Validator check = {}) {
  return app.add_option(name, value, help)
      ->transform(check.get_description().empty() ? choice(choices) : std::move(check))
      ->type_name("TEXT")
      ->default_str(choice_name(choices, value));
}

}  // namespace shmbus::tools
