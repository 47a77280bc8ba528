// Tool calls: request fields, the template family's syntax, the reply parsed
// into calls (see tools.h).
#include "lumen/server/tools.h"

#include <algorithm>
#include <optional>
#include <random>

#include "lumen/grammar/grammar.h"
#include "lumen/grammar/json_schema.h"
#include "lumen/server/api.h"

namespace lumen::server {

using ojson = nlohmann::ordered_json;

namespace {

// OpenAI's limits: at most 128 tools, names of 1-64 characters from [a-zA-Z0-9_-]
// (so a name needs no escaping in JSON or GBNF).
constexpr size_t kMaxTools = 128;
constexpr size_t kMaxNameLength = 64;

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxNameLength && std::all_of(name.begin(), name.end(), is_name_char);
}

const ojson* member(const ojson& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// Each call gets a fresh random id, as OpenAI's do.
std::string random_alphanumerics(size_t n) {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof kChars - 2);
  std::string s(n, ' ');
  for (char& c : s) c = kChars[pick(rng)];
  return s;
}

std::string new_call_id(ToolSyntax syntax) {
  return syntax == ToolSyntax::Mistral ? random_alphanumerics(9) : "call_" + random_alphanumerics(24);
}

// Where the JSON object or array opening at s[from] ends (one past its
// closing bracket), strings and escapes respected; npos while incomplete.
size_t json_value_end(std::string_view s, size_t from) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_spaces(std::string_view s, size_t at) {
  while (at < s.size() && is_space(s[at])) ++at;
  return at;
}

std::optional<ojson> parse_json(std::string_view text) {
  ojson j = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// {"name": declared, "arguments" (or Llama's "parameters"): an object or a
// string holding one}; anything else is not a call.
std::optional<ToolCall> call_of(const ojson& j, const ToolRequest& request) {
  if (!j.is_object()) return std::nullopt;
  const ojson* name = member(j, "name");
  if (name == nullptr || !name->is_string() || !request.declares(name->get<std::string>())) return std::nullopt;
  const ojson* args = member(j, "arguments");
  if (args == nullptr) args = member(j, "parameters");
  ojson object = ojson::object();
  if (args != nullptr && args->is_string()) {
    std::optional<ojson> parsed = parse_json(args->get<std::string>());
    if (!parsed) return std::nullopt;
    object = std::move(*parsed);
  } else if (args != nullptr) {
    object = *args;
  }
  if (!object.is_object()) return std::nullopt;
  return ToolCall{new_call_id(request.syntax), name->get<std::string>(), object.dump()};
}

// A call object, or an array of them (every one a call).
std::optional<std::vector<ToolCall>> calls_of(const ojson& j, const ToolRequest& request) {
  std::vector<ToolCall> calls;
  if (j.is_array()) {
    if (j.empty()) return std::nullopt;
    for (const ojson& item : j) {
      std::optional<ToolCall> call = call_of(item, request);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
    return calls;
  }
  std::optional<ToolCall> call = call_of(j, request);
  if (!call) return std::nullopt;
  calls.push_back(std::move(*call));
  return calls;
}

// s[at..] is a function name so far, perhaps followed by the start of `next`
// (what follows a name): it may still become a call.
bool name_then_prefix(std::string_view s, size_t at, std::string_view next) {
  size_t i = at;
  while (i < s.size() && is_name_char(s[i])) ++i;
  const std::string_view rest = s.substr(i);
  return rest.size() < next.size() && next.substr(0, rest.size()) == rest;
}

// Llama 3.1's built-in tool form after <|python_tag|>: NAME.call(key=VALUE, ...)
// with JSON values; `end` is one past the ")" (npos while incomplete).
std::optional<std::vector<ToolCall>> python_call(std::string_view s, size_t at, const ToolRequest& request,
                                                 size_t& end) {
  end = std::string_view::npos;
  static constexpr std::string_view kCall = ".call(";
  const size_t open = s.find(kCall, at);
  if (open == std::string_view::npos) {
    if (!name_then_prefix(s, at, kCall)) end = at;
    return std::nullopt;
  }
  const std::string name(s.substr(at, open - at));
  ojson args = ojson::object();
  size_t i = open + 6;
  while (true) {
    i = skip_spaces(s, i);
    if (i >= s.size()) return std::nullopt;
    if (s[i] == ')') break;
    const size_t eq = s.find('=', i);
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string key(s.substr(i, eq - i));
    size_t v = skip_spaces(s, eq + 1);
    if (v >= s.size()) return std::nullopt;
    size_t v_end = v;
    if (s[v] == '"') {
      bool escaped = false;
      for (v_end = v + 1; v_end < s.size(); ++v_end) {
        if (escaped)
          escaped = false;
        else if (s[v_end] == '\\')
          escaped = true;
        else if (s[v_end] == '"')
          break;
      }
      if (v_end >= s.size()) return std::nullopt;
      ++v_end;
    } else if (s[v] == '{' || s[v] == '[') {
      v_end = json_value_end(s, v);
      if (v_end == std::string_view::npos) return std::nullopt;
    } else {
      while (v_end < s.size() && s[v_end] != ',' && s[v_end] != ')') ++v_end;
      if (v_end >= s.size()) return std::nullopt;
    }
    std::optional<ojson> value = parse_json(s.substr(v, v_end - v));
    if (!valid_name(key) || !value) {
      end = v_end;
      return std::nullopt;
    }
    args[key] = std::move(*value);
    i = skip_spaces(s, v_end);
    if (i < s.size() && s[i] == ',') ++i;
  }
  end = i + 1;
  if (!request.declares(name)) return std::nullopt;
  return std::vector<ToolCall>{ToolCall{new_call_id(request.syntax), name, args.dump()}};
}

struct Marker {
  std::string_view open, close;  // close empty: the region is one JSON value after `open`
};

Marker marker_of(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::Hermes: return {"<tool_call>", "</tool_call>"};
    case ToolSyntax::Llama3: return {"<|python_tag|>", ""};
    case ToolSyntax::Mistral: return {"[TOOL_CALLS]", ""};
    case ToolSyntax::Json: return {"", ""};
  }
  return {"", ""};
}

// The region that opens with the marker at s[0]: its calls (nullopt: it is
// text), and its end (npos while it has not closed).
std::optional<std::vector<ToolCall>> marked_region(std::string_view s, const ToolRequest& request, size_t& end) {
  const Marker m = marker_of(request.syntax);
  end = std::string_view::npos;
  if (!m.close.empty()) {  // <tool_call> JSON </tool_call>
    const size_t close = s.find(m.close, m.open.size());
    if (close == std::string_view::npos) return std::nullopt;
    end = close + m.close.size();
    std::optional<ojson> j = parse_json(s.substr(m.open.size(), close - m.open.size()));
    if (!j || !j->is_object()) return std::nullopt;
    return calls_of(*j, request);
  }
  const size_t at = skip_spaces(s, m.open.size());
  if (at >= s.size()) return std::nullopt;
  if (s[at] == '{' || s[at] == '[') {
    const size_t value_end = json_value_end(s, at);
    if (value_end == std::string_view::npos) return std::nullopt;
    end = value_end;
    std::optional<ojson> j = parse_json(s.substr(at, value_end - at));
    if (!j) return std::nullopt;
    return calls_of(*j, request);
  }
  if (request.syntax == ToolSyntax::Llama3) return python_call(s, at, request, end);
  if (request.syntax == ToolSyntax::Mistral) {  // Mistral Small 3.2: [TOOL_CALLS]NAME[ARGS]{...}
    static constexpr std::string_view kArgs = "[ARGS]";
    const size_t args = s.find(kArgs, at);
    if (args == std::string_view::npos) {
      if (!name_then_prefix(s, at, kArgs)) end = at;
      return std::nullopt;
    }
    const size_t value = skip_spaces(s, args + kArgs.size());
    if (value >= s.size()) return std::nullopt;
    if (s[value] != '{') {
      end = value;
      return std::nullopt;
    }
    const size_t value_end = json_value_end(s, value);
    if (value_end == std::string_view::npos) return std::nullopt;
    end = value_end;
    std::optional<ojson> arguments = parse_json(s.substr(value, value_end - value));
    if (!arguments) return std::nullopt;
    return calls_of(ojson{{"name", std::string(s.substr(at, args - at))}, {"arguments", *arguments}}, request);
  }
  end = at;
  return std::nullopt;
}

// The longest suffix of s that is a proper prefix of `marker` (it may still become one).
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace

ToolSyntax tool_syntax_of(std::string_view source) {
  const auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("<tool_call>")) return ToolSyntax::Hermes;
  if (has("[TOOL_CALLS]")) return ToolSyntax::Mistral;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\""))) return ToolSyntax::Llama3;
  return ToolSyntax::Json;
}

