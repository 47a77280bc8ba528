// The request-field table (src/server/api_fields.cpp) against the APIs it
// answers for: every field of OpenAI's completions and chat-completions
// bodies and of llama-server's extras has a decided status; each status does
// what it says through parse_request (no model: the reference vocabulary and
// chat template suffice); docs/server.md lists the same table.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lumen/runtime/sampler.h"
#include "lumen/server/api.h"
#include "lumen/server/api_fields.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"
#include "support/test_files.h"

namespace lumen::server {
namespace {

using nlohmann::json;

// OpenAI's request bodies (API reference, "Create completion" and "Create
// chat completion") and llama-server's extras (its README, "POST /completion",
// and its OpenAI-compatible routes).
const std::vector<std::string> kOpenAiCompletionsFields = {
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user"};
const std::vector<std::string> kOpenAiChatFields = {
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls", "prediction",
    "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
    "service_tier", "stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools",
    "top_logprobs", "top_p", "user", "verbosity", "web_search_options"};
const std::vector<std::string> kLlamaServerFields = {
    "top_k", "min_p", "repeat_penalty", "repeat_last_n", "ignore_eos", "n_probs", "mirostat", "mirostat_tau",
    "mirostat_eta", "typical_p", "tfs_z", "dynatemp_range", "dynatemp_exponent", "xtc_probability", "xtc_threshold",
    "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "n_keep",
    "cache_prompt", "samplers", "id_slot", "grammar", "json_schema", "n_predict", "min_keep", "top_n_sigma",
    "penalize_nl", "n_indent", "t_max_predict_ms", "timings_per_token", "return_tokens", "post_sampling_probs",
    "response_fields", "lora", "image_data"};

// A value each accepted field can take that is not its default, with the
// fields it needs beside it.
const std::map<std::string, json> kAcceptedExamples = {
    {"model", {{"model", "gpt-4o"}}},
    {"max_tokens", {{"max_tokens", 2}}},
    {"logprobs", {{"logprobs", true}}},
    {"stop", {{"stop", {"a", "b"}}}},
    {"stream", {{"stream", true}}},
    {"stream_options", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}},
    {"stream_options.include_usage", {{"stream", true}, {"stream_options", {{"include_usage", true}}}}},
    {"stream_options.include_obfuscation", {{"stream", true}, {"stream_options", {{"include_obfuscation", false}}}}},
    {"user", {{"user", "user-1234"}}},
    {"logit_bias", {{"logit_bias", {{"15", 1}}}}},
    {"n", {{"n", 2}}},
    {"response_format", json::parse(R"({"response_format": {"type": "json_object"}})")},
    {"tools", json::parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})")},
    {"tool_choice",
     json::parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                     "tool_choice": "none"})")},
    {"parallel_tool_calls",
     json::parse(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
                     "parallel_tool_calls": false})")},
    {"grammar", json::parse(R"({"grammar": "root ::= \"a\""})")},
    {"json_schema", json::parse(R"({"json_schema": {"type": "integer"}})")},
    {"prompt", {{"prompt", "Hello"}}},
    {"echo", {{"echo", true}}},
    {"messages", {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}}},
    {"max_completion_tokens", {{"max_completion_tokens", 2}}},
    {"top_logprobs", {{"logprobs", true}, {"top_logprobs", 2}}},
    {"metadata", {{"metadata", {{"session", "abc"}}}}},
    {"store", {{"store", true}}},
    {"safety_identifier", {{"safety_identifier", "hash-1"}}},
    {"service_tier", {{"service_tier", "auto"}}},
    {"prompt_cache_key", {{"prompt_cache_key", "conversation-7"}}},
    {"prediction", {{"prediction", {{"type", "content"}, {"content", "Hello"}}}}},
    {"ignore_eos", {{"ignore_eos", true}}},
    {"speculative.n_max", {{"speculative.n_max", 4}}},
    {"speculative.n_min", {{"speculative.n_min", 2}}},
    {"speculative.p_min", {{"speculative.p_min", 0.5}}},
    {"cache_prompt", {{"cache_prompt", false}}},
    {"id_slot", {{"id_slot", 1}}},
    {"n_keep", {{"n_keep", -1}}},
};

class ApiFields : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    file_ = new gguf::File(gguf::File::open(test_support::tiny_gguf()));
    tokenizer_ = new Tokenizer(Tokenizer::from_gguf(*file_));
    bool used_chatml = false;
    template_ = new chat::ChatTemplate(
        chat::load_chat_template(*file_, test_support::tiny_gguf(), std::nullopt, &used_chatml));
  }
  static void TearDownTestSuite() {
    delete template_;
    delete tokenizer_;
    delete file_;
  }

  static json base(Endpoint endpoint) {
    if (endpoint == Endpoint::Chat) return {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
    return {{"prompt", "Hi"}};
  }
  static ApiRequest parse(Endpoint endpoint, const json& body) {
    return parse_request(endpoint, body.dump(), *tokenizer_, *template_, 256, /*max_choices=*/4);
  }
  // The 400's message, or "" when the body parses.
  static std::string refusal(Endpoint endpoint, const json& body) {
    try {
      parse(endpoint, body);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.what();
    }
    return "";
  }

  static gguf::File* file_;
  static Tokenizer* tokenizer_;
  static chat::ChatTemplate* template_;
};
gguf::File* ApiFields::file_ = nullptr;
Tokenizer* ApiFields::tokenizer_ = nullptr;
chat::ChatTemplate* ApiFields::template_ = nullptr;

