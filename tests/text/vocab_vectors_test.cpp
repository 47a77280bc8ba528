// llama.cpp's tokenizer test vectors (ggml-vocab-NAME.gguf.inp/.out, see
// ../shared/reference/tokenizers/README.md): every text must give exactly the
// expected ids with no BOS and special tokens not parsed, on vocab-only GGUF
// files of several kinds (byte-level BPE with different pre-tokenizers, SPM).
// Also the BOS decision per vocabulary type and the SPM rules on a tiny vocabulary.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/text/pre_tokenizer.h"
#include "lumen/text/tokenizer.h"
#include "support/test_files.h"

namespace lumen {
namespace {

const std::string kVocabDir = test_support::shared_reference_dir() + "/tokenizers";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// The .inp texts are joined by (and end with) the separator; .out has one line of ids per text.
std::vector<Case> read_cases(const std::string& base) {
  const std::string inp = slurp(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(sep, pos);
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream out(slurp(base + ".out"));
  std::string line;
  for (Case& c : cases) {
    if (!std::getline(out, line)) throw std::runtime_error(base + ".out has too few lines");
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, EveryTextGivesLlamaCppIds) {
  const std::string base = kVocabDir + "/ggml-vocab-" + GetParam() + ".gguf";
  const gguf::File file = gguf::File::open(base);
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const std::vector<Case> cases = read_cases(base);
  ASSERT_EQ(cases.size(), 46u);
  int passed = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> ids = tok.encode(c.text, /*parse_special=*/false);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'";
    passed += ids == c.ids;
  }
  EXPECT_EQ(passed, 46);
}

INSTANTIATE_TEST_SUITE_P(SharedVocabularies, VocabVectors,
                         ::testing::Values("gpt-2", "falcon", "deepseek-coder", "llama-spm"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(BosDecision, SpmAddsBosAndGpt2DoesNot) {
  const Tokenizer spm = Tokenizer::from_gguf(gguf::File::open(kVocabDir + "/ggml-vocab-llama-spm.gguf"));
  EXPECT_EQ(spm.bos_to_add(), 1);
  const Tokenizer gpt2 = Tokenizer::from_gguf(gguf::File::open(kVocabDir + "/ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(gpt2.bos_to_add(), std::nullopt);
}

// A tiny vocabulary with every byte token and a few words.
Vocabulary byte_level(const std::string& pre) {
  Vocabulary v;
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_token_char(static_cast<uint8_t>(b)));
  v.tokens.push_back("<|begin_of_text|>");
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.types.back() = TokenType::Control;
  v.bos = 256;
  return v;
}

TEST(BosDecision, FollowsThePreTokenizerDefaultAndTheKey) {
  EXPECT_EQ(Tokenizer::from_vocabulary(byte_level("llama-bpe")).bos_to_add(), 256);
  EXPECT_EQ(Tokenizer::from_vocabulary(byte_level("qwen2")).bos_to_add(), std::nullopt);
  Vocabulary v = byte_level("qwen2");
  v.add_bos = true;
  EXPECT_EQ(Tokenizer::from_vocabulary(v).bos_to_add(), 256);
  v = byte_level("llama-bpe");
  v.add_bos = false;
  EXPECT_EQ(Tokenizer::from_vocabulary(v).bos_to_add(), std::nullopt);
}

// SPM on a hand-made vocabulary: scores pick the merges, a space is prefixed
// to the text and after special tokens, unknown characters fall back to bytes.
Vocabulary tiny_spm() {
  Vocabulary v;
  v.model = "llama";
  v.pre = "";
  const auto add = [&](const std::string& text, float score, TokenType type) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, TokenType::Unknown);
  add("<s>", 0, TokenType::Control);
  add("</s>", 0, TokenType::Control);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    add(name, 0, TokenType::Byte);
  }
  add("\xe2\x96\x81", -1, TokenType::Normal);        // 259
  add("a", -2, TokenType::Normal);                   // 260
  add("b", -2, TokenType::Normal);                   // 261
  add("\xe2\x96\x81" "a", -3, TokenType::Normal);    // 262
  add("ab", -1.5f, TokenType::Normal);               // 263: beats "▁a"
  add("\xe2\x96\x81" "ab", -4, TokenType::Normal);   // 264
  return v;
}

TEST(Spm, MergesByScoreWithLeadingSpaceAndByteFallback) {
  const Tokenizer tok = Tokenizer::from_vocabulary(tiny_spm());
  // " ab": "ab" (-1.5) merges before "▁a" (-3), then "▁" + "ab" -> "▁ab".
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{264}));
  EXPECT_EQ(tok.encode("a a", false), (std::vector<int32_t>{262, 262}));
  // "é" has no token: its two UTF-8 bytes.
  EXPECT_EQ(tok.encode("\xc3\xa9", false), (std::vector<int32_t>{259, 3 + 0xC3, 3 + 0xA9}));
  // After a special token the text is prefixed with a space again.
  EXPECT_EQ(tok.encode("a</s>a", true), (std::vector<int32_t>{262, 2, 262}));
  EXPECT_EQ(tok.decode(tok.encode("ab a\xc3\xa9", false)), " ab a\xc3\xa9");
  EXPECT_EQ(tok.bos_to_add(), 1);
}

TEST(Spm, AddSpacePrefixFalseKeepsTheText) {
  Vocabulary v = tiny_spm();
  v.add_space_prefix = false;
  EXPECT_EQ(Tokenizer::from_vocabulary(v).encode("ab", false), (std::vector<int32_t>{263}));
}

TEST(Spm, ReadsIntegerScoresFromGguf) {
  // llama.cpp accepts tokenizer.ggml.scores as i32 as well as f32.
  const Vocabulary v = tiny_spm();
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  std::vector<int32_t> scores, types;
  for (float s : v.scores) scores.push_back(static_cast<int32_t>(s * 2));  // same order
  for (TokenType t : v.types) types.push_back(static_cast<int32_t>(t));
  w.set_i32_array("tokenizer.ggml.scores", scores);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const Tokenizer tok = Tokenizer::from_gguf(gguf::File::from_memory(bytes));
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{264}));
}

