// Request parsing and response formatting for the OpenAI API (see api.h).
#include "lumen/server/api.h"

#include <cmath>
#include <string>
#include <variant>
#include <nlohmann/json.hpp>

#include "lumen/runtime/sampler.h"
#include "lumen/server/api_constraints.h"
#include "lumen/server/api_json_schema.h"

namespace lumen::server {

using nlohmann::json;

namespace {

// Invalid UTF-8 in generated text (a token may end mid-character) becomes U+FFFD.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* f = field(body, name);
  if (f == nullptr) return fallback;
  if (!f->is_number()) bad(std::string("'") + name + "' must be a number", "invalid_type");
  const double v = f->get<double>();
  if (!(v >= lo && v <= hi))
    bad(std::string("'") + name + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  return v;
}

int64_t integer(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* f = field(body, name);
  if (f == nullptr) return fallback;
  if (!f->is_number_integer()) bad(std::string("'") + name + "' must be an integer", "invalid_type");
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi)
    bad(std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* f = field(body, name);
  if (f == nullptr) return fallback;
  if (!f->is_boolean()) bad(std::string("'") + name + "' must be a boolean", "invalid_type");
  return f->get<bool>();
}

std::string content_text(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (content.is_array()) {  // [{"type": "text", "text": ...}, ...]
    std::string out;
    for (const json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        bad("only text content parts are supported", "invalid_type");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  bad("'content' must be a string or an array of text parts", "invalid_type");
}

}  // namespace

std::string error_body(const ApiError& e) {
  json j = {{"error", {{"message", e.what()}, {"type", e.type}, {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return dump(j);
}

std::string chat_prompt_text(const chat::ChatTemplate& chat_template, const std::vector<chat::Message>& messages,
                             const nlohmann::ordered_json& raw_messages) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (raw_messages.is_array()) extra["messages"] = raw_messages;
  try {
    return chat::render_chat(chat_template, messages, /*add_generation_prompt=*/true, extra);
  } catch (const chat::TemplateError& e) {
    bad(std::string("the chat template failed: ") + e.what(), "chat_template_error");
  }
}

ApiRequest parse_request(Endpoint endpoint, std::string_view text, const Tokenizer& tokenizer,
                         const chat::ChatTemplate& chat_template, int64_t n_ctx) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(std::string("the body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!body.is_object()) bad("the body must be a JSON object", "invalid_type");
  ApiRequest r;
  r.endpoint = endpoint;
  GenerationParams& g = r.generation;
  if (integer(body, "n", 1, 1, 1) != 1) bad("only n = 1 is supported");

  if (endpoint == Endpoint::Completions) {
    const json* prompt = field(body, "prompt");
    if (prompt == nullptr) bad("'prompt' is required", "missing_field");
    const json* one = prompt;
    if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
      if (prompt->size() != 1) bad("one prompt per request ('prompt' lists " + std::to_string(prompt->size()) + ")");
      one = &(*prompt)[0];
    }
    if (one->is_string()) {
      r.prompt_text = one->get<std::string>();
      g.prompt = tokenizer.encode_prompt(r.prompt_text);
    } else if (one->is_array()) {  // token ids
      for (const json& t : *one) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tokenizer.n_vocab())
          bad("'prompt' token ids must be integers in [0, " + std::to_string(tokenizer.n_vocab()) + ")");
        g.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      r.prompt_text = tokenizer.decode(g.prompt);
    } else {
      bad("'prompt' must be a string, a list of one string or a list of token ids", "invalid_type");
    }
    r.echo = boolean(body, "echo", false);
    const json* lp = field(body, "logprobs");
    if (lp != nullptr) {
      if (lp->is_boolean()) {
        r.logprobs = lp->get<bool>();
        g.top_logprobs = r.logprobs ? 0 : -1;
      } else {
        g.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 0, 20));
        r.logprobs = true;
      }
    }
    g.prompt_logprobs = r.echo && r.logprobs;
    g.max_tokens = integer(body, "max_tokens", 16, 0, kMaxTokensToPredict);
  } else {
    const json* messages = field(body, "messages");
    if (messages == nullptr) bad("'messages' is required", "missing_field");
    if (!messages->is_array() || messages->empty()) bad("'messages' must be a non-empty array", "invalid_type");
    std::vector<chat::Message> list;
    for (const json& m : *messages) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        bad("every message needs a string 'role'", "invalid_type");
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer")
        bad("unknown message role '" + role + "'");
      list.push_back({role == "developer" ? "system" : role, content_text(m.contains("content") ? m["content"] : json())});
    }
    r.prompt_text = chat_prompt_text(chat_template, list, nlohmann::ordered_json::parse(messages->dump()));
    g.prompt = tokenizer.encode_prompt(r.prompt_text);
    r.logprobs = boolean(body, "logprobs", false);
    const int64_t top = integer(body, "top_logprobs", 0, 0, 20);
    if (field(body, "top_logprobs") != nullptr && !r.logprobs) bad("'top_logprobs' needs 'logprobs': true");
    g.top_logprobs = r.logprobs ? static_cast<int>(top) : -1;
    g.max_tokens = integer(body, "max_completion_tokens", kMaxTokensToPredict, 0, kMaxTokensToPredict);
    g.max_tokens = integer(body, "max_tokens", g.max_tokens, 0, kMaxTokensToPredict);
  }

  // Every sampler field, named, bounded and defaulted by the runtime's table.
  for (const SamplerParam& p : kSamplerParams) {
    const std::string name(p.json_field);
    if (const auto* real = std::get_if<RealSamplerParam>(&p.value)) {
      float& v = g.sampling.*real->member;
      v = static_cast<float>(number(body, name.c_str(), v, real->lo, real->hi));
    } else {
      const auto& integral = std::get<IntegerSamplerParam>(p.value);
      integral.set(g.sampling, integer(body, name.c_str(), integral.get(g.sampling), integral.lo, integral.hi));
    }
  }
  g.ignore_eos = boolean(body, "ignore_eos", false);
  parse_constraints(body, g);
  if (auto schema = json_schema_constraint(text, body)) {
    if (g.grammar) bad("a JSON Schema and 'grammar' or response_format json_object cannot both constrain the output");
    g.grammar = std::move(schema);
  }
  r.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("'stream_options' must be an object", "invalid_type");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      g.stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) bad("at most 16 stop strings");
      for (const json& s1 : *stop) {
        if (!s1.is_string()) bad("'stop' must be a string or a list of strings", "invalid_type");
        g.stops.push_back(s1.get<std::string>());
      }
    } else {
      bad("'stop' must be a string or a list of strings", "invalid_type");
    }
    std::erase_if(g.stops, [](const std::string& x) { return x.empty(); });
  }

  if (g.prompt.empty()) bad("the prompt is empty");
  const int64_t prompt_tokens = static_cast<int64_t>(g.prompt.size());
  const int64_t room = g.max_tokens > 0 ? 1 : 0;  // the first generated token needs no position; the next ones do
  if (prompt_tokens + room > n_ctx || prompt_tokens > n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(prompt_tokens) + " tokens; the context holds " +
                       std::to_string(n_ctx),
                   "invalid_request_error", "context_length_exceeded");
  return r;
}

