// llama-server's utility routes (see api_utility.h). Their bodies are as
// strict as the generation routes': an unknown field is a 400, not ignored.
#include "lumen/server/api_utility.h"

#include <initializer_list>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "lumen/runtime/sampler.h"
#include "lumen/server/api.h"

namespace lumen::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& message, const char* code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The body as an object holding only `known` fields (null ones count as absent).
json body_with(std::string_view text, std::initializer_list<std::string_view> known) {
  json body = parse_json_body(text);
  for (const auto& [key, value] : body.items()) {
    bool listed = false;
    for (std::string_view k : known) listed = listed || k == key;
    if (!listed && !value.is_null()) bad("Unrecognized request argument supplied: " + key, "unknown_parameter");
  }
  return body;
}

bool flag(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_boolean()) bad(std::string("'") + name + "' must be a boolean", "invalid_type");
  return it->get<bool>();
}

bool is_utf8(const std::string& s) {
  try {
    (void)json(s).dump();  // nlohmann checks UTF-8 when it prints
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

}  // namespace

std::string tokenize_response(std::string_view text, const Tokenizer& tokenizer) {
  const json body = body_with(text, {"content", "add_special", "with_pieces"});
  const auto content = body.find("content");
  if (content == body.end() || content->is_null()) bad("'content' is required", "missing_field");
  if (!content->is_string()) bad("'content' must be a string", "invalid_type");
  const std::string s = content->get<std::string>();
  const std::vector<int32_t> ids = flag(body, "add_special") ? tokenizer.encode_prompt(s) : tokenizer.encode(s, true);
  json tokens = json::array();
  const bool with_pieces = flag(body, "with_pieces");
  for (int32_t id : ids) {
    if (!with_pieces) {
      tokens.push_back(id);
      continue;
    }
    const std::string piece = tokenizer.token_text(id, /*special=*/true);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    tokens.push_back({{"id", id}, {"piece", is_utf8(piece) ? json(piece) : bytes}});
  }
  return dump({{"tokens", tokens}});
}

std::string detokenize_response(std::string_view text, const Tokenizer& tokenizer) {
  const json body = body_with(text, {"tokens"});
  const auto tokens = body.find("tokens");
  if (tokens == body.end() || tokens->is_null()) bad("'tokens' is required", "missing_field");
  if (!tokens->is_array()) bad("'tokens' must be a list of token ids", "invalid_type");
  std::vector<int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.n_vocab())
      bad("'tokens' must be integers in [0, " + std::to_string(tokenizer.n_vocab()) + ")");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return dump({{"content", tokenizer.decode(ids, /*special=*/true)}});
}

std::string apply_template_response(std::string_view text, const chat::ChatTemplate& chat_template) {
  body_with(text, {"messages"});
  // Parsed again keeping key order: templates print tool-call arguments as given.
  return dump({{"prompt", messages_prompt_text(nlohmann::ordered_json::parse(text), chat_template)}});
}

std::string props_response(const ServerProps& props, int64_t n_ctx, int total_slots, const Tokenizer& tokenizer) {
  // The defaults a request gets for every sampler field, from the sampler table.
  const SamplerParams defaults;
  json params = json::object();
  for (const SamplerParam& p : kSamplerParams) {
    const std::string name(p.json_field);
    if (const auto* real = std::get_if<RealSamplerParam>(&p.value))
      params[name] = defaults.*real->member;
    else
      params[name] = std::get<IntegerSamplerParam>(p.value).get(defaults);
  }
  params["logit_bias"] = json::array();
  params["stop"] = json::array();
  params["ignore_eos"] = false;
  params["stream"] = false;
  auto special = [&](std::optional<int32_t> id) { return id ? tokenizer.token_text(*id, true) : std::string(); };
  const json j = {{"default_generation_settings", {{"n_ctx", n_ctx}, {"params", params}}},
                  {"total_slots", total_slots},
                  {"model_path", props.model_path},
                  {"chat_template", props.chat_template_source},
                  {"bos_token", special(tokenizer.bos())},
                  {"eos_token", special(tokenizer.eos())},
                  {"build_info", "lumen " LUMEN_VERSION_STRING}};
  return dump(j);
}

}  // namespace lumen::server
