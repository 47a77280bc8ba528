// lumen-run's sampler flags, one per entry of the runtime's sampler table
// (kSamplerParams in lumen/runtime/sampler.h): names, ranges and defaults
// come from there.
#pragma once

#include <CLI/CLI.hpp>

#include "lumen/runtime/sampler.h"

namespace lumen::cli {

// Adds a flag per sampler parameter to `app`, storing into `params` (which
// must outlive the parse); the help shows each default from `params`.
void add_sampler_flags(CLI::App& app, SamplerParams& params);

}  // namespace lumen::cli
