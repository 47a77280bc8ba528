// Fuzz target: the tokenizer (special-token partition, qwen2 pre-tokenizer,
// BPE, detokenization) on arbitrary bytes, over a small hand-made vocabulary
// that has every byte token, a few merges and special tokens of each kind.
// ASCII input must survive encode -> decode unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "lumen/text/tokenizer.h"

namespace {

const lumen::Tokenizer& tokenizer() {
  static const lumen::Tokenizer tok = [] {
    lumen::Vocabulary v;
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(lumen::byte_to_token_char(uint8_t(b)));
      v.types.push_back(lumen::TokenType::Normal);
    }
    const std::string sp = lumen::byte_to_token_char(' ');
    for (const char* m : {"h e", "l l", "he ll", "hell o", "t h", "i n"}) v.merges.push_back(m);
    v.merges.push_back(sp + " t");
    v.tokens.insert(v.tokens.end(), {"he", "ll", "hell", "hello", "th", "in", sp + "t"});
    v.types.insert(v.types.end(), 7, lumen::TokenType::Normal);
    v.tokens.push_back("<|im_start|>");
    v.types.push_back(lumen::TokenType::Control);
    v.tokens.push_back("<|im_end|>");
    v.types.push_back(lumen::TokenType::Control);
    v.tokens.push_back("<tool_call>");
    v.types.push_back(lumen::TokenType::UserDefined);
    v.eos = int64_t(v.tokens.size() - 2);
    return lumen::Tokenizer::from_vocabulary(v);
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto& tok = tokenizer();
  for (bool special : {true, false}) {
    const auto ids = tok.encode(text, special);
    const std::string back = tok.decode(ids, /*special=*/true);
    bool ascii = true;
    for (unsigned char c : text) ascii = ascii && c < 0x80;
    if (ascii && back != text) std::abort();
  }
  return 0;
}
