// Tool calls: the request fields (every error names its field), the syntax
// picked from real templates, the reply parsed per template family (well
// formed and malformed), streaming = whole for every split of the text, the
// forced-call grammar, and through the HTTP server on the random-weight tiny
// model: `required` and a named function give well-formed, schema-valid calls.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "lumen/gguf/gguf.h"
#include "lumen/grammar/grammar.h"
#include "../runtime/runtime_support.h"
#include "lumen/runtime/session.h"
#include "lumen/server/api.h"
#include "lumen/server/http_server.h"
#include "lumen/server/scheduler.h"
#include "lumen/server/tools.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"
#include "support/json_schema_check.h"
#include "support/test_files.h"

namespace lumen::server {
namespace {

using ojson = nlohmann::ordered_json;

const ojson kWeather = {{"type", "function"},
                        {"function",
                         {{"name", "get_weather"},
                          {"description", "Weather of a city"},
                          {"parameters",
                           {{"type", "object"},
                            {"properties", {{"city", {{"type", "string"}}}, {"unit", {{"enum", {"c", "f"}}}}}},
                            {"required", {"city"}}}}}}};
const ojson kAdd = {{"type", "function"},
                    {"function",
                     {{"name", "add"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}},
                        {"required", {"a", "b"}}}}}}};

ToolRequest tools_for(ToolSyntax syntax, ojson extra = ojson::object()) {
  extra["tools"] = {kWeather, kAdd};
  return parse_tool_fields(extra, syntax);
}

std::string error_of(const ojson& body) {
  try {
    parse_tool_fields(body, ToolSyntax::Hermes);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.what();
  }
  return "(accepted)";
}

TEST(ToolFields, DefaultsAndChoices) {
  ToolRequest none = parse_tool_fields(ojson::object(), ToolSyntax::Hermes);
  EXPECT_FALSE(none.parses_output());
  EXPECT_FALSE(none.forces_call());

  ToolRequest r = tools_for(ToolSyntax::Hermes);
  EXPECT_EQ(r.choice, ToolChoice::Auto);
  EXPECT_TRUE(r.parses_output());
  EXPECT_FALSE(r.forces_call());
  EXPECT_TRUE(r.parallel);
  ASSERT_EQ(r.functions.size(), 2u);
  EXPECT_EQ(r.functions[1].name, "add");
  EXPECT_EQ(r.tools.size(), 2u);

  EXPECT_EQ(tools_for(ToolSyntax::Hermes, {{"tool_choice", "none"}}).choice, ToolChoice::None);
  EXPECT_FALSE(tools_for(ToolSyntax::Hermes, {{"tool_choice", "none"}}).parses_output());
  EXPECT_TRUE(tools_for(ToolSyntax::Hermes, {{"tool_choice", "required"}}).forces_call());
  ToolRequest named =
      tools_for(ToolSyntax::Hermes, {{"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}},
                                     {"parallel_tool_calls", false}});
  EXPECT_EQ(named.choice, ToolChoice::Named);
  EXPECT_EQ(named.named, "add");
  EXPECT_FALSE(named.parallel);
  // A tool without parameters takes an empty object.
  ToolRequest bare = parse_tool_fields({{"tools", {{{"type", "function"}, {"function", {{"name", "now"}}}}}}},
                                       ToolSyntax::Json);
  EXPECT_EQ(bare.functions[0].parameters, (ojson{{"type", "object"}}));
}

TEST(ToolFields, EveryErrorNamesItsField) {
  auto with_tool = [](ojson function) {
    return ojson{{"tools", {kWeather, {{"type", "function"}, {"function", std::move(function)}}}}};
  };
  const std::vector<std::pair<ojson, std::string>> cases = {
      {{{"tools", "x"}}, "'tools'"},
      {{{"tools", {1}}}, "'tools[0]'"},
      {{{"tools", {{{"type", "code"}, {"function", kAdd["function"]}}}}}, "'tools[0].type'"},
      {{{"tools", {{{"type", "function"}}}}}, "'tools[0].function'"},
      {with_tool({{"description", "no name"}}), "'tools[1].function.name'"},
      {with_tool({{"name", "has space"}}), "'tools[1].function.name'"},
      {with_tool({{"name", std::string(65, 'a')}}), "'tools[1].function.name'"},
      {with_tool({{"name", "get_weather"}}), "declared twice"},
      {with_tool({{"name", "f"}, {"description", 3}}), "'tools[1].function.description'"},
      {with_tool({{"name", "f"}, {"strict", "yes"}}), "'tools[1].function.strict'"},
      {with_tool({{"name", "f"}, {"parameters", "none"}}), "'tools[1].function.parameters'"},
      {with_tool({{"name", "f"}, {"parameters", {{"type", "string"}}}}), "'tools[1].function.parameters'"},
      // Parameters the JSON Schema converter refuses: the 400 carries its reason.
      {with_tool({{"name", "f"}, {"parameters", {{"type", "object"}, {"patternProperties", {{"^a", ojson::object()}}}}}}),
       "'tools[1].function.parameters': unsupported keyword 'patternProperties'"},
      {with_tool({{"name", "f"}, {"parameters", {{"properties", {{"x", {{"$ref", "#/$defs/none"}}}}}}}}),
       "'tools[1].function.parameters'"},
      {{{"tools", {kWeather}}, {"tool_choice", "always"}}, "'tool_choice'"},
      {{{"tools", {kWeather}}, {"tool_choice", 1}}, "'tool_choice'"},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}}}}, "'tool_choice'"},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "'tool_choice.function.name'"},
      {{{"tool_choice", "required"}}, "'tool_choice'"},
      {{{"tools", {kWeather}}, {"parallel_tool_calls", "yes"}}, "'parallel_tool_calls'"},
  };
  for (const auto& [body, field] : cases) {
    const std::string message = error_of(body);
    EXPECT_NE(message.find(field), std::string::npos) << body.dump() << " -> " << message;
  }
  ojson many = {{"tools", ojson::array()}};
  for (int i = 0; i < 129; ++i) {
    std::string name = "f";
    name += std::to_string(i);
    many["tools"].push_back({{"type", "function"}, {"function", {{"name", name}}}});
  }
  EXPECT_NE(error_of(many).find("at most 128"), std::string::npos);
}