const RequestField* find(std::string_view name) {
  for (const RequestField& f : request_fields())
    if (f.name == name) return &f;
  return nullptr;
}

bool is_sampler_field(const std::string& name) {
  for (const SamplerParam& p : kSamplerParams)
    if (p.json_field == name) return true;
  return false;
}

TEST_F(ApiFields, EveryFieldOfTheApisHasADecidedStatus) {
  auto expect_listed = [](const std::vector<std::string>& fields, unsigned bit) {
    for (const std::string& name : fields) {
      if (is_sampler_field(name)) continue;
      const RequestField* f = find(name);
      ASSERT_NE(f, nullptr) << name;
      EXPECT_NE(f->endpoints & bit, 0u) << name;
    }
  };
  expect_listed(kOpenAiCompletionsFields, kCompletionsField);
  expect_listed(kOpenAiChatFields, kChatField);
  expect_listed(kLlamaServerFields, kCompletionsField);
  std::set<std::string> names;
  for (const RequestField& f : request_fields()) {
    EXPECT_TRUE(names.insert(std::string(f.name)).second) << "listed twice: " << f.name;
    EXPECT_FALSE(is_sampler_field(std::string(f.name))) << f.name << " is the sampler table's";
    EXPECT_FALSE(f.note.empty()) << f.name;
    if (f.status == FieldStatus::DefaultOnly) {
      EXPECT_FALSE(json::parse(f.note, nullptr, false).is_discarded()) << f.name;
    }
  }
}

// Implemented and harmless fields are accepted with a non-default value; a
// field accepted only at its default takes it and refuses another value; a
// field not implemented is refused whatever its value; each refusal names it.
TEST_F(ApiFields, EachStatusDoesWhatItSays) {
  std::set<std::string> accepted;
  for (const RequestField& f : request_fields()) {
    for (Endpoint endpoint : {Endpoint::Completions, Endpoint::Chat}) {
      if ((f.endpoints & (endpoint == Endpoint::Chat ? kChatField : kCompletionsField)) == 0) continue;
      const std::string name(f.name);
      SCOPED_TRACE(name + (endpoint == Endpoint::Chat ? " (chat)" : " (completions)"));
      json body = base(endpoint);
      // llama-server's speculative.* are top-level keys with a dot in them;
      // other dotted names are keys of a listed parent object.
      const size_t dot = find(name.substr(0, name.find('.'))) != nullptr ? name.find('.') : std::string::npos;
      // A value for the field, at its place (top level or inside its parent).
      auto with = [&](const json& value) {
        json b = body;
        if (dot == std::string::npos) b[name] = value;
        else b[name.substr(0, dot)][name.substr(dot + 1)] = value;
        return b;
      };
      switch (f.status) {
        case FieldStatus::Implemented:
        case FieldStatus::Harmless: {
          accepted.insert(name);
          const auto example = kAcceptedExamples.find(name);
          ASSERT_NE(example, kAcceptedExamples.end()) << "no example for an accepted field";
          json b = body;
          b.update(example->second);
          EXPECT_EQ(refusal(endpoint, b), "");
          break;
        }
        case FieldStatus::DefaultOnly:
          EXPECT_EQ(refusal(endpoint, with(json::parse(f.note))), "");
          EXPECT_EQ(refusal(endpoint, with("other")), "'" + name + "' other than " + std::string(f.note) + " is not supported");
          break;
        case FieldStatus::NotImplemented:
          EXPECT_EQ(refusal(endpoint, with(true)), "'" + name + "' is not supported");
          EXPECT_EQ(refusal(endpoint, with(json::object())), "'" + name + "' is not supported");
          break;
      }
      if (!body.contains(name)) {  // the base's own field is required
        EXPECT_EQ(refusal(endpoint, with(nullptr)), "") << "null is no value";
      }
    }
  }
  std::set<std::string> examples;
  for (const auto& [name, value] : kAcceptedExamples) examples.insert(name);
  EXPECT_EQ(examples, accepted) << "one example per accepted field, no more";
}

