// The request fields that constrain the output to a JSON Schema: OpenAI's
// response_format {"type": "json_schema", "json_schema": {name, schema,
// strict, description}} and llama-server's top-level `json_schema`. See
// docs/server.md, "JSON Schema subset".
#pragma once

#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lumen/grammar/grammar.h"

namespace lumen::server {

// The grammar of the request's schema, or null when it names none. `text` is
// the body as sent: the schema is read from it again in its own member order
// (nlohmann::json sorts keys; the grammar writes members in schema order).
// Throws ApiError (400 naming the field, with the SchemaError text).
std::shared_ptr<const grammar::Grammar> json_schema_constraint(std::string_view text, const nlohmann::json& body);

}  // namespace lumen::server
