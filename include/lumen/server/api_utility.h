// llama-server's utility routes, with its request and response shapes:
// POST /tokenize, POST /detokenize, POST /apply-template and GET /props.
// Each takes a body's text and returns the JSON response; a bad body is an
// ApiError (400) naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {

// {"content": TEXT, "add_special": false, "with_pieces": false} ->
// {"tokens": [ids]} or, with pieces, {"tokens": [{"id", "piece"}]} (a piece
// that is not valid UTF-8 is its list of bytes). Special-token texts are
// parsed; add_special adds the BOS a prompt gets (Tokenizer::encode_prompt).
std::string tokenize_response(std::string_view body, const Tokenizer& tokenizer);

// {"tokens": [ids]} -> {"content": TEXT} (special tokens as their text).
std::string detokenize_response(std::string_view body, const Tokenizer& tokenizer);

// {"messages": [...]} -> {"prompt": TEXT}: the prompt chat completions would
// run (messages_prompt_text).
std::string apply_template_response(std::string_view body, const chat::ChatTemplate& chat_template);

// What GET /props reports beside the context (n_ctx per sequence) and the
// slots (--parallel) the scheduler has.
struct ServerProps {
  std::string model_path;            // the GGUF
  std::string chat_template_source;  // the Jinja text in use ("" for the built-in ChatML)
};
std::string props_response(const ServerProps& props, int64_t n_ctx, int total_slots, const Tokenizer& tokenizer);

}  // namespace lumen::server