TEST(ToolFields, HistoryCallsGiveTheTemplateObjectArguments) {
  const ojson calls = {{{"id", "call_1"},
                        {"type", "function"},
                        {"function", {{"name", "add"}, {"arguments", "{\"b\": 2, \"a\": 1}"}}}}};
  const ojson out = template_tool_calls(calls, "messages[1].tool_calls");
  EXPECT_EQ(out[0]["function"]["arguments"].dump(), R"({"b":2,"a":1})");  // parsed, key order kept
  EXPECT_EQ(out[0]["id"], "call_1");
  auto error = [](const ojson& c) -> std::string {
    try {
      template_tool_calls(c, "messages[1].tool_calls");
    } catch (const ApiError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(error(ojson("x")).find("'messages[1].tool_calls'"), std::string::npos);
  EXPECT_NE(error(ojson{{{"function", {{"arguments", "{}"}}}}}).find("'messages[1].tool_calls[0].function.name'"),
            std::string::npos);
  EXPECT_NE(error(ojson{{{"function", {{"name", "add"}, {"arguments", "{oops"}}}}})
                .find("'messages[1].tool_calls[0].function.arguments'"),
            std::string::npos);
}

// The syntax comes from the template's text: the families of docs/server.md.
TEST(ToolSyntaxOf, RealTemplates) {
  const std::string dir = LUMEN_SOURCE_DIR "/tests/data/chat-templates/templates/";
  const std::vector<std::pair<std::string, ToolSyntax>> cases = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolSyntax::Hermes},
      {"Qwen-Qwen3-0.6B", ToolSyntax::Hermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolSyntax::Hermes},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolSyntax::Llama3},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolSyntax::Llama3},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolSyntax::Llama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolSyntax::Mistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", ToolSyntax::Mistral},
      {"google-gemma-2-2b-it", ToolSyntax::Json},
      {"llama-cpp-test-Phi-3-mini", ToolSyntax::Json},
  };
  for (const auto& [name, syntax] : cases)
    EXPECT_EQ(tool_syntax_of(test_support::read_existing_file(dir + name + ".jinja")), syntax) << name;
}

