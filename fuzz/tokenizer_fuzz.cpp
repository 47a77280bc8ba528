// Fuzz target: the tokenizers (special-token partition, pre-tokenizer
// regexes on PCRE2, byte-level BPE, SentencePiece merges with byte fallback,
// detokenization) on arbitrary bytes, over small hand-made vocabularies: a
// byte-level BPE one read with several pre-tokenizers (one regex, several
// regexes in turn, empty-match cuts) and an SPM one. ASCII input must
// survive encode -> decode unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/text/tokenizer.h"

namespace {

lumen::Vocabulary byte_level(const char* pre) {
  lumen::Vocabulary v;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(lumen::byte_to_token_char(uint8_t(b)));
    v.types.push_back(lumen::TokenType::Normal);
  }
  const std::string sp = lumen::byte_to_token_char(' ');
  for (const char* m : {"h e", "l l", "he ll", "hell o", "t h", "i n", "3 3"}) v.merges.push_back(m);
  v.merges.push_back(sp + " t");
  v.tokens.insert(v.tokens.end(), {"he", "ll", "hell", "hello", "th", "in", "33", sp + "t"});
  v.types.insert(v.types.end(), 8, lumen::TokenType::Normal);
  v.tokens.push_back("<|im_start|>");
  v.types.push_back(lumen::TokenType::Control);
  v.tokens.push_back("<|im_end|>");
  v.types.push_back(lumen::TokenType::Control);
  v.tokens.push_back("<tool_call>");
  v.types.push_back(lumen::TokenType::UserDefined);
  v.eos = int64_t(v.tokens.size() - 2);
  return v;
}

lumen::Vocabulary spm() {
  lumen::Vocabulary v;
  v.model = "llama";
  v.pre = "";
  const auto add = [&](const std::string& text, float score, lumen::TokenType type) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, lumen::TokenType::Unknown);
  add("<s>", 0, lumen::TokenType::Control);
  add("</s>", 0, lumen::TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, lumen::TokenType::Byte);
  }
  const std::string sp = "\xe2\x96\x81";
  float score = -1;
  for (const std::string& t : {sp, std::string("h"), std::string("e"), std::string("l"), std::string("o"), std::string("he"),
                               std::string("ll"), std::string("hell"), std::string("hello"), sp + "hello", sp + sp}) {
    add(t, score, lumen::TokenType::Normal);
    score -= 0.5f;
  }
  return v;
}

const std::vector<lumen::Tokenizer>& tokenizers() {
  static const std::vector<lumen::Tokenizer> all = [] {
    std::vector<lumen::Tokenizer> t;
    for (const char* pre : {"qwen2", "llama-bpe", "falcon", "deepseek-llm", "gpt-2", "tekken", "superbpe"}) {
      t.push_back(lumen::Tokenizer::from_vocabulary(byte_level(pre)));
    }
    t.push_back(lumen::Tokenizer::from_vocabulary(spm()));
    return t;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  const auto& all = tokenizers();
  for (size_t k = 0; k < all.size(); ++k) {
    const lumen::Tokenizer& tok = all[k];
    const bool is_spm = k + 1 == all.size();
    for (bool special : {true, false}) {
      const auto ids = tok.encode(text, special);
      const std::string back = tok.decode(ids, /*special=*/true);
      // SPM adds one leading space to the text and after each special token.
      if (ascii && !is_spm && back != text) std::abort();
      if (ascii && is_spm && !special && back != " " + std::string(text) && !text.empty()) std::abort();
    }
  }
  return 0;
}
