// How lumen-run, lumen-bench and lumen-server end on a bad command line:
// one line "NAME: error: ..." and exit 2 (--help prints and exits 0).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace lumen::cli {

// Parses the command line. Returns the exit code when the tool should stop
// here: 0 after --help, 2 after a usage error, printed as one line
// "NAME: error: ..." (NAME is the app's name).
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

}  // namespace lumen::cli