struct Reply {
  std::string text;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

Reply whole(std::string_view text, const ToolRequest& r) {
  ToolCallParser::Output o = parse_tool_calls(text, r);
  Reply reply{o.text, {}};
  for (const ToolCall& c : o.calls) reply.calls.emplace_back(c.name, c.arguments);
  return reply;
}

// Cut into pieces of `size` bytes, as a stream delivers it.
Reply streamed(std::string_view text, const ToolRequest& r, size_t size) {
  ToolCallParser parser(r);
  Reply reply;
  auto take = [&](ToolCallParser::Output o) {
    reply.text += o.text;
    for (const ToolCall& c : o.calls) reply.calls.emplace_back(c.name, c.arguments);
  };
  for (size_t at = 0; at < text.size(); at += size) take(parser.push(text.substr(at, size)));
  take(parser.finish());
  return reply;
}

struct Case {
  std::string text;
  std::string content;                                     // the text outside the calls
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

void expect_cases(ToolSyntax syntax, const std::vector<Case>& cases) {
  const ToolRequest r = tools_for(syntax);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const Reply w = whole(c.text, r);
    EXPECT_EQ(w.text, c.content);
    EXPECT_EQ(w.calls, c.calls);
    for (size_t size : {1, 2, 3, 7}) {
      const Reply s = streamed(c.text, r, size);
      EXPECT_EQ(s.text, w.text) << "pieces of " << size;
      EXPECT_EQ(s.calls, w.calls) << "pieces of " << size;
    }
  }
}

using Calls = std::vector<std::pair<std::string, std::string>>;

TEST(ToolCallParser, Hermes) {
  expect_cases(
      ToolSyntax::Hermes,
      {
          {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Seoul\"}}\n</tool_call>", "",
           Calls{{"get_weather", R"({"city":"Seoul"})"}}},
          {"Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Seoul\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
           "Let me look.\n", Calls{{"get_weather", R"({"city":"Seoul"})"}, {"add", R"({"a":1,"b":2})"}}},
          // Arguments given as a JSON string are parsed.
          {"<tool_call>{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": 2}\"}</tool_call>", "",
           Calls{{"add", R"({"a":1,"b":2})"}}},
          // Malformed: plain text stays; an unknown function, bad JSON or arguments
          // that are no object stay text, marker and all; an unclosed call is text.
          {"No tools needed < here.", "No tools needed < here.", {}},
          {"<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call>", {}},
          {"<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1,</tool_call> ok",
           "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1,</tool_call> ok", {}},
          {"<tool_call>{\"name\": \"add\", \"arguments\": [1, 2]}</tool_call>",
           "<tool_call>{\"name\": \"add\", \"arguments\": [1, 2]}</tool_call>", {}},
          {"<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1", {}},
          {"text <tool_ca", "text <tool_ca", {}},
          // A good call after a bad one still counts.
          {"<tool_call>{}</tool_call><tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>", "<tool_call>{}</tool_call>",
           Calls{{"add", "{}"}}},
      });
}

TEST(ToolCallParser, Llama3) {
  expect_cases(ToolSyntax::Llama3,
               {
                   {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
                    Calls{{"get_weather", R"({"city":"Paris"})"}}},
                   {"  \n{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}\n", "", Calls{{"add", R"({"a":1,"b":2})"}}},
                   {"<|python_tag|>{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}", "",
                    Calls{{"add", R"({"a":1,"b":2})"}}},
                   // Llama 3.1's built-in form.
                   {"<|python_tag|>get_weather.call(city=\"New York\", unit=\"f\")", "",
                    Calls{{"get_weather", R"({"city":"New York","unit":"f"})"}}},
                   // Not calls: JSON that is no call, a call inside text, an unknown function.
                   {"{\"answer\": 42}", "{\"answer\": 42}", {}},
                   {"Sure: {\"name\": \"add\", \"parameters\": {}}", "Sure: {\"name\": \"add\", \"parameters\": {}}", {}},
                   {"<|python_tag|>rm.call(path=\"/\")", "<|python_tag|>rm.call(path=\"/\")", {}},
                   {"<|python_tag|>print(1)", "<|python_tag|>print(1)", {}},
                   {"{\"name\": \"add\", \"parameters\": {\"a\": ", "{\"name\": \"add\", \"parameters\": {\"a\": ", {}},
               });
}

