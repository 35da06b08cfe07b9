// shmbus tools — --dir DIR, the directory of the buses, shared by every
// program. The option wins over $SHMBUS_DIR, which wins over /dev/shm.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace shmbus::tools {

// Adds --dir DIR to `app`, stored in `dir`.
CLI::Option* add_dir_option(CLI::App& app, std::string& dir);

// Makes `dir` (when not empty) the directory of every bus this process
// names, or checks the one $SHMBUS_DIR or /dev/shm gives: a directory that
// is missing, is not one, or is not on tmpfs or hugetlbfs fails here with
// one line naming it (shmbus::Error, Errc::bad_directory). Call it once the
// command line is parsed, before any bus is opened.
void apply_dir(const std::string& dir);

}  // namespace shmbus::tools
