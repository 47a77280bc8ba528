// The request fields that constrain the generated text to a grammar:
// llama-server's `grammar` (GBNF) and OpenAI's `response_format`
// ({"type": "text"} or {"type": "json_object"}). See docs/server.md,
// "Constrained output".
#pragma once

#include <nlohmann/json.hpp>

#include "lumen/server/scheduler.h"

namespace lumen::server {

// Sets generation.grammar from the body; throws ApiError (400 naming the
// field) for a wrong type, an unknown response_format type, two constraints
// at once, or a grammar that does not parse (with the GrammarError text).
void parse_constraints(const nlohmann::json& body, GenerationParams& generation);

}  // namespace lumen::server