TEST(PreTokenizer, EveryTableRegexCompiles) {
  for (const std::string_view name : {"default", "llama-bpe", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                                      "mpt", "starcoder", "gpt-2", "refact", "command-r", "qwen2", "smollm", "qwen35",
                                      "poro-chat", "viking", "tekken", "chameleon", "gpt-4o", "tiny_aya", "superbpe",
                                      "bailingmoe", "seed-coder", "ufakzeka", "minicpm5", "laguna", "exaone-moe",
                                      "youtu", "spark2_5", "jais-2"}) {
    const PreTokenizerSpec* spec = find_pre_tokenizer(name);
    ASSERT_NE(spec, nullptr) << name;
    EXPECT_NO_THROW(RegexSplitter{spec->regexes}) << name;
  }
  EXPECT_EQ(find_pre_tokenizer("no-such-pre"), nullptr);
}

TEST(PreTokenizer, SplitKeepsMatchesAndTheTextBetween) {
  const std::string_view regexes[] = {R"(\p{N}{1,3})", R"(\s+)"};
  const RegexSplitter splitter(regexes);
  const std::string text = "ab 12345 c";
  std::vector<std::string> words;
  for (const auto& [offset, length] : splitter.split(text)) words.push_back(text.substr(offset, length));
  EXPECT_EQ(words, (std::vector<std::string>{"ab", " ", "123", "45", " ", "c"}));
}

TEST(PreTokenizer, LlamaBpeGroupsDigitsInThreesAndQwen2SplitsThem) {
  EXPECT_EQ(pre_tokenize("llama-bpe", "12345 x"), (std::vector<std::string>{"123", "45", " x"}));
  EXPECT_EQ(pre_tokenize("qwen2", "123"), (std::vector<std::string>{"1", "2", "3"}));
  // falcon: punctuation runs are cut first, then GPT-2's split, then digits in threes.
  EXPECT_EQ(pre_tokenize("falcon", "a,b 12345"), (std::vector<std::string>{"a", ",", "b", " ", "123", "45"}));
}

TEST(Bpe, LlamaBpeTakesAWholeWordTokenWithoutMerges) {
  // "hi" is a token but no merge builds it: llama-bpe (ignore_merges) still
  // finds it, qwen2 spells it with bytes.
  Vocabulary v = byte_level("llama-bpe");
  v.tokens.push_back("hi");
  v.types.push_back(TokenType::Normal);
  EXPECT_EQ(Tokenizer::from_vocabulary(v).encode("hi"), (std::vector<int32_t>{257}));
  v.pre = "qwen2";
  EXPECT_EQ(Tokenizer::from_vocabulary(v).encode("hi"), (std::vector<int32_t>{'h', 'i'}));
}

}  // namespace
}  // namespace lumen
