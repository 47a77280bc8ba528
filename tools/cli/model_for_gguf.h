// model.so for a GGUF file when the command line names none (lumen-run,
// lumen-bench and lumen-server): the dsl/ program whose `model` line is the
// GGUF's general.architecture, compiled for this CPU and the file's tensor
// types into the compiled-model cache by the compile driver, or found there.
// The tools read the GGUF here; the compiler libraries never link it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "lumen/driver/driver.h"
#include "lumen/gguf/gguf.h"

namespace lumen::cli {

// The type of every tensor of `file`, what a program is compiled for (also
// `lumenc compile --weights`). Throws std::runtime_error naming the first
// tensor of a type Lumen does not read ("tensor 'X' has type IQ2_XS, which
// Lumen does not read").
driver::WeightTypes weight_types_of(const gguf::File& file);

// The model.so's path. Says on stderr "TOOL: compiled PROGRAM for ISA into
// PATH" (after the compile's warnings) when it compiled; a program's
// diagnostics go to stderr before the throw. Throws std::runtime_error with
// one line: a GGUF that cannot be read or has no architecture, no program for
// it, a program that does not compile.
std::string model_for_gguf(const std::string& gguf_path, const std::optional<std::string>& dsl_dir,
                           std::string_view tool);

}  // namespace lumen::cli