TEST_F(ApiFields, UnknownFieldsAndOtherEndpointsFieldsAreRefused) {
  json body = base(Endpoint::Completions);
  body["frobnicate"] = 1;
  EXPECT_EQ(refusal(Endpoint::Completions, body), "Unrecognized request argument supplied: frobnicate");
  body = base(Endpoint::Chat);
  body["stream_options"] = {{"include_usage", true}, {"colour", "red"}};
  EXPECT_EQ(refusal(Endpoint::Chat, body), "Unrecognized request argument supplied: stream_options.colour");
  body = base(Endpoint::Completions);
  body["top_logprobs"] = 2;
  EXPECT_EQ(refusal(Endpoint::Completions, body), "'top_logprobs' is not a field of /v1/completions");
  body = base(Endpoint::Chat);
  body["echo"] = true;
  EXPECT_EQ(refusal(Endpoint::Chat, body), "'echo' is not a field of /v1/chat/completions");
  // The sampler table's fields are known on both.
  for (const SamplerParam& p : kSamplerParams)
    for (Endpoint endpoint : {Endpoint::Completions, Endpoint::Chat}) {
      body = base(endpoint);
      body[std::string(p.json_field)] = 0;
      const std::string why = refusal(endpoint, body);
      EXPECT_EQ(why.find("Unrecognized"), std::string::npos) << why;
    }
}

// logit_bias in both of its forms lands in the sampler parameters; ids
// outside the vocabulary and biases outside the range are 400s naming it.
TEST_F(ApiFields, LogitBiasForms) {
  json body = base(Endpoint::Completions);
  body["logit_bias"] = {{"15", 5}, {"20", -100}};
  std::vector<LogitBias> b = parse(Endpoint::Completions, body).generation.sampling.logit_bias;
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].id, 15);
  EXPECT_EQ(b[0].bias, 5.0f);
  EXPECT_EQ(b[1].id, 20);
  EXPECT_EQ(b[1].bias, -100.0f);
  body["logit_bias"] = json::array({json::array({7, false}), json::array({"Hello", 2.5})});
  b = parse(Endpoint::Completions, body).generation.sampling.logit_bias;
  const std::vector<int32_t> hello = tokenizer_->encode("Hello", false);
  ASSERT_EQ(b.size(), 1 + hello.size());
  EXPECT_EQ(b[0].id, 7);
  EXPECT_EQ(b[0].bias, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(b[1].id, hello[0]);
  EXPECT_EQ(b[1].bias, 2.5f);
  const std::string n_vocab = std::to_string(tokenizer_->n_vocab());
  for (const json& bad : {json{{std::to_string(tokenizer_->n_vocab()), 1}}, json{{"-1", 1}}, json{{"x", 1}},
                          json{{"3", 100.5}}, json{{"3", "high"}}, json{{"3", true}}, json::array({json::array({3})}),
                          json::array({json::array({1e20, 1})}), json(3), json{{"99999999999", 1}}}) {
    body["logit_bias"] = bad;
    const std::string why = refusal(Endpoint::Completions, body);
    EXPECT_EQ(why.rfind("'logit_bias'", 0), 0u) << bad.dump() << ": " << why;
  }
}

// docs/server.md's "Request fields" table: one row per field of the code's
// tables (this one and the sampler table), with the same endpoints and status.
TEST_F(ApiFields, DocsListTheSameTable) {
  const std::string doc = test_support::read_existing_file(LUMEN_SOURCE_DIR "/docs/server.md");
  const size_t start = doc.find("\n## Request fields\n");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("\n## ", start + 1);
  std::map<std::string, std::string> rows;  // name -> "endpoints | status"
  size_t at = start;
  while ((at = doc.find("\n| `", at)) != std::string::npos && at < end) {
    const size_t line_end = doc.find('\n', at + 1);
    std::string line = doc.substr(at + 4, line_end - at - 4);
    const size_t tick = line.find('`');
    const std::string name = line.substr(0, tick);
    std::vector<std::string> cells;
    size_t c = line.find('|', tick);
    while (c != std::string::npos) {
      const size_t next = line.find('|', c + 1);
      if (next == std::string::npos) break;
      std::string cell = line.substr(c + 1, next - c - 1);
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
      c = next;
    }
    EXPECT_TRUE(rows.emplace(name, cells.size() >= 2 ? cells[0] + " | " + cells[1] : line).second) << name;
    at = line_end;
  }
  auto endpoints = [](unsigned e) {
    return std::string(e == kBothEndpoints ? "both" : e == kChatField ? "chat" : "completions");
  };
  std::map<std::string, std::string> code;
  for (const RequestField& f : request_fields()) {
    std::string status(to_string(f.status));
    if (f.status == FieldStatus::DefaultOnly) status += ": `" + std::string(f.note) + "`";
    code[std::string(f.name)] = endpoints(f.endpoints) + " | " + status;
  }
  for (const SamplerParam& p : kSamplerParams)
    code[std::string(p.json_field)] = "both | " + std::string(to_string(FieldStatus::Implemented));
  EXPECT_EQ(rows, code);
}

}  // namespace
}  // namespace lumen::server
