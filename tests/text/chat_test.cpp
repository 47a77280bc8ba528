// Chat template tests: exact ChatML strings for one and two turns, the Qwen
// default system prompt, --system replacement, and incremental turns adding
// up to the full transcript.
#include "lumen/text/chat.h"

#include <gtest/gtest.h>

namespace lumen {
namespace {

TEST(Chat, SingleTurnWithDefaultSystemPrompt) {
  EXPECT_EQ(chat_prompt("Hi"),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(Chat, SystemPromptReplacedOrOmitted) {
  EXPECT_EQ(chat_prompt("Hi", "Be brief."),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_prompt("Hi", std::nullopt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Chat, FormatsMessageLists) {
  const std::vector<ChatMessage> messages{{"system", "S"}, {"user", "U"}, {"assistant", "A"}};
  EXPECT_EQ(format_chatml(messages, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n");
  EXPECT_EQ(format_chatml(messages), format_chatml(messages, false) + "<|im_start|>assistant\n");
}

TEST(Chat, TwoTurnsAppendToTheContext) {
  ChatConversation chat("S");
  const std::string first = chat.add_user("Hello");
  EXPECT_EQ(first, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  // The model generated "Hi!" and then <|im_end|>, which was evaluated.
  chat.add_assistant("Hi!");
  const std::string second = chat.add_user("How are you?");
  EXPECT_EQ(second, "\n<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n");
  // Everything the model saw equals the full template of the conversation.
  EXPECT_EQ(first + "Hi!" + "<|im_end|>" + second, format_chatml(chat.messages()));
}

TEST(Chat, NextTurnClosesTheReplyWhenImEndWasNotEvaluated) {
  ChatConversation chat;
  const std::string first = chat.add_user("a");
  chat.add_assistant("b", /*im_end_in_context=*/false);
  const std::string second = chat.add_user("c");
  EXPECT_EQ(second, "<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(first + "b" + second, format_chatml(chat.messages()));
  ASSERT_EQ(chat.messages().size(), 4u);
  EXPECT_EQ(chat.messages()[0].content, kQwenDefaultSystemPrompt);
}

}  // namespace
}  // namespace lumen
