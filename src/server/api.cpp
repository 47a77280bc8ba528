// Request parsing and response formatting for the OpenAI API (see api.h).
#include "lumen/server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <variant>
#include <nlohmann/json.hpp>

#include "lumen/runtime/sampler.h"
#include "lumen/server/api_fields.h"
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

std::string content_text(const nlohmann::ordered_json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (content.is_array()) {  // [{"type": "text", "text": ...}, ...]
    std::string out;
    for (const nlohmann::ordered_json& part : content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
        bad("only text content parts are supported", "invalid_type");
      out += part["text"].get<std::string>();
    }
    return out;
  }
  bad("'content' must be a string or an array of text parts", "invalid_type");
}

// OpenAI's {"TOKEN_ID": bias, ...} or llama-server's [[TOKEN_ID or text, bias or false], ...]
// (a text biases each of its tokens; false bans the token), checked by the
// sampler's logit_bias_error.
std::vector<LogitBias> logit_bias_field(const json& body, const Tokenizer& tokenizer) {
  const json* f = field(body, "logit_bias");
  std::vector<LogitBias> out;
  if (f == nullptr) return out;
  const auto bias_of = [](const json& v) {
    if (v.is_boolean() && !v.get<bool>()) return -std::numeric_limits<float>::infinity();
    if (!v.is_number()) bad("'logit_bias' biases must be numbers (or false to ban a token)", "invalid_type");
    return static_cast<float>(v.get<double>());
  };
  // Ids beyond int32 stay out of range for the check below.
  const auto id_of = [](int64_t id) { return static_cast<int32_t>(std::clamp<int64_t>(id, -1, kInt32Max)); };
  const char* pairs = "'logit_bias' as a list holds [token id or text, bias] pairs";
  if (f->is_object()) {
    for (const auto& [key, value] : f->items()) {
      if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos)
        bad("'logit_bias' keys must be token ids, not '" + key + "'", "invalid_type");
      out.push_back({id_of(std::stoll(key)), bias_of(value)});
    }
  } else if (f->is_array()) {
    for (const json& pair : *f) {
      if (!pair.is_array() || pair.size() != 2) bad(pairs, "invalid_type");
      const float bias = bias_of(pair[1]);
      if (pair[0].is_number_unsigned()) {
        out.push_back({id_of(static_cast<int64_t>(std::min<uint64_t>(pair[0].get<uint64_t>(), kInt32Max))), bias});
      } else if (pair[0].is_number_integer()) {
        out.push_back({id_of(pair[0].get<int64_t>()), bias});
      } else if (pair[0].is_string()) {
        for (int32_t id : tokenizer.encode(pair[0].get<std::string>(), /*parse_special=*/false))
          out.push_back({id, bias});
      } else {
        bad(pairs, "invalid_type");
      }
    }
  } else {
    bad("'logit_bias' must be an object of token id -> bias or a list of [token, bias] pairs", "invalid_type");
  }
  if (const std::string error = logit_bias_error(out, tokenizer.n_vocab()); !error.empty())
    bad("'logit_bias': " + error);
  return out;
}

}  // namespace