TEST(ToolCallParser, Mistral) {
  expect_cases(ToolSyntax::Mistral,
               {
                   {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
                    "{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}}]",
                    "", Calls{{"get_weather", R"({"city":"Oslo"})"}, {"add", R"({"a":3,"b":4})"}}},
                   {" [TOOL_CALLS] [{\"name\": \"add\", \"arguments\": {\"a\": 3, \"b\": 4}, \"id\": \"abcdefghi\"}]", "",
                    Calls{{"add", R"({"a":3,"b":4})"}}},
                   // Mistral Small 3.2: NAME[ARGS]{...}
                   {"[TOOL_CALLS]add[ARGS]{\"a\": 5, \"b\": 6}", "", Calls{{"add", R"({"a":5,"b":6})"}}},
                   // Malformed: one bad element makes the whole list text.
                   {"[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"nope\"}]",
                    "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}, {\"name\": \"nope\"}]", {}},
                   {"[TOOL_CALLS] hello", "[TOOL_CALLS] hello", {}},
                   {"[TOOL_CALLS][{\"name\": \"add\"", "[TOOL_CALLS][{\"name\": \"add\"", {}},
                   {"Just text [TOOL", "Just text [TOOL", {}},
               });
}

TEST(ToolCallParser, PlainJsonFallback) {
  expect_cases(ToolSyntax::Json,
               {
                   {"{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}", "", Calls{{"add", R"({"a":1,"b":2})"}}},
                   {"[{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}, {\"name\": \"get_weather\", "
                    "\"arguments\": {\"city\": \"Rome\"}}]",
                    "", Calls{{"add", R"({"a":1,"b":2})"}, {"get_weather", R"({"city":"Rome"})"}}},
                   {"{\"name\": \"add\", \"arguments\": {}} and more", " and more", Calls{{"add", "{}"}}},
                   {"[1, 2, 3]", "[1, 2, 3]", {}},
                   {"[]", "[]", {}},
                   {"Hello {\"name\": \"add\"}", "Hello {\"name\": \"add\"}", {}},
                   {"   ", "   ", {}},
                   {"{\"name\": \"add\", \"arguments\": {\"a\": \"}\"", "{\"name\": \"add\", \"arguments\": {\"a\": \"}\"", {}},
               });
}

TEST(ToolCallParser, IdsAreUniqueAndShapedForTheFamily) {
  const ToolRequest hermes = tools_for(ToolSyntax::Hermes);
  const std::string two = "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>"
                          "<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>";
  ToolCallParser::Output a = parse_tool_calls(two, hermes), b = parse_tool_calls(two, hermes);
  ASSERT_EQ(a.calls.size(), 2u);
  for (const ToolCall& c : a.calls) {
    EXPECT_EQ(c.id.rfind("call_", 0), 0u) << c.id;
    EXPECT_EQ(c.id.size(), 29u);
  }
  EXPECT_NE(a.calls[0].id, a.calls[1].id);
  EXPECT_NE(a.calls[0].id, b.calls[0].id);
  // Mistral's templates refuse ids other than 9 alphanumerics.
  ToolCallParser::Output m = parse_tool_calls("[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {}}]",
                                              tools_for(ToolSyntax::Mistral));
  ASSERT_EQ(m.calls.size(), 1u);
  EXPECT_EQ(m.calls[0].id.size(), 9u);
}

