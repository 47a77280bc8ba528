// JSON Schema -> GBNF: a grammar (llama.cpp's dialect, Grammar::parse) whose
// every match is a JSON text valid against the schema. The subset and its
// choices (property order, absent additionalProperties = false, bounded
// whitespace and digits) are documented in docs/server.md, "JSON Schema subset".
// The grammar may accept fewer documents than the schema does, never more.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lumen::grammar {

// One line naming the keyword and its JSON pointer, e.g.
// "unsupported keyword 'patternProperties' at /properties/a".
struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The converter's limits; beyond them a SchemaError, never unbounded work.
// The grammar's text stays within the engine's kMaxGrammarBytes (grammar.h).
struct JsonSchemaLimits {
  static constexpr int kMaxDepth = 64;     // nested schemas (and $ref hops, regex groups) on one path
  static constexpr int kMaxRepeat = 1000;  // lower bounds of repetitions (minLength, minItems, {m,n});
                                           // upper bounds above it are lowered to it
};

// The grammar for `schema`, its start rule `<prefix>root`; every rule name
// starts with `prefix` (letters, digits and '-'), so grammars of several
// schemas can be joined into one. The value may be followed by bounded
// whitespace. Throws SchemaError.
std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, std::string_view prefix = "");

}  // namespace lumen::grammar
