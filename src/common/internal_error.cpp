#include "lumen/common/internal_error.h"

namespace lumen {
namespace {

std::string describe(std::string_view message, std::string_view file, int line) {
  // The file's base name: build paths say nothing to a reader of the message.
  if (const size_t slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  return "internal error: " + std::string(message) + " (" + std::string(file) + ":" + std::to_string(line) +
         ")";
}

}  // namespace

InternalError::InternalError(std::string_view message, const char* file, int line)
    : std::logic_error(describe(message, file, line)) {}

void internal_error(std::string_view message, const char* file, int line) { throw InternalError(message, file, line); }

int run_tool(std::string_view tool, const std::function<int()>& body, std::FILE* err) {
  const int tool_len = static_cast<int>(tool.size());
  try {
    return body();
  } catch (const InternalError& e) {
    std::fflush(stdout);
    std::fprintf(err, "%.*s: %s\n", tool_len, tool.data(), e.what());
    return kInternalErrorExit;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(err, "%.*s: error: %s\n", tool_len, tool.data(), e.what());
    return 1;
  }
}

}  // namespace lumen
