// Chat templates: the Jinja subset real `tokenizer.chat_template`s use,
// rendered exactly as Hugging Face's apply_chat_template renders them (jinja2
// with trim_blocks, lstrip_blocks, loop controls, raise_exception,
// strftime_now and HF's tojson). docs/chat-templates.md lists the subset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::gguf {
class File;
}

namespace lumen::chat {

// A template error (syntax or rendering) at a line and column of the
// template source, both 1-based. what() is "LINE:COL: MESSAGE".
class TemplateError : public std::runtime_error {
 public:
  TemplateError(int line, int column, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  int line_, column_;
  std::string message_;
};

struct Message {
  std::string role;
  std::string content;
};

// Limits that keep a hostile template from exhausting the machine; each
// breach is a TemplateError naming the limit.
struct RenderLimits {
  int64_t max_output_bytes = int64_t{64} << 20;
  int64_t max_steps = 20'000'000;  // loop iterations + calls + output pieces
  int max_call_depth = 200;        // nested macro calls
};

struct RenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // Extra variables of the context (tools, documents, enable_thinking, ...):
  // a JSON object whose members become template variables.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // strftime_now's clock, seconds since the epoch, local time (HF uses the
  // local clock); nullopt = now. Tests pin it.
  std::optional<int64_t> now;
  RenderLimits limits;
};

class ChatTemplate {
 public:
  // Parses a template. Throws TemplateError for a syntax error.
  explicit ChatTemplate(std::string_view source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The GGUF's tokenizer.chat_template (or `source` instead, when given) with
  // the texts of the GGUF's bos/eos tokens; nullopt when there is no template.
  // Throws TemplateError for a syntax error.
  static std::optional<ChatTemplate> from_gguf(const gguf::File& file,
                                               const std::optional<std::string>& source = std::nullopt);
  // llama.cpp's built-in ChatML, the fallback for GGUFs without a template.
  static ChatTemplate chatml();

  // Renders with `messages` (a JSON array of OpenAI-style messages: role,
  // content, tool_calls, ...) as the context variable of that name.
  std::string render(const nlohmann::ordered_json& messages, const RenderOptions& options) const;

  // The Jinja text (the server picks its tool-call syntax from it).
  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  void set_special_tokens(std::string bos, std::string eos) {
    bos_token_ = std::move(bos);
    eos_token_ = std::move(eos);
  }

  struct Program;

 private:
  std::unique_ptr<Program> program_;
  std::string source_;
  std::string bos_token_, eos_token_;
};

// The template a runtime uses: the file `template_file` when given, else the
// GGUF's tokenizer.chat_template, else ChatML (then *used_chatml is set, so the
// caller can warn). Throws std::runtime_error with one line: an unreadable
// file, or a syntax error as NAME:LINE:COL: message.
ChatTemplate load_chat_template(const gguf::File& file, const std::string& gguf_name,
                                const std::optional<std::string>& template_file, bool* used_chatml);

// The one entry point for runtimes (lumen-run, the server): messages as
// {role, content}, plus optional extra fields. `extra` may hold "messages"
// (a full JSON message array that replaces `messages`, for tool calls) and
// any other context variables (tools, ...). Uses the template's bos/eos.
std::string render_chat(const ChatTemplate& tmpl, const std::vector<Message>& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

}  // namespace lumen::chat
