// Tool calls (OpenAI `tools`, `tool_choice`, `parallel_tool_calls`): the
// request fields checked, the call syntax of the chat template's family, the
// model's text parsed into calls (whole or as it streams) and, for
// `required` or a named function, the grammar that only allows a
// well-formed call to a declared function. docs/server.md, "Tool calls".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lumen/server/scheduler.h"

namespace lumen::server {

// How a template family writes a call (picked from the template's text by
// tool_syntax_of; the rule is in docs/server.md).
enum class ToolSyntax {
  Hermes,   // Qwen2.5/Qwen3/Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, several
  Llama3,   // Llama 3.1+: {"name": ..., "parameters": {...}} as the reply, or after <|python_tag|>
  Mistral,  // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
  Json,     // any other template: the reply is a call object {"name", "arguments"} or an array of them
};
ToolSyntax tool_syntax_of(std::string_view chat_template_source);
// The vocabulary's control tokens that spell the syntax's markers
// (GenerationParams::shown_control): the reply shows their text, so a real
// model's [TOOL_CALLS] or <|python_tag|> token reaches the parser.
std::vector<int32_t> marker_tokens(ToolSyntax syntax, const Tokenizer& tokenizer);
const char* tool_syntax_name(ToolSyntax syntax);

enum class ToolChoice { Auto, None, Required, Named };

struct ToolFunction {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema; {"type": "object"} when the tool has none
  std::string arguments_gbnf;         // `parameters` as GBNF (json_schema_to_gbnf, rules prefixed `tool<i>-`)
};

struct ToolRequest {
  std::vector<ToolFunction> functions;  // in the order of `tools`
  nlohmann::ordered_json tools;         // the request's `tools`, as the template's `tools` variable
  ToolChoice choice = ToolChoice::None;
  std::string named;                    // ToolChoice::Named: the function
  bool parallel = true;                 // parallel_tool_calls
  ToolSyntax syntax = ToolSyntax::Json;

  // The reply is parsed for calls (tools given and tool_choice not "none").
  bool parses_output() const { return !functions.empty() && choice != ToolChoice::None; }
  // The reply must be a call: sampling is constrained by forced_call_gbnf().
  bool forces_call() const { return choice == ToolChoice::Required || choice == ToolChoice::Named; }
  bool declares(std::string_view name) const;
};

// Reads `tools`, `tool_choice` and `parallel_tool_calls` of a chat body
// (every function's `parameters` must convert to a grammar). Throws ApiError
// (400) naming the field, e.g. `tools[1].function.name`.
ToolRequest parse_tool_fields(const nlohmann::ordered_json& body, ToolSyntax syntax);

// The GBNF (root rule `root`) that admits exactly the template family's call
// syntax naming a declared function (or the named one) with arguments valid
// under its schema: one call, or one or more when parallel (Llama 3: one).
std::string forced_call_gbnf(const ToolRequest& request);

// An assistant message's `tool_calls` as the template sees them: checked
// (`where` names the field in errors) and each `function.arguments` string
// parsed into its object, since templates print the arguments with tojson.
nlohmann::ordered_json template_tool_calls(const nlohmann::ordered_json& calls, const std::string& where);

// `required` or a named function: the generation's grammar becomes
// forced_call_gbnf's. Throws ApiError (400) when another constraint
// (`grammar`, `response_format`, `json_schema`) is already set.
void constrain_to_call(const ToolRequest& request, GenerationParams& generation);

struct ToolCall {
  std::string id;         // "call_" + 24 alphanumerics; Mistral: 9 alphanumerics (its templates demand them)
  std::string name;
  std::string arguments;  // a JSON object as compact text
};

// Splits a reply into text and calls as it arrives: push() the generated
// text, get back what may be shown now; calls come out whole when they
// close. Text that may still be the start of a call is held back; at
// finish(), a call that never closed or does not parse (unknown function,
// arguments not a JSON object) is text again. Streamed or whole, the same
// code decides.
class ToolCallParser {
 public:
  explicit ToolCallParser(const ToolRequest& request);

  struct Output {
    std::string text;
    std::vector<ToolCall> calls;
  };
  Output push(std::string_view text);
  Output finish();

 private:
  Output scan(bool final);
  const ToolRequest& request_;
  std::string held_;      // text not yet given out
  bool at_start_ = true;  // only whitespace since the start or the last call (Llama 3 and JSON calls open the reply)
  bool called_ = false;   // a call was given out
};

// The whole reply at once: push(text) + finish().
ToolCallParser::Output parse_tool_calls(std::string_view text, const ToolRequest& request);

}  // namespace lumen::server
