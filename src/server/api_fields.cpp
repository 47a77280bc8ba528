// The request-field table (see api_fields.h). Harmless fields say why they
// cannot change the answer; fields that would change it and are not
// implemented are refused, never ignored.
#include "lumen/server/api_fields.h"

#include <string>

#include "lumen/runtime/sampler.h"

namespace lumen::server {

using nlohmann::json;

namespace {

constexpr FieldStatus kImplemented = FieldStatus::Implemented, kHarmless = FieldStatus::Harmless,
                      kDefaultOnly = FieldStatus::DefaultOnly, kNo = FieldStatus::NotImplemented;
constexpr unsigned kC = kCompletionsField, kChat = kChatField, kBoth = kBothEndpoints;

const std::vector<RequestField> kFields = {
    // OpenAI's fields, both endpoints.
    {"model", kBoth, kHarmless, "one model is served: any name reaches it (as llama-server)"},
    {"max_tokens", kBoth, kImplemented, "tokens to generate"},
    {"logprobs", kBoth, kImplemented, "log-probabilities (completions: k in 0..20; chat: a boolean)"},
    {"stop", kBoth, kImplemented, "a string or up to 16"},
    {"stream", kBoth, kImplemented, "Server-Sent Events"},
    {"stream_options", kBoth, kImplemented, "an object of the two fields below"},
    {"stream_options.include_usage", kBoth, kImplemented, "a last chunk with the usage"},
    {"stream_options.include_obfuscation", kBoth, kHarmless,
     "asks for random padding in chunks against length side channels; the text is the same without it"},
    {"user", kBoth, kHarmless, "an end-user id for abuse monitoring; nothing is recorded"},
    {"logit_bias", kBoth, kImplemented, "OpenAI's token id -> bias, or llama-server's [[token, bias]] list"},
    {"n", kBoth, kImplemented, "choices sharing the prompt's KV, 1..--parallel"},
    // OpenAI's completions only.
    {"prompt", kC, kImplemented, "a string, a list of one string, or token ids"},
    {"echo", kC, kImplemented, "the prompt precedes the text"},
    {"best_of", kC, kDefaultOnly, "1"},
    {"suffix", kC, kNo, "text after the insertion point"},
    // OpenAI's chat completions only.
    {"messages", kChat, kImplemented, "rendered by the chat template"},
    {"max_completion_tokens", kChat, kImplemented, "tokens to generate"},
    {"top_logprobs", kChat, kImplemented, "0..20 alternatives per token, with logprobs"},
    {"modalities", kChat, kDefaultOnly, R"(["text"])"},
    {"metadata", kChat, kHarmless, "tags for stored completions; nothing is stored"},
    {"store", kChat, kHarmless, "nothing is stored"},
    {"safety_identifier", kChat, kHarmless, "an end-user id for abuse monitoring; nothing is recorded"},
    {"service_tier", kChat, kHarmless, "a price and latency tier; there is one, and the text does not depend on it"},
    {"prompt_cache_key", kChat, kHarmless,
     "a cache routing hint; a cached prefix never changes the output (batch invariance)"},
    {"prediction", kChat, kHarmless, "predicted output, a latency hint: the text is the model's whatever it says"},
    {"response_format", kBoth, kImplemented, "text, json_object or json_schema: constrained sampling"},
    {"tools", kChat, kImplemented, "functions the model may call"},
    {"tool_choice", kChat, kImplemented, "auto, none, required or a named function"},
    {"parallel_tool_calls", kChat, kImplemented, "several calls in one reply"},
    {"functions", kChat, kNo, "tool calls (deprecated form)"},
    {"function_call", kChat, kNo, "tool calls (deprecated form)"},
    {"audio", kChat, kNo, "audio output"},
    {"reasoning_effort", kChat, kNo, "reasoning models"},
    {"verbosity", kChat, kNo, "reasoning models"},
    {"web_search_options", kChat, kNo, "web search"},
    // llama-server's extras, both endpoints.
    {"ignore_eos", kBoth, kImplemented, "generate past end-of-generation tokens"},
    {"grammar", kBoth, kImplemented, "GBNF-constrained sampling"},
    {"json_schema", kBoth, kImplemented, "schema-constrained sampling"},
    {"cache_prompt", kBoth, kHarmless, "a cached prefix never changes the output (batch invariance)"},
    {"id_slot", kBoth, kHarmless, "which slot runs a sequence never changes its output (batch invariance)"},
    {"n_keep", kBoth, kHarmless,
     "tokens llama-server keeps when it shifts a full context; lumen-server never shifts (a full context ends "
     "the answer with finish_reason length)"},
    {"n_predict", kBoth, kNo, "llama-server's max_tokens (-1: unbounded)"},
    {"n_probs", kBoth, kDefaultOnly, "0"},
    {"min_keep", kBoth, kDefaultOnly, "0"},
    {"typical_p", kBoth, kDefaultOnly, "1"},
    {"tfs_z", kBoth, kDefaultOnly, "1"},
    {"top_n_sigma", kBoth, kDefaultOnly, "-1"},
    {"dynatemp_range", kBoth, kDefaultOnly, "0"},
    {"dynatemp_exponent", kBoth, kDefaultOnly, "1"},
    {"mirostat", kBoth, kDefaultOnly, "0"},
    {"mirostat_tau", kBoth, kDefaultOnly, "5"},
    {"mirostat_eta", kBoth, kDefaultOnly, "0.1"},
    {"xtc_probability", kBoth, kDefaultOnly, "0"},
    {"xtc_threshold", kBoth, kDefaultOnly, "0.1"},
    {"dry_multiplier", kBoth, kDefaultOnly, "0"},
    {"dry_base", kBoth, kDefaultOnly, "1.75"},
    {"dry_allowed_length", kBoth, kDefaultOnly, "2"},
    {"dry_penalty_last_n", kBoth, kDefaultOnly, "-1"},
    {"dry_sequence_breakers", kBoth, kDefaultOnly, R"(["\n", ":", "\"", "*"])"},
    {"penalize_nl", kBoth, kDefaultOnly, "false"},
    {"samplers", kBoth, kNo, "the order of the sampler chain"},
    {"speculative.n_max", kBoth, kImplemented,
     "tokens drafted by prompt lookup per pass (0: off); drafting never changes the output"},
    {"speculative.n_min", kBoth, kImplemented, "a lookup that finds fewer tokens drafts nothing"},
    {"speculative.p_min", kBoth, kHarmless,
     "a draft model's confidence threshold; prompt lookup has no draft model, and drafting never changes the output"},
    {"n_indent", kBoth, kDefaultOnly, "0"},
    {"t_max_predict_ms", kBoth, kDefaultOnly, "0"},
    {"timings_per_token", kBoth, kDefaultOnly, "false"},
    {"return_tokens", kBoth, kDefaultOnly, "false"},
    {"post_sampling_probs", kBoth, kDefaultOnly, "false"},
    {"response_fields", kBoth, kNo, "llama-server's response filter"},
    {"lora", kBoth, kNo, "LoRA adapters"},
    {"image_data", kBoth, kNo, "images"},
    // llama-server's extras, chat only.
    {"chat_template_kwargs", kChat, kNo, "variables for the chat template"},
    {"reasoning_format", kChat, kNo, "reasoning extraction"},
};

[[noreturn]] void refuse(const std::string& message, const char* code) {
  throw ApiError(400, message, "invalid_request_error", code);
}

const RequestField* find_field(std::string_view name) {
  for (const RequestField& f : kFields)
    if (f.name == name) return &f;
  return nullptr;
}

// Whether the table lists the keys of this object field ("name.key").
bool has_listed_keys(const std::string& name) {
  for (const RequestField& f : kFields)
    if (f.name.size() > name.size() && f.name.substr(0, name.size()) == name && f.name[name.size()] == '.') return true;
  return false;
}

bool is_sampler_field(std::string_view name) {
  for (const SamplerParam& p : kSamplerParams)
    if (p.json_field == name) return true;
  return false;
}

std::string_view route_of(Endpoint endpoint) {
  return endpoint == Endpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
}

// The fields of one object level: `prefix` is "" at the top, "parent." below.
void check_level(Endpoint endpoint, const json& object, const std::string& prefix) {
  const unsigned bit = endpoint == Endpoint::Chat ? kChatField : kCompletionsField;
  for (const auto& [key, value] : object.items()) {
    if (value.is_null()) continue;
    const std::string name = prefix + key;
    if (prefix.empty() && is_sampler_field(name)) continue;
    const RequestField* f = find_field(name);
    if (f == nullptr) refuse("Unrecognized request argument supplied: " + name, "unknown_parameter");
    if ((f->endpoints & bit) == 0)
      refuse("'" + name + "' is not a field of " + std::string(route_of(endpoint)), "unknown_parameter");
    switch (f->status) {
      case FieldStatus::NotImplemented: refuse("'" + name + "' is not supported", "unsupported_parameter");
      case FieldStatus::DefaultOnly:
        if (value != json::parse(f->note))
          refuse("'" + name + "' other than " + std::string(f->note) + " is not supported", "unsupported_parameter");
        break;
      case FieldStatus::Implemented:
      case FieldStatus::Harmless:
        if (value.is_object() && has_listed_keys(name)) check_level(endpoint, value, name + ".");
        break;
    }
  }
}

}  // namespace

std::string_view to_string(FieldStatus status) {
  switch (status) {
    case FieldStatus::Implemented: return "implemented";
    case FieldStatus::Harmless: return "accepted, changes nothing";
    case FieldStatus::DefaultOnly: return "only the default";
    case FieldStatus::NotImplemented: return "400, not supported";
  }
  return "";
}

const std::vector<RequestField>& request_fields() { return kFields; }

void check_request_fields(Endpoint endpoint, const json& body) { check_level(endpoint, body, ""); }

}  // namespace lumen::server
