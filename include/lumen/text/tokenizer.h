// Text <-> token ids as llama.cpp computes them, for byte-level BPE
// vocabularies (tokenizer.ggml.model = "gpt2", with the pre-tokenizer that
// tokenizer.ggml.pre names; see pre_tokenizer.h) and SentencePiece-style ones
// ("llama": merges by token score, byte fallback, the leading-space rule):
// special-token partition, pre-tokenization, GPT-2 byte mapping, BPE merges by
// (rank, leftmost), and detokenization per token type. See docs/tokenizer.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lumen {

namespace gguf {
class File;
}
namespace detail {
struct VocabularyView;
}

// UTF-8 as llama.cpp reads it.
namespace unicode {

// Decodes like llama.cpp's unicode_cpts_from_utf8: lenient about overlong forms
// and surrogates, and every byte that does not start a complete sequence
// becomes one U+FFFD (as do sequences decoding above U+10FFFF).
std::vector<uint32_t> decode_utf8(std::string_view text);
// Appends the UTF-8 encoding of cpt (cpt <= 0x10FFFF; larger values append U+FFFD).
void append_utf8(std::string& out, uint32_t cpt);
// Bytes in the sequence started by this lead byte (1 for ASCII and for bytes
// that cannot start a sequence).
size_t utf8_sequence_length(uint8_t lead);

}  // namespace unicode

// Token types as stored in tokenizer.ggml.token_type (llama.h llama_token_type).
enum class TokenType : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

// The tokenizer.* metadata of a model, decoded. from_gguf() fills it from a
// file; tests may build one by hand.
struct Vocabulary {
  std::string model = "gpt2";             // tokenizer.ggml.model
  std::string pre = "qwen2";              // tokenizer.ggml.pre
  std::vector<std::string> tokens;        // byte-level encoded text ("Ġworld")
  std::vector<TokenType> types;           // empty means all Normal
  std::vector<std::string> merges;        // "left right", rank = index (gpt2)
  std::vector<float> scores;              // tokenizer.ggml.scores (llama); empty means all 0
  std::optional<int64_t> bos, eos, eot, eom, unk, pad;  // *_token_id keys, unchecked
  std::optional<bool> add_bos, add_eos;
  std::optional<bool> add_space_prefix;   // tokenizer.ggml.add_space_prefix

  // Reads the tokenizer.* keys; throws std::runtime_error (one line) when a key
  // is missing or has the wrong type, or token_type does not match tokens.
  static Vocabulary from_gguf(const gguf::File& file);
};

// The words the pre-tokenizer named `pre` (a tokenizer.ggml.pre value) cuts
// text into, after invalid UTF-8 bytes become U+FFFD as in llama.cpp. Throws
// std::runtime_error for an unknown name.
std::vector<std::string> pre_tokenize(std::string_view pre, std::string_view text);

// GPT-2 byte-to-unicode mapping: the UTF-8 text of the codepoint that byte b
// is written as in vocabulary entries (0x20 -> "Ġ").
const std::string& byte_to_token_char(uint8_t b);

class Tokenizer {
 public:
  // Throws std::runtime_error with a one-line message on bad or missing
  // tokenizer metadata (wrong types, token_type count != tokens, a model other
  // than gpt2 or llama, an unknown pre-tokenizer: the message names it and
  // lists the known ones).
  static Tokenizer from_gguf(const gguf::File& file);
  static Tokenizer from_vocabulary(const Vocabulary& vocab);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of text. No BOS/EOS is added (add_bos() says whether the model
  // wants one). With parse_special, CONTROL and UNKNOWN token texts in the
  // input become their ids; USER_DEFINED texts always do.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // The bytes of one token: NORMAL tokens byte-decoded, USER_DEFINED raw,
  // CONTROL/UNKNOWN raw only when special is true, others empty.
  // Throws std::out_of_range for an id outside [0, n_vocab).
  std::string token_text(int32_t id, bool special = false) const;
  std::string decode(std::span<const int32_t> ids, bool special = false) const;

  // The text stored in the vocabulary (byte-level encoded); throws out_of_range.
  std::string_view token_raw_text(int32_t id) const;
  TokenType token_type(int32_t id) const;  // after llama.cpp's forcing of EOG tokens to CONTROL
  // Id of an exact vocabulary text, if any.
  std::optional<int32_t> find_token(std::string_view raw_text) const;

  // End-of-generation: <|im_end|>, <|endoftext|>, fim pad/rep/sep and the
  // other texts llama.cpp treats as EOG, plus eos/eot/eom.
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;

  int32_t n_vocab() const;
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  std::optional<int32_t> eot() const;
  bool add_bos() const;
  bool add_eos() const;
  // The BOS id to put before a prompt, exactly when llama.cpp adds one
  // (llama_tokenize with add_special): tokenizer.ggml.add_bos_token if present,
  // else the default of the vocabulary type and pre-tokenizer (SPM and Llama 3
  // yes, Qwen2 and GPT-2 no).
  std::optional<int32_t> bos_to_add() const;
  // The tokens of a text that starts the context (a prompt or a rendered chat):
  // BOS first when bos_to_add() says so, special tokens parsed; a text that
  // already starts with the BOS text does not get a second one (llama.cpp
  // strips it from chat templates' output).
  std::vector<int32_t> encode_prompt(std::string_view text) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  static Tokenizer build(const detail::VocabularyView& vocab);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen
