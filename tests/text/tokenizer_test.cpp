// Tokenizer tests: llama.cpp's ids for the reference cases and prompts on the
// real Qwen2.5 vocabulary, the qwen2 pre-tokenizer on hand-made edge cases,
// BPE on a tiny vocabulary, detokenization, UTF-8 streaming and bad metadata.
#include "lumen/text/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/gguf/json.h"
#include "support/test_files.h"

namespace lumen {
namespace {

const std::string kReferenceDir = test_support::shared_reference_dir();

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<int32_t> ids_of(const json::Value& array) {
  std::vector<int32_t> ids;
  for (const json::Value& v : array.as_array()) ids.push_back(static_cast<int32_t>(v.as_int()));
  return ids;
}

// The Qwen2.5 vocabulary of the reference model, loaded once.
class QwenVocab : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const gguf::File file = gguf::File::open(kReferenceDir + "/tiny-qwen2-a.gguf");
    tokenizer_ = new Tokenizer(Tokenizer::from_gguf(file));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  static const Tokenizer& tok() { return *tokenizer_; }

 private:
  static inline Tokenizer* tokenizer_ = nullptr;
};

TEST_F(QwenVocab, LoadsSpecialIds) {
  EXPECT_EQ(tok().n_vocab(), 151936);
  EXPECT_EQ(tok().eos(), 151645);
  EXPECT_EQ(tok().bos(), 151643);
  EXPECT_FALSE(tok().add_bos());
  EXPECT_EQ(tok().find_token("<|im_start|>"), 151644);
  EXPECT_EQ(tok().token_type(151657), TokenType::UserDefined);
  EXPECT_EQ(tok().token_type(151644), TokenType::Control);
  EXPECT_EQ(tok().token_type(151700), TokenType::Unused);
}

TEST_F(QwenVocab, VocabularyPathGivesTheSameTokenizer) {
  const gguf::File file = gguf::File::open(kReferenceDir + "/tiny-qwen2-a.gguf");
  const Vocabulary vocab = Vocabulary::from_gguf(file);
  EXPECT_EQ(vocab.tokens.size(), 151936u);
  EXPECT_EQ(vocab.merges.size(), 151387u);
  EXPECT_EQ(vocab.eos, 151645);
  const Tokenizer copy = Tokenizer::from_vocabulary(vocab);
  for (const char* text : {"Hello world", "<|im_start|>user\n안녕<|im_end|>", "  x\r\n"}) {
    EXPECT_EQ(copy.encode(text), tok().encode(text)) << text;
  }
  EXPECT_EQ(copy.eog_ids(), tok().eog_ids());
}

TEST_F(QwenVocab, EndOfGenerationSet) {
  // <|endoftext|>, <|im_end|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>
  EXPECT_EQ(tok().eog_ids(), (std::vector<int32_t>{151643, 151645, 151662, 151663, 151664}));
  EXPECT_TRUE(tok().is_eog(151645));
  EXPECT_TRUE(tok().is_eog(151643));
  EXPECT_FALSE(tok().is_eog(151644));
  EXPECT_FALSE(tok().is_eog(-1));
  EXPECT_FALSE(tok().is_eog(1 << 30));
}

TEST_F(QwenVocab, MatchesLlamaCppOnAllReferenceCases) {
  const json::Value cases = json::parse(read_file(kReferenceDir + "/tokenizer-cases.json"));
  ASSERT_EQ(cases.as_array().size(), 35u);
  for (const json::Value& c : cases.as_array()) {
    const std::string& text = c.find("text")->as_string();
    EXPECT_EQ(tok().encode(text, true), ids_of(*c.find("ids"))) << "parse_special=true: " << text;
    EXPECT_EQ(tok().encode(text, false), ids_of(*c.find("ids_parse_special_false")))
        << "parse_special=false: " << text;
  }
}

TEST_F(QwenVocab, MatchesLlamaCppOnReferencePrompts) {
  const json::Value expected = json::parse(read_file(kReferenceDir + "/tiny-qwen2-a.expected.json"));
  const json::Array& prompts = expected.find("prompts")->as_array();
  ASSERT_EQ(prompts.size(), 8u);
  for (const json::Value& p : prompts) {
    const std::string& text = p.find("text")->as_string();
    const std::vector<int32_t> want = ids_of(*p.find("tokens"));
    EXPECT_EQ(tok().encode(text), want) << text;
    EXPECT_EQ(static_cast<int64_t>(want.size()), p.find("n_tokens")->as_int());
  }
}

TEST_F(QwenVocab, KnownIds) {
  EXPECT_EQ(tok().encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(tok().encode(" "), (std::vector<int32_t>{220}));
  EXPECT_EQ(tok().encode("\n"), (std::vector<int32_t>{198}));
  EXPECT_TRUE(tok().encode("").empty());
  // Digits are split one by one.
  EXPECT_EQ(tok().encode("333").size(), 3u);
}

TEST_F(QwenVocab, DecodeInvertsEncode) {
  const json::Value cases = json::parse(read_file(kReferenceDir + "/tokenizer-cases.json"));
  for (const json::Value& c : cases.as_array()) {
    const std::string& text = c.find("text")->as_string();
    // Control tokens come back only with special=true; plain text either way.
    EXPECT_EQ(tok().decode(tok().encode(text, true), true), text);
    EXPECT_EQ(tok().decode(tok().encode(text, false), false), text);
  }
  for (const std::string text : {"a\tb\v\f\r\n", "\xC2\xA0\xE2\x80\x89x", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80"}) {
    EXPECT_EQ(tok().decode(tok().encode(text)), text);
  }
}

// Random text from many scripts and classes round-trips; random bytes
// round-trip to their llama.cpp reading (invalid bytes as U+FFFD).
TEST_F(QwenVocab, RandomTextRoundTrips) {
  std::mt19937 gen(11);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges{
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0x17F}, {0x300, 0x36F}, {0x400, 0x4FF}, {0x900, 0x97F},
      {0x2000, 0x206F}, {0x3000, 0x30FF}, {0x4E00, 0x4FFF}, {0xAC00, 0xAD00}, {0x1F300, 0x1F6FF}};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int length = static_cast<int>(gen() % 40);
    for (int i = 0; i < length; ++i) {
      const auto& [lo, hi] = ranges[gen() % ranges.size()];
      unicode::append_utf8(text, lo + gen() % (hi - lo + 1));
    }
    EXPECT_EQ(tok().decode(tok().encode(text, false)), text);

    std::string bytes;
    for (int i = 0; i < length; ++i) bytes += static_cast<char>(gen() % 256);
    std::string expected;
    for (uint32_t cpt : unicode::decode_utf8(bytes)) unicode::append_utf8(expected, cpt);
    EXPECT_EQ(tok().decode(tok().encode(bytes, false)), expected);
  }
}

TEST_F(QwenVocab, DetokenizesPerTokenType) {
  EXPECT_EQ(tok().token_text(151645), "");                 // CONTROL hidden by default
  EXPECT_EQ(tok().token_text(151645, true), "<|im_end|>");
  EXPECT_EQ(tok().token_text(151657), "<tool_call>");      // USER_DEFINED always raw
  EXPECT_EQ(tok().token_text(151700, true), "");           // UNUSED padding
  EXPECT_EQ(tok().token_text(220), " ");                   // "Ġ" maps back to a space
  EXPECT_THROW(tok().token_text(-1), std::out_of_range);
  EXPECT_THROW(tok().token_text(151936), std::out_of_range);
}

TEST_F(QwenVocab, InvalidUtf8BecomesReplacementCharacter) {
  // A stray continuation byte and a truncated sequence each read as U+FFFD.
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(tok().decode(tok().encode("a\x80z")), "a" + replacement + "z");
  EXPECT_EQ(tok().decode(tok().encode("\xE4\xBD")), replacement + replacement);
  EXPECT_EQ(tok().encode("\xFF"), tok().encode(replacement));
}

TEST_F(QwenVocab, SpecialTokensOnlyWhenParsingSpecial) {
  EXPECT_EQ(tok().encode("<|im_end|>", true), (std::vector<int32_t>{151645}));
  EXPECT_GT(tok().encode("<|im_end|>", false).size(), 1u);
  // USER_DEFINED tokens are split out even without parse_special.
  EXPECT_EQ(tok().encode("<tool_call>", false), (std::vector<int32_t>{151657}));
}

// ---------------------------------------------------------------------------
// The pre-tokenizer on its own.

std::vector<std::string> split(std::string_view text) { return pre_tokenize("qwen2", text); }
using Words = std::vector<std::string>;

TEST(Qwen2PreTokenize, Contractions) {
  EXPECT_EQ(split("I'VE don't"), (Words{"I", "'VE", " don", "'t"}));
  EXPECT_EQ(split("x'LL'x"), (Words{"x", "'LL", "'x"}));
}

TEST(Qwen2PreTokenize, LettersTakeOneLeadingNonLetter) {
  EXPECT_EQ(split(" hello\tworld"), (Words{" hello", "\tworld"}));
  EXPECT_EQ(split("(abc"), (Words{"(abc"}));
  EXPECT_EQ(split("1a"), (Words{"1", "a"}));
}

TEST(Qwen2PreTokenize, DigitsAreSingle) {
  EXPECT_EQ(split("12 34"), (Words{"1", "2", " ", "3", "4"}));
  // Non-ASCII numbers (Nd, No) count as \p{N}.
  EXPECT_EQ(split("\xD9\xA3\xC2\xB2"), (Words{"\xD9\xA3", "\xC2\xB2"}));
}

TEST(Qwen2PreTokenize, PunctuationRunsKeepTrailingNewlines) {
  EXPECT_EQ(split("a!!\n\nb"), (Words{"a", "!!\n\n", "b"}));
  EXPECT_EQ(split(" ...x"), (Words{" ...", "x"}));
}

TEST(Qwen2PreTokenize, Whitespace) {
  // \s*[\r\n]+ ends at the last newline of a whitespace run.
  EXPECT_EQ(split("  \n  x"), (Words{"  \n", " ", " x"}));
  // \s+(?!\S) leaves the last space for the next word.
  EXPECT_EQ(split("a   b"), (Words{"a", "  ", " b"}));
  // ... and takes all of a run at the end of the text.
  EXPECT_EQ(split("a   "), (Words{"a", "   "}));
  EXPECT_EQ(split("\n\n\n\t\t\t   \n"), (Words{"\n\n\n\t\t\t   \n"}));
}

TEST(Qwen2PreTokenize, NonAsciiWhitespaceIsSpace) {
  // U+3000 is White_Space: it can lead a letter run like a space does.
  EXPECT_EQ(split("a\xE3\x80\x80" "b"), (Words{"a", "\xE3\x80\x80" "b"}));
  // U+00A0 at the end is a whitespace run of its own.
  EXPECT_EQ(split("a\xC2\xA0"), (Words{"a", "\xC2\xA0"}));
}

TEST(Qwen2PreTokenize, MarksAreNotLetters) {
  // Devanagari: consonants are L, the virama and vowel signs are M.
  EXPECT_EQ(split("\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87"),
            (Words{"\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8", "\xE0\xA5\x8D\xE0\xA4\xA4", "\xE0\xA5\x87"}));
}

TEST(Unicode, DecodesLikeLlamaCpp) {
  EXPECT_EQ(unicode::decode_utf8("a\xC3\xB1"), (std::vector<uint32_t>{'a', 0xF1}));
  // Overlong forms and surrogates are accepted; bad bytes cost one U+FFFD each.
  EXPECT_EQ(unicode::decode_utf8("\xC0\x80"), (std::vector<uint32_t>{0}));
  EXPECT_EQ(unicode::decode_utf8("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  EXPECT_EQ(unicode::decode_utf8("\xE4\xBD" "a"), (std::vector<uint32_t>{0xFFFD, 0xFFFD, 'a'}));
  EXPECT_EQ(unicode::decode_utf8("\xF7\xBF\xBF\xBF"), (std::vector<uint32_t>{0xFFFD}));
}

// ---------------------------------------------------------------------------
// BPE and metadata on a tiny hand-made vocabulary.

Vocabulary tiny_vocabulary() {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_token_char(static_cast<uint8_t>(b)));
  v.tokens.insert(v.tokens.end(), {"ab", "bc", "abc", "Ġa", "<|end|>", "<x>"});
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.types[v.tokens.size() - 2] = TokenType::Control;
  v.types[v.tokens.size() - 1] = TokenType::UserDefined;
  v.merges = {"b c", "a b", "a bc", "Ġ a"};
  return v;
}

TEST(Bpe, MergesByRankThenLeftmost) {
  const Tokenizer tok = Tokenizer::from_vocabulary(tiny_vocabulary());
  // "b c" has the lowest rank, so "abc" = a + bc -> "a bc" -> abc.
  EXPECT_EQ(tok.encode("abc"), (std::vector<int32_t>{258}));
  // "abab": two "a b" merges of equal rank; both apply.
  EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(tok.encode(" a"), (std::vector<int32_t>{259}));
  EXPECT_EQ(tok.encode("ba"), (std::vector<int32_t>{'b', 'a'}));
}

TEST(Bpe, SpecialTokenPartition) {
  const Tokenizer tok = Tokenizer::from_vocabulary(tiny_vocabulary());
  EXPECT_EQ(tok.encode("ab<|end|>bc"), (std::vector<int32_t>{256, 260, 257}));
  EXPECT_EQ(tok.encode("<x><x>", false), (std::vector<int32_t>{261, 261}));
  EXPECT_EQ(tok.decode(tok.encode("ab<|end|>bc")), "abbc");
  EXPECT_TRUE(tok.is_eog(260));  // "<|end|>" is an EOG text
}

TEST(Bpe, RejectsBadMetadata) {
  Vocabulary v = tiny_vocabulary();
  v = tiny_vocabulary();
  v.types.pop_back();
  try {
    Tokenizer::from_vocabulary(v);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("token_type"), std::string::npos) << e.what();
  }
  v = tiny_vocabulary();
  v.tokens.clear();
  v.types.clear();
  EXPECT_THROW(Tokenizer::from_vocabulary(v), std::runtime_error);
}

TEST(Bpe, UnknownModelOrPreTokenizerIsAnErrorNamingIt) {
  Vocabulary v = tiny_vocabulary();
  v.model = "bert";
  try {
    Tokenizer::from_vocabulary(v);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'bert'"), std::string::npos) << message;
    EXPECT_NE(message.find("gpt2, llama"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  v = tiny_vocabulary();
  v.pre = "no-such-pre";
  try {
    Tokenizer::from_vocabulary(v);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'no-such-pre'"), std::string::npos) << message;
    EXPECT_NE(message.find("llama-bpe"), std::string::npos) << message;
  }
}

TEST(Bpe, RejectsWrongTypedGgufKeys) {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_i32_array("tokenizer.ggml.tokens", {1, 2, 3});  // must be strings
  const std::vector<uint8_t> bytes = w.to_bytes();
  const gguf::File file = gguf::File::from_memory(bytes);
  try {
    Tokenizer::from_gguf(file);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.tokens"), std::string::npos) << e.what();
  }
  gguf::Writer missing;
  missing.set_string("tokenizer.ggml.model", "gpt2");
  const std::vector<uint8_t> missing_bytes = missing.to_bytes();
  EXPECT_THROW(Tokenizer::from_gguf(gguf::File::from_memory(missing_bytes)), std::runtime_error);
}

}  // namespace
}  // namespace lumen
