// Fuzz target: the GBNF parser and the matcher. The input up to the first
// NUL byte is a grammar; what follows is text fed to a matcher of it, byte
// by byte and as the masks of a small byte-level vocabulary allow. A grammar
// either parses or throws GrammarError; a parsed one never gets stuck: after
// any accepted prefix the text is complete or can continue, and the mask
// allows exactly the tokens whose bytes the matcher accepts.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/grammar/grammar.h"

namespace {

const std::shared_ptr<const lumen::grammar::TokenTrie>& vocabulary() {
  static const auto trie = [] {
    lumen::Vocabulary v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(lumen::byte_to_token_char(uint8_t(b)));
    for (const char* t : {"ab", "{\"", "\":", "true", "\xc3\xa9"}) {
      std::string raw;
      for (char c : std::string_view(t)) raw += lumen::byte_to_token_char(uint8_t(c));
      v.tokens.push_back(raw);
    }
    return lumen::grammar::TokenTrie::build(lumen::Tokenizer::from_vocabulary(v));
  }();
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\0');
  const std::string_view gbnf = input.substr(0, cut);
  const std::string_view text = cut == std::string_view::npos ? std::string_view() : input.substr(cut + 1);
  std::shared_ptr<const lumen::grammar::Grammar> grammar;
  try {
    grammar = lumen::grammar::Grammar::parse(gbnf);
  } catch (const lumen::grammar::GrammarError&) {
    return 0;
  }
  lumen::grammar::Matcher m(grammar, vocabulary());
  std::vector<float> logits(static_cast<size_t>(vocabulary()->n_vocab()));
  for (char c : text) {
    if (!m.accepting() && !m.can_continue()) std::abort();
    std::fill(logits.begin(), logits.end(), 0.0f);
    if (m.mask(logits) == 0 && m.can_continue()) std::abort();  // every byte is a token here
    const auto id = static_cast<int32_t>(static_cast<uint8_t>(c)) % vocabulary()->n_vocab();
    const std::string_view bytes = vocabulary()->bytes(id);  // empty: a token never allowed
    if (!bytes.empty() && (logits[static_cast<size_t>(id)] == 0.0f) != m.allows_bytes(bytes)) std::abort();
    m.accept_bytes(std::string_view(&c, 1));
  }
  return 0;
}