// The grammar of `required` / a named function admits the family's call
// syntax with declared names and schema-valid arguments, nothing else; and
// what it admits the parser reads back as the same calls.
TEST(ForcedCall, GrammarAdmitsOnlyWellFormedCallsTheParserReads) {
  const gguf::File file = gguf::File::open(test_support::tiny_gguf());
  const Tokenizer tokenizer = Tokenizer::from_gguf(file);
  const std::shared_ptr<const grammar::TokenTrie> trie = grammar::TokenTrie::build(tokenizer);
  const std::string add = R"({"name": "add", "arguments": {"a": 1, "b": 2}})";
  const std::string weather = R"({"name": "get_weather", "arguments": {"city": "Oslo"}})";
  const std::string hermes_add = "<tool_call>\n" + add + "\n</tool_call>";
  const std::string hermes_weather = "<tool_call>\n" + weather + "\n</tool_call>";
  const ojson named_add = {{"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}};
  struct Case {
    ToolSyntax syntax;
    ojson fields;
    std::vector<std::string> admitted, refused;
  };
  const std::vector<Case> cases = {
      {ToolSyntax::Hermes,
       {{"tool_choice", "required"}},
       {hermes_add, hermes_weather + "\n" + hermes_add},
       {add, "Sure. " + hermes_add, "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"1\", \"b\": 2}}\n</tool_call>"}},
      {ToolSyntax::Hermes, {{"tool_choice", "required"}, {"parallel_tool_calls", false}}, {hermes_weather},
       {hermes_weather + "\n" + hermes_add}},
      {ToolSyntax::Hermes, named_add, {hermes_add, hermes_add + "\n" + hermes_add}, {hermes_weather}},
      {ToolSyntax::Llama3,
       {{"tool_choice", "required"}},
       {R"({"name": "add", "parameters": {"a": 1, "b": 2}})"},
       {add, R"({"name": "add", "parameters": {"a": 1, "b": 2}}{"name": "add", "parameters": {"a": 1, "b": 2}})"}},
      {ToolSyntax::Mistral,
       {{"tool_choice", "required"}},
       {"[TOOL_CALLS][" + add + "]", "[TOOL_CALLS][" + add + ", " + weather + "]"},
       {"[" + add + "]", "[TOOL_CALLS]" + add}},
      {ToolSyntax::Json, {{"tool_choice", "required"}}, {add, "[" + add + ", " + weather + "]"}, {"[]", "Hi " + add}},
      {ToolSyntax::Json, {{"tool_choice", "required"}, {"parallel_tool_calls", false}}, {weather}, {"[" + add + "]"}},
  };
  for (const Case& c : cases) {
    const ToolRequest r = tools_for(c.syntax, c.fields);
    SCOPED_TRACE(std::string(tool_syntax_name(c.syntax)) + " " + c.fields.dump());
    ASSERT_TRUE(r.forces_call());
    const std::shared_ptr<const grammar::Grammar> g = grammar::Grammar::parse(forced_call_gbnf(r));
    auto admits = [&](const std::string& text) {
      grammar::Matcher m(g, trie);
      return m.accept_bytes(text) && m.accepting();
    };
    for (const std::string& text : c.admitted) {
      EXPECT_TRUE(admits(text)) << text;
      const ToolCallParser::Output out = parse_tool_calls(text, r);
      EXPECT_EQ(out.text, "") << text;
      EXPECT_FALSE(out.calls.empty()) << text;
    }
    for (const std::string& text : c.refused) EXPECT_FALSE(admits(text)) << text;
  }
}

// A conversation with tools, a call and its result, sent as OpenAI clients
// send it (arguments as a JSON string, role "tool"), renders byte for byte as
// jinja2 renders it with the arguments as an object (tests/data/chat-templates).
TEST(ToolRendering, HistoryWithCallsRendersAsJinja2) {
  const std::string data = LUMEN_SOURCE_DIR "/tests/data/chat-templates/";
  ojson conversation = ojson::parse(test_support::read_existing_file(data + "conversations/06-tools-call-and-result.json"));
  for (ojson& m : conversation["messages"])
    if (m.contains("tool_calls"))
      for (ojson& call : m["tool_calls"]) call["function"]["arguments"] = call["function"]["arguments"].dump();
  const gguf::File file = gguf::File::open(test_support::tiny_gguf());
  const Tokenizer tokenizer = Tokenizer::from_gguf(file);
  const std::vector<std::tuple<std::string, std::string, std::string>> templates = {
      {"Qwen-Qwen2.5-7B-Instruct", "<|endoftext|>", "<|im_end|>"},
      {"meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>"},
      {"mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>"},
  };
  for (const auto& [name, bos, eos] : templates) {
    SCOPED_TRACE(name);
    chat::ChatTemplate tmpl(test_support::read_existing_file(data + "templates/" + name + ".jinja"));
    tmpl.set_special_tokens(bos, eos);
    const ApiRequest r = parse_request(Endpoint::Chat, conversation.dump(), tokenizer, tmpl, 4096);
    EXPECT_EQ(r.prompt_text,
              test_support::read_existing_file(data + "expected/" + name + ".06-tools-call-and-result.txt"));
    EXPECT_EQ(r.tools.syntax, tool_syntax_of(tmpl.source()));
    EXPECT_EQ(r.tools.choice, ToolChoice::Auto);
  }
}

// ------------------------------------------------ through the HTTP server
// The HTTP layer in this process over a running scheduler on the tiny model
// (random weights) with a chosen chat template: `required` and a named
// function must give a well-formed call whatever the weights say.
class ToolServer {
 public:
  explicit ToolServer(const std::optional<std::string>& template_file) {
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 1024;
    so.n_seq = 4;
    session_ = std::make_unique<runtime::Session>(model(), test_support::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    bool used_chatml = false;
    chat_template_ = std::make_unique<chat::ChatTemplate>(
        chat::load_chat_template(session_->gguf(), test_support::tiny_gguf(), template_file, &used_chatml));
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_);
    HttpOptions http_options;
    http_options.port = 0;
    http_ = std::make_unique<HttpServer>(http_options);
    http_->bind();
    http_->attach(*scheduler_, *tokenizer_, *chat_template_, "tiny", session_->n_ctx());
    serving_ = std::thread([this] { http_->serve(); });
    running_ = std::thread([this] { scheduler_->run(); });
  }
  ~ToolServer() {
    scheduler_->stop(std::chrono::milliseconds(0));
    running_.join();
    http_->stop();
    serving_.join();
  }

  httplib::Result post(const ojson& body) {
    httplib::Client c("127.0.0.1", http_->port());
    c.set_read_timeout(120, 0);
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  }

 private:
  static std::shared_ptr<const runtime::CompiledModel> model() {
    static const std::shared_ptr<const runtime::CompiledModel> m = runtime::testing::qwen2_model();
    return m;
  }
  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_template_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> http_;
  std::thread serving_, running_;
};

// Strings bounded so that a random model closes them within max_tokens.
const ojson kCity = {{"type", "function"},
                     {"function",
                      {{"name", "get_weather"},
                       {"parameters",
                        {{"type", "object"},
                         {"properties",
                          {{"city", {{"type", "string"}, {"maxLength", 12}}}, {"unit", {{"enum", {"celsius", "fahrenheit"}}}}}},
                         {"required", {"city", "unit"}}}}}}};
const ojson kSum = {{"type", "function"},
                    {"function",
                     {{"name", "add"},
                      {"parameters",
                       {{"type", "object"},
                        {"properties",
                         {{"a", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}},
                          {"b", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}}}},
                        {"required", {"a", "b"}}}}}}};

