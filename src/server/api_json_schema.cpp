// See api_json_schema.h.
#include "lumen/server/api_json_schema.h"

#include <string>

#include "lumen/grammar/json_schema.h"
#include "lumen/server/api.h"

namespace lumen::server {

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

bool present(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && !it->is_null();
}

// response_format.json_schema's shape (OpenAI's rules for `name`).
void check_shape(const nlohmann::json& spec) {
  const std::string at = "response_format.json_schema";
  if (!spec.is_object()) bad("'" + at + "' must be an object", "invalid_type");
  for (const auto& [key, value] : spec.items())
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      bad("'" + at + "." + key + "' is not a field of it (name, schema, strict, description)");
  if (!present(spec, "name")) bad("'" + at + ".name' is required", "missing_field");
  const nlohmann::json& name = spec["name"];
  if (!name.is_string() || name.get_ref<const std::string&>().empty() || name.get_ref<const std::string&>().size() > 64 ||
      name.get_ref<const std::string&>().find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
    bad("'" + at + ".name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", "invalid_type");
  if (present(spec, "strict") && !spec["strict"].is_boolean()) bad("'" + at + ".strict' must be a boolean", "invalid_type");
  if (present(spec, "description") && !spec["description"].is_string())
    bad("'" + at + ".description' must be a string", "invalid_type");
}

std::shared_ptr<const grammar::Grammar> grammar_of(const nlohmann::ordered_json& schema, const std::string& field) {
  try {
    return grammar::Grammar::parse(grammar::json_schema_to_gbnf(schema));
  } catch (const grammar::SchemaError& e) {
    bad("'" + field + "': " + e.what(), "invalid_schema");
  } catch (const grammar::GrammarError& e) {  // e.g. a recursion with no way out
    bad("'" + field + "': its grammar is refused: " + e.what(), "invalid_schema");
  }
}

}  // namespace

std::shared_ptr<const grammar::Grammar> json_schema_constraint(std::string_view text, const nlohmann::json& body) {
  const bool top = present(body, "json_schema");
  bool openai = false;
  if (present(body, "response_format") && body["response_format"].is_object() &&
      body["response_format"].value("type", "") == "json_schema") {
    if (!present(body["response_format"], "json_schema"))
      bad("'response_format.json_schema' is required with type 'json_schema'", "missing_field");
    check_shape(body["response_format"]["json_schema"]);
    openai = true;
  }
  if (!top && !openai) return nullptr;
  if (top && openai) bad("'json_schema' and 'response_format' cannot both constrain the output");
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);  // parsed once already: valid
  if (top) return grammar_of(ordered["json_schema"], "json_schema");
  const nlohmann::ordered_json& spec = ordered["response_format"]["json_schema"];
  const auto schema = spec.find("schema");
  if (schema == spec.end() || schema->is_null()) return grammar_of(nlohmann::ordered_json::object(), "response_format.json_schema.schema");
  return grammar_of(*schema, "response_format.json_schema.schema");
}

}  // namespace lumen::server
