// Every top-level request field the two generation endpoints know, with what
// lumen-server does with it: one table, so that no field that would change
// the answer is ever silently ignored. The sampler fields (temperature,
// top_p, seed, ...) are not repeated here: they are the runtime's sampler
// table (kSamplerParams), implemented on both endpoints.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lumen/server/api.h"

namespace lumen::server {

enum class FieldStatus {
  Implemented,     // parsed and honoured (src/server/api.cpp)
  Harmless,        // accepted: it cannot change what the client gets here
  DefaultOnly,     // only its default value is accepted; any other is a 400
  NotImplemented,  // always a 400 naming it
};
std::string_view to_string(FieldStatus status);

// Endpoints a field belongs to, as bits.
inline constexpr unsigned kCompletionsField = 1, kChatField = 2, kBothEndpoints = 3;

struct RequestField {
  std::string_view name;       // top level, or "parent.child" for an object field's keys
  unsigned endpoints;          // kCompletionsField | kChatField
  FieldStatus status;
  std::string_view note;       // why (Harmless), the default as JSON (DefaultOnly), or what it does
};

// The table (the sampler fields excepted, see above).
const std::vector<RequestField>& request_fields();

// Checks every field of a request body against the table and the sampler
// table; throws ApiError (400) naming the first field that is not supported,
// that has a value other than its only accepted one, or that is unknown
// (OpenAI's "Unrecognized request argument supplied", as it answers). A null
// value is no value: every parser reads it as unset.
void check_request_fields(Endpoint endpoint, const nlohmann::json& body);

}  // namespace lumen::server