const ojson& schema_of(const std::string& name) {
  return (name == "add" ? kSum : kCity)["function"]["parameters"];
}

struct Answer {
  std::string finish_reason;
  ojson content;  // null or the text
  std::vector<ojson> calls;  // {id, type, function: {name, arguments}}
};

// The SSE records of a stream put together as a client SDK does.
Answer from_stream(const std::string& body) {
  Answer a;
  std::string text;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") break;
    const ojson chunk = ojson::parse(data);
    const ojson& choice = chunk["choices"][0];
    if (choice["finish_reason"].is_string()) a.finish_reason = choice["finish_reason"];
    const ojson& delta = choice["delta"];
    if (delta.contains("content")) text += delta["content"].get<std::string>();
    if (delta.contains("tool_calls"))
      for (const ojson& d : delta["tool_calls"]) {
        EXPECT_EQ(d["index"].get<size_t>(), a.calls.size());
        ojson call = d;
        call.erase("index");
        a.calls.push_back(call);
      }
  }
  a.content = text.empty() ? ojson(nullptr) : ojson(text);
  return a;
}

Answer from_whole(const std::string& body) {
  const ojson j = ojson::parse(body);
  const ojson& choice = j["choices"][0];
  Answer a{choice["finish_reason"], choice["message"]["content"], {}};
  if (choice["message"].contains("tool_calls"))
    for (const ojson& c : choice["message"]["tool_calls"]) a.calls.push_back(c);
  return a;
}

Answer ask(ToolServer& server, ojson body, bool stream) {
  body["stream"] = stream;
  auto r = server.post(body);
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return stream ? from_stream(r->body) : from_whole(r->body);
}

