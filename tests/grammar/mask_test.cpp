// Masks on the real Qwen2.5 vocabulary (tiny-qwen2-a.gguf): for several
// states of several grammars, the trie walk allows exactly the tokens whose
// bytes the matcher accepts one by one (allows_bytes; the byte-level
// semantics are checked against the brute-force reference in
// matcher_test.cpp); EOG only when the text is a complete match; control
// tokens never.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/grammar/grammar.h"

namespace lumen::grammar {
namespace {

class MaskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const gguf::File file = gguf::File::open(std::string(LUMEN_SHARED_DIR) + "/reference/tiny-qwen2-a.gguf");
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(file));
    trie_ = TokenTrie::build(*tokenizer_);
  }
  static void TearDownTestSuite() {
    trie_.reset();
    tokenizer_.reset();
  }

  // Checks the mask after `text` against per-token acceptance.
  static void check(const std::shared_ptr<const Grammar>& g, std::string_view text) {
    Matcher m(g, trie_);
    ASSERT_TRUE(m.accept_bytes(text)) << text;
    const int32_t n_vocab = tokenizer_->n_vocab();
    std::vector<float> logits(static_cast<size_t>(n_vocab) + 7, 1.0f);  // the model's rows may be padded
    const size_t allowed = m.mask(logits);
    size_t counted = 0;
    for (size_t i = 0; i < logits.size(); ++i) counted += logits[i] == 1.0f;
    EXPECT_EQ(allowed, counted);
    EXPECT_GT(allowed, 0u) << text;  // every state here can continue
    for (size_t i = static_cast<size_t>(n_vocab); i < logits.size(); ++i) EXPECT_EQ(logits[i], -INFINITY);
    for (int32_t id = 0; id < n_vocab; ++id) {
      const bool masked_in = logits[static_cast<size_t>(id)] == 1.0f;
      bool expected;
      if (tokenizer_->is_eog(id)) {
        expected = m.accepting();
      } else if (tokenizer_->token_type(id) == TokenType::Control || tokenizer_->token_text(id).empty()) {
        expected = false;
      } else {
        expected = m.allows_bytes(tokenizer_->token_text(id));
      }
      ASSERT_EQ(masked_in, expected) << "after '" << text << "' token " << id << " '" << tokenizer_->token_text(id) << "'";
    }
  }

  static std::unique_ptr<Tokenizer> tokenizer_;
  static std::shared_ptr<const TokenTrie> trie_;
};
std::unique_ptr<Tokenizer> MaskTest::tokenizer_;
std::shared_ptr<const TokenTrie> MaskTest::trie_;

TEST_F(MaskTest, JsonObjectStates) {
  const auto g = json_object_grammar();
  check(g, "");
  check(g, "{\"na");        // inside a string: almost everything
  check(g, "{\"name\"");    // a key ends: ':' or space
  check(g, "{\"a\": 12");   // inside a number
  check(g, "{\"a\": [tr");  // inside a literal
  check(g, "{\"a\": 1}");   // complete: EOG allowed, bounded whitespace
}

TEST_F(MaskTest, UnicodeClassesAndSplitCharacters) {
  const auto g = Grammar::parse("root ::= [à-ÿ]+ \"!\" | \"€\"{2}");
  check(g, "");
  check(g, "\xe2\x82");  // inside €: only its last byte continues it
  check(g, "\xc3\xa9\xc3\xa0");
}

TEST_F(MaskTest, MasksAreCachedByState) {
  // In a string's contents the state repeats: one trie walk serves every step.
  Matcher m(json_object_grammar(), trie_);
  std::vector<float> logits(static_cast<size_t>(tokenizer_->n_vocab()));
  ASSERT_TRUE(m.accept_bytes("{\"k\": \"v"));
  m.mask(logits);
  const size_t walks = m.masks_computed();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(m.accept_bytes("abc"));
    m.mask(logits);
  }
  EXPECT_EQ(m.masks_computed(), walks);
}

}  // namespace
}  // namespace lumen::grammar
