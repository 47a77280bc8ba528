// See api_constraints.h.
#include "lumen/server/api_constraints.h"

#include <string>

#include "lumen/grammar/grammar.h"
#include "lumen/server/api.h"

namespace lumen::server {

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

const nlohmann::json* field(const nlohmann::json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

void parse_constraints(const nlohmann::json& body, GenerationParams& generation) {
  if (const nlohmann::json* grammar = field(body, "grammar")) {
    if (!grammar->is_string()) bad("'grammar' must be a string (GBNF)", "invalid_type");
    const std::string& text = grammar->get_ref<const std::string&>();
    if (!text.empty()) {  // as llama-server: an empty grammar is none
      try {
        generation.grammar = grammar::Grammar::parse(text);
      } catch (const grammar::GrammarError& e) {
        bad(std::string("'grammar' is not a valid grammar: ") + e.what(), "invalid_grammar");
      }
    }
  }
  if (const nlohmann::json* format = field(body, "response_format")) {
    if (!format->is_object()) bad("'response_format' must be an object", "invalid_type");
    const nlohmann::json* type = field(*format, "type");
    if (type == nullptr || !type->is_string()) bad("'response_format.type' must be a string", "invalid_type");
    const std::string& name = type->get_ref<const std::string&>();
    if (name == "json_object") {
      if (generation.grammar) bad("'grammar' and 'response_format' cannot both constrain the output");
      generation.grammar = grammar::json_object_grammar();
    } else if (name != "text" && name != "json_schema") {  // json_schema: api_json_schema.cpp
      bad("'response_format.type' '" + name + "' is not supported (supported: text, json_object, json_schema)");
    }
  }
}

}  // namespace lumen::server