// ------------------------------------------------------------ responses

ResponseWriter::ResponseWriter(const ApiRequest& request, const Tokenizer& tokenizer, std::string model,
                               std::string id, int64_t created)
    : request_(request), tokenizer_(tokenizer), model_(std::move(model)), id_(std::move(id)), created_(created) {}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json logprob_value(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

// One choice object. Completions: logprobs as {tokens, token_logprobs,
// top_logprobs, text_offset}; chat: {content: [{token, logprob, bytes, top_logprobs}]}.
std::string ResponseWriter::chunk(const std::string& text, const std::vector<TokenLogprob>& lps, bool with_prompt,
                                  const char* finish_reason) const {
  const bool chat = request_.endpoint == Endpoint::Chat;
  json choice = {{"index", 0}};
  json logprobs = nullptr;
  if (request_.logprobs) {
    auto piece = [&](int32_t id) { return tokenizer_.token_text(id, /*special=*/true); };
    if (chat) {
      json content = json::array();
      for (const TokenLogprob& t : lps) {
        json top = json::array();
        for (const auto& [id, lp] : t.top) top.push_back({{"token", piece(id)}, {"logprob", lp}, {"bytes", bytes_of(piece(id))}});
        content.push_back({{"token", piece(t.id)}, {"logprob", logprob_value(t.logprob)}, {"bytes", bytes_of(piece(t.id))},
                           {"top_logprobs", top}});
      }
      logprobs = {{"content", content}};
    } else {
      json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
      // Offsets count from the start of the prompt text, as OpenAI's do.
      size_t offset = request_.prompt_text.size() + text_.size() - (with_prompt ? text_.size() : 0);
      std::vector<const TokenLogprob*> all;
      if (with_prompt) {
        offset = 0;
        for (const TokenLogprob& t : prompt_logprobs_) all.push_back(&t);
      }
      for (const TokenLogprob& t : lps) all.push_back(&t);
      for (const TokenLogprob* t : all) {
        const std::string p = piece(t->id);
        tokens.push_back(p);
        token_logprobs.push_back(logprob_value(t->logprob));
        if (!t->logprob) {
          top_logprobs.push_back(nullptr);
        } else {
          json top = json::object();
          for (const auto& [id, lp] : t->top) top[piece(id)] = lp;
          top_logprobs.push_back(top);
        }
        offsets.push_back(offset);
        offset += p.size();
      }
      logprobs = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
                  {"text_offset", offsets}};
    }
  }
  if (chat && request_.stream) {
    json delta = json::object();
    if (!sent_role_) delta["role"] = "assistant";
    if (!text.empty() || !finish_reason) delta["content"] = text;
    choice["delta"] = delta;
  } else if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  json out = {{"id", id_},
              {"object", chat ? (request_.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", json::array({choice})}};
  if (finish_reason && (!request_.stream || request_.include_usage)) {
    const int64_t prompt = static_cast<int64_t>(request_.generation.prompt.size());
    out["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", completion_tokens_},
                    {"total_tokens", prompt + completion_tokens_}};
  }
  return dump(out);
}

namespace {
// A sequence cancelled by shutdown ends as if it hit its length.
const char* reason_of(const std::string& r) { return r == "stop" ? "stop" : "length"; }
}  // namespace

std::string ResponseWriter::stream(const Event& event) {
  std::string out;
  auto record = [&](const std::string& data) { out += "data: " + data + "\n\n"; };
  switch (event.kind) {
    case Event::Kind::Prompt:
      prompt_logprobs_ = event.prompt;
      if (request_.echo) {
        record(chunk(request_.prompt_text, {}, true, nullptr));
        sent_role_ = true;
      }
      break;
    case Event::Kind::Token:
      if (request_.echo && !request_.generation.prompt_logprobs && text_.empty() && completion_tokens_ == 0) {
        record(chunk(request_.prompt_text, {}, false, nullptr));
      }
      ++completion_tokens_;
      record(chunk(event.text, request_.logprobs ? std::vector<TokenLogprob>{event.token} : std::vector<TokenLogprob>{},
                   false, nullptr));
      sent_role_ = true;
      text_ += event.text;
      break;
    case Event::Kind::Done:
      if (!event.text.empty()) {
        record(chunk(event.text, {}, false, nullptr));
        text_ += event.text;
        sent_role_ = true;
      }
      done_ = true;
      record(chunk("", {}, false, reason_of(event.finish_reason)));
      out += "data: [DONE]\n\n";
      break;
  }
  return out;
}

void ResponseWriter::add(const Event& event) {
  switch (event.kind) {
    case Event::Kind::Prompt: prompt_logprobs_ = event.prompt; break;
    case Event::Kind::Token:
      ++completion_tokens_;
      text_ += event.text;
      logprobs_.push_back(event.token);
      break;
    case Event::Kind::Done:
      text_ += event.text;
      finish_reason_ = reason_of(event.finish_reason);
      done_ = true;
      break;
  }
}

std::string ResponseWriter::body() const {
  const bool echo = request_.echo && request_.endpoint == Endpoint::Completions;
  // chunk() computes offsets from text_; a whole response starts at the prompt.
  ResponseWriter copy = *this;
  copy.text_.clear();
  const std::string text = echo ? request_.prompt_text + text_ : text_;
  return copy.chunk(text, logprobs_, echo && request_.generation.prompt_logprobs, finish_reason_.c_str());
}

}  // namespace lumen::server
