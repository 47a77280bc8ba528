// ChatML prompt formatting (llama.cpp src/llama-chat.cpp, chatml case) with
// the Qwen2.5 default system prompt, and incremental multi-turn text.
#include <string>
#include <utility>

#include "lumen/text/chat.h"

namespace lumen {

namespace {

void append_message(std::string& out, std::string_view role, std::string_view content) {
  out += "<|im_start|>";
  out += role;
  out += '\n';
  out += content;
  out += "<|im_end|>\n";
}

constexpr std::string_view kAssistantHeader = "<|im_start|>assistant\n";

}  // namespace

std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) append_message(out, m.role, m.content);
  if (add_generation_prompt) out += kAssistantHeader;
  return out;
}

std::string chat_prompt(std::string_view user, std::optional<std::string> system) {
  ChatConversation conversation(std::move(system));
  return conversation.add_user(user);
}

ChatConversation::ChatConversation(std::optional<std::string> system) {
  if (system) messages_.push_back({"system", std::move(*system)});
}

std::string ChatConversation::add_user(std::string_view content) {
  std::string out;
  if (awaiting_reply_) {
    // The previous turn got no recorded reply: close it as empty.
    add_assistant("", false);
  }
  const bool first_turn = messages_.empty() || (messages_.size() == 1 && messages_[0].role == "system");
  if (first_turn) {
    for (const ChatMessage& m : messages_) append_message(out, m.role, m.content);
  } else {
    // The context ends with the assistant's reply (and maybe its <|im_end|>).
    if (!im_end_in_context_) out += "<|im_end|>";
    out += '\n';
  }
  messages_.push_back({"user", std::string(content)});
  append_message(out, "user", content);
  out += kAssistantHeader;
  awaiting_reply_ = true;
  return out;
}

void ChatConversation::add_assistant(std::string_view content, bool im_end_in_context) {
  messages_.push_back({"assistant", std::string(content)});
  im_end_in_context_ = im_end_in_context;
  awaiting_reply_ = false;
}

}  // namespace lumen