std::vector<int32_t> marker_tokens(ToolSyntax syntax, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  const Marker m = marker_of(syntax);
  for (std::string_view marker : {m.open, m.close}) {
    if (marker.empty()) continue;
    const std::optional<int32_t> id = tokenizer.find_token(marker);
    if (id && tokenizer.token_type(*id) == TokenType::Control) ids.push_back(*id);
  }
  return ids;
}

const char* tool_syntax_name(ToolSyntax syntax) {
  switch (syntax) {
    case ToolSyntax::Hermes: return "hermes";
    case ToolSyntax::Llama3: return "llama3";
    case ToolSyntax::Mistral: return "mistral";
    case ToolSyntax::Json: return "json";
  }
  return "json";
}

namespace {

// Tool i's arguments grammar: its rules carry this prefix, so the grammars of
// all tools join into one.
std::string arguments_prefix(size_t i) { return "tool" + std::to_string(i) + "-"; }
std::string arguments_rule(size_t i) { return arguments_prefix(i) + "root"; }

// A GBNF string literal of `text`.
std::string literal(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string forced_call_gbnf(const ToolRequest& request) {
  const std::string args_key = request.syntax == ToolSyntax::Llama3 ? "parameters" : "arguments";
  std::string rules, calls;
  for (size_t i = 0; i < request.functions.size(); ++i) {
    const ToolFunction& f = request.functions[i];
    if (request.choice == ToolChoice::Named && f.name != request.named) continue;
    rules += f.arguments_gbnf + "\n";
    if (!calls.empty()) calls += " | ";
    calls += literal("{\"name\": \"" + f.name + "\", \"" + args_key + "\": ") + " " + arguments_rule(i) + " " +
             literal("}");
  }
  const bool several = request.parallel && request.syntax != ToolSyntax::Llama3;
  std::string root;
  switch (request.syntax) {
    case ToolSyntax::Hermes:
      root = "hermes-call ::= " + literal("<tool_call>\n") + " call " + literal("\n</tool_call>") + "\n" +
             "root ::= hermes-call" + (several ? " (" + literal("\n") + " hermes-call)*" : "");
      break;
    case ToolSyntax::Mistral:
      root = "root ::= " + literal("[TOOL_CALLS][") + " call" + (several ? " (" + literal(", ") + " call)*" : "") + " " +
             literal("]");
      break;
    case ToolSyntax::Llama3: root = "root ::= call"; break;
    case ToolSyntax::Json:
      root = several ? "root ::= call | " + literal("[") + " call (" + literal(", ") + " call)* " + literal("]")
                     : "root ::= call";
      break;
  }
  return root + "\ncall ::= " + calls + "\n" + rules;
}

void constrain_to_call(const ToolRequest& request, GenerationParams& generation) {
  if (!request.forces_call()) return;
  if (generation.grammar)
    bad("'tool_choice' " + std::string(request.choice == ToolChoice::Named ? "naming a function" : "\"required\"") +
        " forces a call, which cannot be combined with 'grammar', 'response_format' or 'json_schema'");
  try {
    generation.grammar = grammar::Grammar::parse(forced_call_gbnf(request));
  } catch (const grammar::GrammarError& e) {
    bad(std::string("'tools': the grammar of their calls is refused: ") + e.what());
  }
}

bool ToolRequest::declares(std::string_view name) const {
  return std::any_of(functions.begin(), functions.end(), [&](const ToolFunction& f) { return f.name == name; });
}

ToolRequest parse_tool_fields(const ojson& body, ToolSyntax syntax) {
  ToolRequest r;
  r.syntax = syntax;
  if (const ojson* tools = member(body, "tools")) {
    if (!tools->is_array()) bad("'tools' must be an array", "invalid_type");
    if (tools->size() > kMaxTools) bad("'tools' holds at most " + std::to_string(kMaxTools) + " tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const ojson& tool = (*tools)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!tool.is_object()) bad("'" + at + "' must be an object", "invalid_type");
      const ojson* type = member(tool, "type");
      if (type == nullptr || *type != "function") bad("'" + at + ".type' must be \"function\"");
      const ojson* function = member(tool, "function");
      if (function == nullptr || !function->is_object()) bad("'" + at + ".function' must be an object", "invalid_type");
      const ojson* name = member(*function, "name");
      if (name == nullptr || !name->is_string() || !valid_name(name->get<std::string>()))
        bad("'" + at + ".function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
      if (r.declares(name->get<std::string>()))
        bad("'" + at + ".function.name': the function '" + name->get<std::string>() + "' is declared twice");
      const ojson* description = member(*function, "description");
      if (description != nullptr && !description->is_string())
        bad("'" + at + ".function.description' must be a string", "invalid_type");
      const ojson* strict = member(*function, "strict");
      if (strict != nullptr && !strict->is_boolean()) bad("'" + at + ".function.strict' must be a boolean", "invalid_type");
      ToolFunction f{name->get<std::string>(), ojson{{"type", "object"}}, ""};
      if (const ojson* parameters = member(*function, "parameters")) {
        const std::string where = "'" + at + ".function.parameters'";
        if (!parameters->is_object()) bad(where + " must be a JSON Schema object", "invalid_type");
        const ojson* ptype = member(*parameters, "type");
        if (ptype != nullptr && *ptype != "object") bad(where + " must describe an object (\"type\": \"object\")");
        f.parameters = *parameters;
      }
      try {
        f.arguments_gbnf = grammar::json_schema_to_gbnf(f.parameters, arguments_prefix(i));
      } catch (const grammar::SchemaError& e) {
        bad("'" + at + ".function.parameters': " + e.what(), "invalid_schema");
      }
      r.functions.push_back(std::move(f));
    }
    r.tools = *tools;
  }
  r.choice = r.functions.empty() ? ToolChoice::None : ToolChoice::Auto;
  if (const ojson* choice = member(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none")
        r.choice = ToolChoice::None;
      else if (c == "auto")
        r.choice = r.functions.empty() ? ToolChoice::None : ToolChoice::Auto;
      else if (c == "required")
        r.choice = ToolChoice::Required;
      else
        bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (choice->is_object()) {
      const ojson* type = member(*choice, "type");
      const ojson* function = member(*choice, "function");
      const ojson* name = function != nullptr && function->is_object() ? member(*function, "name") : nullptr;
      if (type == nullptr || *type != "function" || name == nullptr || !name->is_string())
        bad("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      r.named = name->get<std::string>();
      if (!r.declares(r.named)) bad("'tool_choice.function.name': no tool declares the function '" + r.named + "'");
      r.choice = ToolChoice::Named;
    } else {
      bad("'tool_choice' must be a string or an object", "invalid_type");
    }
    if (r.choice == ToolChoice::Required && r.functions.empty()) bad("'tool_choice' \"required\" needs 'tools'");
  }
  if (const ojson* parallel = member(body, "parallel_tool_calls")) {
    if (!parallel->is_boolean()) bad("'parallel_tool_calls' must be a boolean", "invalid_type");
    r.parallel = parallel->get<bool>();
  }
  return r;
}

ojson template_tool_calls(const ojson& calls, const std::string& where) {
  if (!calls.is_array()) bad("'" + where + "' must be an array", "invalid_type");
  ojson out = calls;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    ojson& call = out[i];
    if (!call.is_object()) bad("'" + at + "' must be an object", "invalid_type");
    ojson* function = call.contains("function") ? &call["function"] : nullptr;
    if (function == nullptr || !function->is_object()) bad("'" + at + ".function' must be an object", "invalid_type");
    if (!function->contains("name") || !(*function)["name"].is_string())
      bad("'" + at + ".function.name' must be a string", "invalid_type");
    ojson& args = (*function)["arguments"];
    if (args.is_string()) {
      std::optional<ojson> parsed = parse_json(args.get<std::string>());
      if (!parsed) bad("'" + at + ".function.arguments' must be a JSON text");
      args = std::move(*parsed);
    } else if (args.is_null()) {
      args = ojson::object();
    }
  }
  return out;
}

// ------------------------------------------------------------ the reply

ToolCallParser::ToolCallParser(const ToolRequest& request) : request_(request) {}

ToolCallParser::Output ToolCallParser::push(std::string_view text) {
  held_ += text;
  return scan(false);
}

ToolCallParser::Output ToolCallParser::finish() { return scan(true); }

// Gives out what is surely text, keeps what may still open or complete a
// call. `at_start_`: only whitespace since the start or the last call; that
// whitespace is dropped when a call follows (or the reply ends after calls).
ToolCallParser::Output ToolCallParser::scan(bool final) {
  Output out;
  const Marker marker = marker_of(request_.syntax);
  const bool json_opens = request_.syntax == ToolSyntax::Llama3 || request_.syntax == ToolSyntax::Json;
  auto give = [&](size_t n) {
    out.text += held_.substr(0, n);
    held_.erase(0, n);
  };
  while (!held_.empty()) {
    if (at_start_) {
      const size_t ws = skip_spaces(held_, 0);
      if (ws == held_.size()) {
        if (!final) break;
        if (called_) held_.clear();
        give(held_.size());
        break;
      }
      const std::string_view rest = std::string_view(held_).substr(ws);
      if (json_opens && (rest[0] == '{' || (rest[0] == '[' && request_.syntax == ToolSyntax::Json))) {
        const size_t end = json_value_end(rest, 0);
        if (end == std::string_view::npos && !final) break;
        if (end != std::string_view::npos) {
          if (std::optional<ojson> j = parse_json(rest.substr(0, end)))
            if (std::optional<std::vector<ToolCall>> calls = calls_of(*j, request_)) {
              for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
              held_.erase(0, ws + end);
              called_ = true;
              continue;
            }
        }
      } else if (!marker.open.empty()) {
        if (rest.size() < marker.open.size() && marker.open.substr(0, rest.size()) == rest && !final) break;
        if (rest.substr(0, marker.open.size()) == marker.open) held_.erase(0, ws);  // whitespace before a call goes
      }
      at_start_ = false;
    }
    const size_t open = marker.open.empty() ? std::string::npos : held_.find(marker.open);
    if (open == std::string::npos) {
      give(held_.size() - (final || marker.open.empty() ? 0 : partial_marker(held_, marker.open)));
      break;
    }
    give(open);
    size_t end = 0;
    std::optional<std::vector<ToolCall>> calls = marked_region(held_, request_, end);
    if (end == std::string_view::npos) {
      if (!final) break;
      give(held_.size());
      break;
    }
    if (!calls) {
      give(std::max(end, marker.open.size()));
      continue;
    }
    for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    held_.erase(0, end);
    called_ = true;
    at_start_ = true;
  }
  return out;
}

ToolCallParser::Output parse_tool_calls(std::string_view text, const ToolRequest& request) {
  ToolCallParser parser(request);
  ToolCallParser::Output out = parser.push(text);
  ToolCallParser::Output rest = parser.finish();
  out.text += rest.text;
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace lumen::server
