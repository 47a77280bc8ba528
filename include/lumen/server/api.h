// The OpenAI API as JSON: request bodies of /v1/completions and
// /v1/chat/completions parsed and checked into GenerationParams, and the
// scheduler's events turned into responses, whole or as Server-Sent Events.
// Log-probabilities are doubles printed so that they parse back exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/server/scheduler.h"
#include "lumen/server/tools.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {

// An OpenAI-style error: {"error": {"message", "type", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)) {}
  int status;
  std::string type, code;
};
std::string error_body(const ApiError& e);

enum class Endpoint { Completions, Chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::Completions;
  GenerationParams generation;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt precedes the text
  bool logprobs = false;       // report log-probabilities (k = generation.top_logprobs)
  std::string prompt_text;     // what the prompt says (echo, text offsets)
  ToolRequest tools;           // chat: tools, tool_choice, parallel_tool_calls
};

// A request body as a JSON object; throws ApiError (400) for malformed JSON
// (invalid UTF-8 included) and for anything but an object.
nlohmann::json parse_json_body(std::string_view body);

// Parses and checks a request body; throws ApiError (status 400). `n` may
// ask for up to `max_choices` choices (the server's parallel slots).
ApiRequest parse_request(Endpoint endpoint, std::string_view body, const Tokenizer& tokenizer,
                         const chat::ChatTemplate& chat_template, int64_t n_ctx, int max_choices = 1);

// The one place messages become prompt text: the model's chat template (as
// lumen-run --chat), given the request's whole message array (tool calls and
// all) beside the role/content pairs, and the request's tools (an array; null
// when none) as the template's `tools`.
std::string chat_prompt_text(const chat::ChatTemplate& chat_template, const std::vector<chat::Message>& messages,
                             const nlohmann::ordered_json& raw_messages,
                             const nlohmann::ordered_json& tools = nullptr);
// A body's `messages` checked (roles, text content, tool calls and results)
// and rendered by chat_prompt_text with `tools`; throws ApiError (400) naming
// what is wrong. Chat completions and /apply-template.
std::string messages_prompt_text(const nlohmann::ordered_json& body, const chat::ChatTemplate& chat_template,
                                 const nlohmann::ordered_json& tools = nullptr);

// Collects one request's events into its response (whole or streamed), per
// choice (Event::choice): each has its text, logprobs and finish reason;
// usage counts the prompt once and the tokens of every choice.
class ResponseWriter {
 public:
  ResponseWriter(const ApiRequest& request, const Tokenizer& tokenizer, std::string model, std::string id,
                 int64_t created);
  // Streaming: the SSE records ("data: {...}\n\n") this event produces;
  // after Done they end with "data: [DONE]\n\n".
  std::string stream(const Event& event);
  // Whole: add every event, then body().
  void add(const Event& event);
  std::string body() const;
  bool done() const { return done_ == choices_.size(); }

 private:
  struct Choice {
    std::string text;
    std::vector<TokenLogprob> logprobs;
    int64_t completion_tokens = 0;
    std::string finish_reason;  // the scheduler's ("stop", "length", "cancelled")
    bool sent_role = false;
    std::optional<ToolCallParser> tool_parser;  // streaming, when the reply is parsed for calls
    size_t calls_sent = 0;
  };
  // One choice object of a response or chunk.
  nlohmann::json choice_object(size_t index, const std::string& text, const std::vector<TokenLogprob>& logprobs,
                               bool with_prompt, const char* finish_reason, const std::vector<ToolCall>& calls = {}) const;
  // The response or chunk around `choices`; with usage when `usage`.
  std::string envelope(nlohmann::json choices, bool usage) const;
  std::string chunk(size_t index, const std::string& text, const std::vector<TokenLogprob>& logprobs,
                    bool with_prompt, const char* finish_reason, const std::vector<ToolCall>& calls = {}) const;
  // Streaming with tools: the records of choice `index`'s text so far and of the calls that closed.
  std::string stream_tool_text(size_t index, const std::string& text, const std::vector<TokenLogprob>& logprobs,
                               bool final);
  const ApiRequest& request_;
  const Tokenizer& tokenizer_;
  std::string model_, id_;
  int64_t created_;
  std::vector<Choice> choices_;
  std::vector<TokenLogprob> prompt_logprobs_;
  size_t done_ = 0;  // choices finished
};

}  // namespace lumen::server
