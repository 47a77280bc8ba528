// model.so for a GGUF file when the command line names none (lumen-run and
// lumen-server): the dsl/ program whose `model` line is the GGUF's
// general.architecture, compiled for this CPU into the compiled-model cache by
// the compile driver, or found there.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace lumen::cli {

// The model.so's path. Says on stderr "TOOL: compiled PROGRAM for ISA into
// PATH" (after the compile's warnings) when it compiled; a program's
// diagnostics go to stderr before the throw. Throws std::runtime_error with
// one line: a GGUF that cannot be read or has no architecture, no program for
// it, a program that does not compile.
std::string model_for_gguf(const std::string& gguf_path, const std::optional<std::string>& dsl_dir,
                           std::string_view tool);

}  // namespace lumen::cli