std::string error_body(const ApiError& e) {
  json j = {{"error", {{"message", e.what()}, {"type", e.type}, {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return dump(j);
}

std::string chat_prompt_text(const chat::ChatTemplate& chat_template, const std::vector<chat::Message>& messages,
                             const nlohmann::ordered_json& raw_messages, const nlohmann::ordered_json& tools) {
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (raw_messages.is_array()) extra["messages"] = raw_messages;
  if (tools.is_array() && !tools.empty()) extra["tools"] = tools;
  try {
    return chat::render_chat(chat_template, messages, /*add_generation_prompt=*/true, extra);
  } catch (const chat::TemplateError& e) {
    bad(std::string("the chat template failed: ") + e.what(), "chat_template_error");
  }
}

std::string messages_prompt_text(const nlohmann::ordered_json& body, const chat::ChatTemplate& chat_template,
                                 const nlohmann::ordered_json& tools) {
  const auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) bad("'messages' is required", "missing_field");
  if (!messages->is_array() || messages->empty()) bad("'messages' must be a non-empty array", "invalid_type");
  std::vector<chat::Message> list;
  nlohmann::ordered_json for_template = nlohmann::ordered_json::array();
  for (const nlohmann::ordered_json& m : *messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad("every message needs a string 'role'", "invalid_type");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
      bad("unknown message role '" + role + "'");
    const std::string at = "messages[" + std::to_string(for_template.size()) + "]";
    nlohmann::ordered_json message = m;
    message["role"] = role == "developer" ? "system" : role;
    const std::string content = content_text(m.contains("content") ? m["content"] : nlohmann::ordered_json());
    if (m.contains("content") && m["content"].is_array()) message["content"] = content;
    if (role == "tool" && !(m.contains("tool_call_id") && m["tool_call_id"].is_string()))
      bad("'" + at + ".tool_call_id' must be a string", "invalid_type");
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null())
      message["tool_calls"] = template_tool_calls(m["tool_calls"], at + ".tool_calls");
    list.push_back({message["role"].get<std::string>(), content});
    for_template.push_back(std::move(message));
  }
  return chat_prompt_text(chat_template, list, for_template, tools);
}

json parse_json_body(std::string_view text) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::parse_error& e) {
    bad(std::string("the body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!body.is_object()) bad("the body must be a JSON object", "invalid_type");
  return body;
}

ApiRequest parse_request(Endpoint endpoint, std::string_view text, const Tokenizer& tokenizer,
                         const chat::ChatTemplate& chat_template, int64_t n_ctx, int max_choices) {
  const json body = parse_json_body(text);
  check_request_fields(endpoint, body);
  ApiRequest r;
  r.endpoint = endpoint;
  GenerationParams& g = r.generation;
  g.n = static_cast<int>(integer(body, "n", 1, 1, max_choices));

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
    // Parsed again keeping key order: templates print tools and tool-call arguments as given.
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(text);
    r.tools = parse_tool_fields(ordered, tool_syntax_of(chat_template.source()));
    if (r.tools.parses_output()) g.shown_control = marker_tokens(r.tools.syntax, tokenizer);
    r.prompt_text = messages_prompt_text(ordered, chat_template, r.tools.tools);
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
  g.sampling.logit_bias = logit_bias_field(body, tokenizer);
  g.ignore_eos = boolean(body, "ignore_eos", false);
  g.draft.n_max = integer(body, "speculative.n_max", g.draft.n_max, 0, runtime::kMaxDraftTokens);
  g.draft.n_min = integer(body, "speculative.n_min", g.draft.n_min, 0, runtime::kMaxDraftTokens);
  parse_constraints(body, g);
  if (auto schema = json_schema_constraint(text, body)) {
    if (g.grammar) bad("a JSON Schema and 'grammar' or response_format json_object cannot both constrain the output");
    g.grammar = std::move(schema);
  }
  constrain_to_call(r.tools, g);
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
    : request_(request),
      tokenizer_(tokenizer),
      model_(std::move(model)),
      id_(std::move(id)),
      created_(created),
      choices_(static_cast<size_t>(request.generation.n)) {
  if (request_.stream && request_.tools.parses_output())
    for (Choice& c : choices_) c.tool_parser.emplace(request_.tools);
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

json logprob_value(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string sse(const std::string& data) { return "data: " + data + "\n\n"; }

json tool_call_json(const ToolCall& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace

// One choice object. Completions: logprobs as {tokens, token_logprobs,
// top_logprobs, text_offset}; chat: {content: [{token, logprob, bytes, top_logprobs}]}.
json ResponseWriter::choice_object(size_t index, const std::string& text, const std::vector<TokenLogprob>& lps,
                                   bool with_prompt, const char* finish_reason, const std::vector<ToolCall>& calls) const {
  const bool chat = request_.endpoint == Endpoint::Chat;
  const Choice& c = choices_[index];
  json choice = {{"index", index}};
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
      size_t offset = request_.prompt_text.size() + c.text.size() - (with_prompt ? c.text.size() : 0);
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
    if (!c.sent_role) delta["role"] = "assistant";
    if (!text.empty() || (!finish_reason && calls.empty())) delta["content"] = text;
    if (!calls.empty()) {
      json deltas = json::array();
      for (size_t i = 0; i < calls.size(); ++i) {
        json d = tool_call_json(calls[i]);
        d["index"] = c.calls_sent + i;
        deltas.push_back(std::move(d));
      }
      delta["tool_calls"] = std::move(deltas);
    }
    choice["delta"] = delta;
  } else if (chat) {
    // With calls, content is the text outside them, null when there is none (as OpenAI's).
    choice["message"] = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? json(text) : json(nullptr)}};
    if (!calls.empty()) {
      json list = json::array();
      for (const ToolCall& call : calls) list.push_back(tool_call_json(call));
      choice["message"]["tool_calls"] = std::move(list);
    }
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
  return choice;
}

std::string ResponseWriter::envelope(json choices, bool usage) const {
  const bool chat = request_.endpoint == Endpoint::Chat;
  json out = {{"id", id_},
              {"object", chat ? (request_.stream ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"choices", std::move(choices)}};
  if (usage) {
    const int64_t prompt = static_cast<int64_t>(request_.generation.prompt.size());
    int64_t completion = 0;
    for (const Choice& c : choices_) completion += c.completion_tokens;
    out["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  }
  return dump(out);
}

std::string ResponseWriter::chunk(size_t index, const std::string& text, const std::vector<TokenLogprob>& lps,
                                  bool with_prompt, const char* finish_reason, const std::vector<ToolCall>& calls) const {
  // Usage rides on the chunk that finishes the last choice.
  const bool usage = finish_reason && request_.include_usage && done();
  return envelope(json::array({choice_object(index, text, lps, with_prompt, finish_reason, calls)}), usage);
}

namespace {
// A sequence cancelled by shutdown ends as if it hit its length; a reply that
// ended with calls ends with "tool_calls".
const char* finish_reason_of(const std::string& r, bool called) {
  if (r != "stop") return "length";
  return called ? "tool_calls" : "stop";
}
}  // namespace

std::string ResponseWriter::stream_tool_text(size_t index, const std::string& text,
                                             const std::vector<TokenLogprob>& logprobs, bool final) {
  Choice& c = choices_[index];
  ToolCallParser::Output o = c.tool_parser->push(text);
  if (final) {
    ToolCallParser::Output rest = c.tool_parser->finish();
    o.text += rest.text;
    for (ToolCall& call : rest.calls) o.calls.push_back(std::move(call));
  }
  std::string out;
  if (!o.text.empty() || !logprobs.empty() || !c.sent_role) out += sse(chunk(index, o.text, logprobs, false, nullptr));
  c.sent_role = true;
  if (!o.calls.empty()) {
    out += sse(chunk(index, "", {}, false, nullptr, o.calls));
    c.calls_sent += o.calls.size();
  }
  // A token held back (it may be part of a call) still writes an SSE comment,
  // which clients skip: a client that went away is noticed at its token, as
  // in a stream without tools.
  if (out.empty() && !final) out = ":\n\n";
  return out;
}

std::string ResponseWriter::stream(const Event& event) {
  std::string out;
  auto record = [&](const std::string& data) { out += sse(data); };
  Choice& c = choices_[static_cast<size_t>(event.choice)];
  const auto index = static_cast<size_t>(event.choice);
  switch (event.kind) {
    case Event::Kind::Prompt:
      prompt_logprobs_ = event.prompt;
      if (request_.echo)
        for (size_t i = 0; i < choices_.size(); ++i) {
          record(chunk(i, request_.prompt_text, {}, true, nullptr));
          choices_[i].sent_role = true;
        }
      break;
    case Event::Kind::Token:
      if (request_.echo && !request_.generation.prompt_logprobs && c.text.empty() && c.completion_tokens == 0) {
        record(chunk(index, request_.prompt_text, {}, false, nullptr));
      }
      ++c.completion_tokens;
      {
        const std::vector<TokenLogprob> lps =
            request_.logprobs ? std::vector<TokenLogprob>{event.token} : std::vector<TokenLogprob>{};
        if (c.tool_parser)
          out += stream_tool_text(index, event.text, lps, false);
        else
          record(chunk(index, event.text, lps, false, nullptr));
      }
      c.sent_role = true;
      c.text += event.text;
      break;
    case Event::Kind::Done:
      if (c.tool_parser) {
        out += stream_tool_text(index, event.text, {}, true);
        c.text += event.text;
      } else if (!event.text.empty()) {
        record(chunk(index, event.text, {}, false, nullptr));
        c.text += event.text;
        c.sent_role = true;
      }
      ++done_;
      record(chunk(index, "", {}, false, finish_reason_of(event.finish_reason, c.calls_sent > 0)));
      if (done()) out += "data: [DONE]\n\n";
      break;
  }
  return out;
}

void ResponseWriter::add(const Event& event) {
  Choice& c = choices_[static_cast<size_t>(event.choice)];
  switch (event.kind) {
    case Event::Kind::Prompt: prompt_logprobs_ = event.prompt; break;
    case Event::Kind::Token:
      ++c.completion_tokens;
      c.text += event.text;
      c.logprobs.push_back(event.token);
      break;
    case Event::Kind::Done:
      c.text += event.text;
      c.finish_reason = event.finish_reason;
      ++done_;
      break;
  }
}

std::string ResponseWriter::body() const {
  const bool echo = request_.echo && request_.endpoint == Endpoint::Completions;
  // choice_object() computes offsets from the choice's text; a whole response starts at the prompt.
  ResponseWriter copy = *this;
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    copy.choices_[i].text.clear();
    const Choice& c = choices_[i];
    if (request_.tools.parses_output()) {
      ToolCallParser::Output reply = parse_tool_calls(c.text, request_.tools);
      choices.push_back(copy.choice_object(i, reply.text, c.logprobs, false,
                                           finish_reason_of(c.finish_reason, !reply.calls.empty()), reply.calls));
      continue;
    }
    const std::string text = echo ? request_.prompt_text + c.text : c.text;
    choices.push_back(copy.choice_object(i, text, c.logprobs, echo && request_.generation.prompt_logprobs,
                                         finish_reason_of(c.finish_reason, false)));
  }
  return envelope(std::move(choices), /*usage=*/true);
}

}  // namespace lumen::server