// Each call: declared (or the named one), a fresh id, arguments a JSON object valid under its schema.
void expect_valid_calls(const Answer& a, const std::string& only = "") {
  EXPECT_EQ(a.finish_reason, "tool_calls");
  ASSERT_FALSE(a.calls.empty());
  for (const ojson& c : a.calls) {
    EXPECT_EQ(c["type"], "function");
    EXPECT_EQ(c["id"].get<std::string>().rfind("call_", 0), 0u) << c.dump();
    const std::string name = c["function"]["name"];
    EXPECT_TRUE(name == "add" || name == "get_weather") << name;
    if (!only.empty()) {
      EXPECT_EQ(name, only);
    }
    const ojson args = ojson::parse(c["function"]["arguments"].get<std::string>());
    EXPECT_EQ(lumen::testing::json_schema_violation(args, schema_of(name)), "") << args.dump();
  }
}

ojson tool_request(uint64_t seed) {
  return {{"messages", {{{"role", "user"}, {"content", "What is the weather in Seoul, and 2+3?"}}}},
          {"tools", {kCity, kSum}},
          {"tool_choice", "required"},
          {"seed", seed},
          {"temperature", 1.0},
          {"max_tokens", 200}};
}

// The Qwen2.5 template (Hermes syntax) and the tiny model's own ChatML (plain JSON).
TEST(ToolCallsHttp, RequiredAndNamedGiveWellFormedCalls) {
  for (const std::optional<std::string>& tmpl :
       {std::optional<std::string>(LUMEN_SOURCE_DIR "/tests/data/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
        std::optional<std::string>()}) {
    SCOPED_TRACE(tmpl.value_or("the model's ChatML"));
    ToolServer server(tmpl);
    for (uint64_t seed : {1, 2})
      for (bool stream : {false, true}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + (stream ? ", streamed" : ""));
        ojson single = tool_request(seed);
        single["parallel_tool_calls"] = false;
        const Answer one = ask(server, single, stream);
        expect_valid_calls(one);
        EXPECT_EQ(one.calls.size(), 1u);
        EXPECT_TRUE(one.content.is_null()) << one.content.dump();

        ojson named = tool_request(seed);
        named["tool_choice"] = {{"type", "function"}, {"function", {{"name", "add"}}}};
        expect_valid_calls(ask(server, named, stream), "add");

        expect_valid_calls(ask(server, tool_request(seed), stream));  // parallel: one call or more
      }
    // The same seed, streamed or not: the same calls (ids aside).
    const Answer whole = ask(server, tool_request(7), false), streamed = ask(server, tool_request(7), true);
    ASSERT_EQ(whole.calls.size(), streamed.calls.size());
    for (size_t i = 0; i < whole.calls.size(); ++i)
      EXPECT_EQ(whole.calls[i]["function"], streamed.calls[i]["function"]);
    // "none": the tools are in the prompt, the reply is text.
    ojson none = tool_request(1);
    none["tool_choice"] = "none";
    none["max_tokens"] = 8;
    const Answer text = ask(server, none, false);
    EXPECT_TRUE(text.calls.empty());
    EXPECT_NE(text.finish_reason, "tool_calls");
  }
}

TEST(ToolCallsHttp, BadToolsAre400sNamingTheField) {
  ToolServer server(std::nullopt);
  auto expect_400 = [&](const ojson& body, const std::string& field) {
    auto r = server.post(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(field), std::string::npos) << r->body;
  };
  ojson bad_schema = tool_request(1);
  bad_schema["tools"][1]["function"]["parameters"] = {{"type", "object"}, {"patternProperties", {{"^a", {{"type", "string"}}}}}};
  expect_400(bad_schema, "tools[1].function.parameters");
  ojson bad_ref = tool_request(1);
  bad_ref["tools"][0]["function"]["parameters"] = {{"type", "object"}, {"properties", {{"x", {{"$ref", "#/$defs/none"}}}}}};
  expect_400(bad_ref, "tools[0].function.parameters");
  ojson unknown = tool_request(1);
  unknown["tool_choice"] = {{"type", "function"}, {"function", {{"name", "launch"}}}};
  expect_400(unknown, "tool_choice.function.name");
  ojson both = tool_request(1);
  both["response_format"] = {{"type", "json_object"}};
  expect_400(both, "tool_choice");
  ojson bad_history = tool_request(1);
  bad_history["messages"].push_back({{"role", "tool"}, {"content", "21 C"}});
  expect_400(bad_history, "messages[1].tool_call_id");
}

}  // namespace
}  // namespace lumen::server
