// lumen-run's sampler flags, one per entry of the runtime's sampler table
// (kSamplerParams in lumen/runtime/sampler.h): names, ranges and defaults
// come from there; and llama.cpp's -l/--logit-bias.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string_view>

#include "lumen/runtime/sampler.h"

namespace lumen::cli {

// Adds a flag per sampler parameter to `app`, storing into `params` (which
// must outlive the parse); the help shows each default from `params`.
void add_sampler_flags(CLI::App& app, SamplerParams& params);

// One --logit-bias value as llama.cpp writes it, TOKEN_ID(+|-)BIAS ("15043+1",
// "15043-inf"); nothing when it is not of that form or logit_bias_error
// rejects it for any vocabulary.
std::optional<LogitBias> parse_logit_bias_flag(std::string_view text);

}  // namespace lumen::cli
