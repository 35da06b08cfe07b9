// shmbus tools — --trust-owner / --trust-group, shared by every program.
#pragma once

#include <CLI/CLI.hpp>
#include <shmbus/bus.hpp>

#include <string>
#include <vector>

namespace shmbus::tools {

// The users and groups named on the command line (names or numeric ids).
struct TrustArgs {
  std::vector<std::string> owners;
  std::vector<std::string> groups;
};

// Adds --trust-owner USER and --trust-group GROUP (each repeatable).
void add_trust_options(CLI::App& app, TrustArgs& args);

// Resolves the names; throws std::invalid_argument naming an unknown one.
Trust resolve_trust(const TrustArgs& args);

}  // namespace shmbus::tools
