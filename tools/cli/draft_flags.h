// The drafting flags of lumen-run and lumen-bench (speculative decoding by
// prompt lookup, lumen/runtime/speculative.h): llama.cpp's --draft/--draft-max
// and --draft-min, and --draft-ngram; ranges and defaults from DraftParams.
#pragma once

#include <CLI/CLI.hpp>

#include "lumen/runtime/speculative.h"

namespace lumen::cli {

// Adds the flags to `app`, storing into `params` (which must outlive the parse).
void add_draft_flags(CLI::App& app, runtime::DraftParams& params);

}  // namespace lumen::cli
