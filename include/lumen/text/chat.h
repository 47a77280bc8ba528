// Chat prompt formatting: ChatML as used by Qwen2.5-Instruct, with its
// default system prompt, for single prompts and multi-turn conversations.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lumen {

// The system prompt Qwen2.5-Instruct's chat template adds when none is given.
inline constexpr std::string_view kQwenDefaultSystemPrompt =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Each message as "<|im_start|>{role}\n{content}<|im_end|>\n", then
// "<|im_start|>assistant\n" when add_generation_prompt is set (llama.cpp's
// built-in chatml template).
std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt = true);

// A single-turn chat prompt: the system message (the Qwen default unless
// given; nullopt for none), the user message and the assistant header.
std::string chat_prompt(std::string_view user, std::optional<std::string> system =
                                                   std::string(kQwenDefaultSystemPrompt));

// A conversation whose context grows turn by turn. Each add_user() returns
// only the text to append to what the model has already seen, so the KV cache
// can be kept; the concatenation of all returned texts plus the assistant
// replies equals format_chatml() of the whole conversation.
class ChatConversation {
 public:
  explicit ChatConversation(std::optional<std::string> system = std::string(kQwenDefaultSystemPrompt));

  // Text for a new user message: the system message on the first turn, the
  // end of the previous assistant reply on later ones, then
  // "<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n".
  std::string add_user(std::string_view content);
  // Records the assistant's reply as generated (without <|im_end|>).
  // im_end_in_context says whether the model's context already holds the
  // <|im_end|> token that ended the reply (llama-cli feeds it; a runtime that
  // stops before evaluating it passes false and the next turn supplies it).
  void add_assistant(std::string_view content, bool im_end_in_context = true);

  const std::vector<ChatMessage>& messages() const { return messages_; }

 private:
  std::vector<ChatMessage> messages_;
  bool awaiting_reply_ = false;
  bool im_end_in_context_ = true;
};

}  // namespace lumen
