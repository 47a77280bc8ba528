// Pre-tokenizers of byte-level BPE vocabularies: tokenizer.ggml.pre names a
// list of regexes that split text into words before the merges run. The
// regexes run on PCRE2 (JIT, Unicode properties); the table that maps each
// name to its regexes is in src/text/pre_tokenizer.cpp.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen {

// What one tokenizer.ggml.pre value means, as llama.cpp's vocabulary loader reads it.
struct PreTokenizerSpec {
  std::string_view name;
  std::span<const std::string_view> regexes;  // applied in order, each one to every piece of the last
  bool ignore_merges = false;  // a word that is a whole token is taken as is (llama.cpp ignore_merges)
  bool add_bos = false;        // llama.cpp's add_bos default when tokenizer.ggml.add_bos_token is absent
  bool bos_null = false;       // llama.cpp clears the default bos id (glm4)
};

// The spec for a tokenizer.ggml.pre value, or nullptr when unknown. An empty
// name is "default", as llama.cpp reads a BPE file without the key.
const PreTokenizerSpec* find_pre_tokenizer(std::string_view name);
// Every known name, comma-separated, for error messages.
std::string known_pre_tokenizers();

// A compiled regex list. split() cuts valid UTF-8 into words: for each regex
// in turn, every piece so far is cut into its matches and the text between
// them (llama.cpp's unicode_regex_split; a regex sees only its piece, so
// lookarounds and anchors stop at the piece's ends).
class RegexSplitter {
 public:
  // Throws std::runtime_error naming the regex when PCRE2 rejects it.
  explicit RegexSplitter(std::span<const std::string_view> regexes);
  RegexSplitter(RegexSplitter&&) noexcept;
  RegexSplitter& operator=(RegexSplitter&&) noexcept;
  ~RegexSplitter();

  // Word boundaries as (offset, length) into text; text must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> split(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen
