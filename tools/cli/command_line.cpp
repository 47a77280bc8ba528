// The tools' command-line parse (see command_line.h).
#include "cli/command_line.h"

#include <cstdio>

namespace lumen::cli {

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace lumen::cli
