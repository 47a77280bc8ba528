// Load-time refusals and Session behaviour on a small synthetic qwen2 GGUF:
// each wrong key type, missing key, out-of-range value, failed check, missing,
// misshapen or mistyped tensor is one LoadError naming the culprit; eval()
// refuses context overflow and bad ids without changing the session.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/common/numeric.h"
#include "lumen/ops/op_list.h"
#include "lumen/runtime/binding.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/thread_pool.h"
#include "runtime_support.h"
#include "support/tolerances.h"

namespace lumen::runtime {
namespace {

namespace fs = std::filesystem;

// The type list states the block of every type a GGUF file may hold, and the
// GGUF reader states it too (ggml's table): they must agree, or the binding
// would size a tensor one way and the reader another.
TEST(TypeList, FileTypesHaveTheGgufReadersBlocks) {
  for (const ops::DTypeRow& row : ops::kDTypes) {
    if (row.ggml_type < 0) continue;
    SCOPED_TRACE(row.name);
    const std::optional<gguf::TypeTraits> traits = gguf::type_traits(static_cast<uint32_t>(row.ggml_type));
    ASSERT_TRUE(traits.has_value());
    EXPECT_EQ(traits->block_size, static_cast<uint32_t>(row.block_elems));
    EXPECT_EQ(traits->type_size, static_cast<uint32_t>(row.block_bytes));
  }
}

// Shapes of the synthetic model: small, but with a vocabulary that is not a
// multiple of the pack row group.
constexpr int64_t kVocab = 40, kEmbd = 64, kFf = 96, kHeads = 4, kHeadsKv = 2, kLayers = 2;
constexpr int64_t kKvDim = kEmbd / kHeads * kHeadsKv;

struct SynthOptions {
  std::function<void(gguf::Writer&)> metadata;              // edits after the defaults
  std::string skip_tensor;                                  // leave this tensor out
  std::string skip_key;                                     // leave this metadata key out (u32 defaults only)
  std::function<void(std::string&, gguf::TensorType&, std::vector<int64_t>&)> tensor;  // edit one
  bool output_is_embedding_copy = false;                    // output.weight gets token_embd's bytes
};

SynthOptions with_metadata(std::function<void(gguf::Writer&)> f) {
  SynthOptions o;
  o.metadata = std::move(f);
  return o;
}
SynthOptions without(std::string tensor) {
  SynthOptions o;
  o.skip_tensor = std::move(tensor);
  return o;
}
SynthOptions with_tensor(std::function<void(std::string&, gguf::TensorType&, std::vector<int64_t>&)> f) {
  SynthOptions o;
  o.tensor = std::move(f);
  return o;
}

std::vector<uint8_t> q8_0_bytes(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(rows * cols / kQ8Block));
  std::uniform_int_distribution<int> q(-127, 127);
  for (BlockQ8_0& b : blocks) {
    b.d = f32_to_f16(0.02f);
    for (int8_t& v : b.qs) v = static_cast<int8_t>(q(rng));
  }
  const uint8_t* p = reinterpret_cast<const uint8_t*>(blocks.data());
  return std::vector<uint8_t>(p, p + blocks.size() * sizeof(BlockQ8_0));
}

std::vector<uint8_t> f32_bytes(int64_t n, float value) {
  std::vector<float> v(static_cast<size_t>(n), value);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
}

std::string synth_gguf(const std::string& name, const SynthOptions& o = {}) {
  gguf::Writer w;
  w.set_string("general.architecture", "qwen2");
  if (o.skip_key != "qwen2.context_length") w.set_u32("qwen2.context_length", 64);
  w.set_u32("qwen2.embedding_length", kEmbd);
  w.set_u32("qwen2.block_count", kLayers);
  w.set_u32("qwen2.feed_forward_length", kFf);
  w.set_u32("qwen2.attention.head_count", kHeads);
  w.set_u32("qwen2.attention.head_count_kv", kHeadsKv);
  w.set_f32("qwen2.rope.freq_base", 10000.0f);
  w.set_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < kVocab; ++i) tokens.push_back(std::string(1, 't').append(std::to_string(i)));
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  if (o.metadata) o.metadata(w);

  std::mt19937 rng(42);
  std::vector<uint8_t> embedding_bytes;
  auto add = [&](std::string tname, gguf::TensorType type, std::vector<int64_t> ne) {
    if (tname == o.skip_tensor) return;
    const std::string original = tname;
    if (o.tensor) o.tensor(tname, type, ne);
    int64_t rows = ne.size() > 1 ? ne[1] : 1;
    std::vector<uint8_t> bytes;
    if (original == "output.weight" && o.output_is_embedding_copy) bytes = embedding_bytes;
    else if (type == gguf::TensorType::Q8_0) bytes = q8_0_bytes(rows, ne[0], rng);
    else if (type == gguf::TensorType::F16) bytes = std::vector<uint8_t>(static_cast<size_t>(2 * rows * ne[0]), 0);
    else bytes = f32_bytes(rows * ne[0], original.find("bias") != std::string::npos ? 0.01f : 1.0f);
    if (original == "token_embd.weight") embedding_bytes = bytes;
    w.add_tensor(tname, type, ne, bytes);
  };
  const auto Q8 = gguf::TensorType::Q8_0, F32 = gguf::TensorType::F32;
  add("token_embd.weight", Q8, {kEmbd, kVocab});
  for (int64_t l = 0; l < kLayers; ++l) {
    std::string b = std::string("blk.").append(std::to_string(l)).append(".");
    add(b + "attn_norm.weight", F32, {kEmbd});
    add(b + "attn_q.weight", Q8, {kEmbd, kEmbd});
    add(b + "attn_q.bias", F32, {kEmbd});
    add(b + "attn_k.weight", Q8, {kEmbd, kKvDim});
    add(b + "attn_k.bias", F32, {kKvDim});
    add(b + "attn_v.weight", Q8, {kEmbd, kKvDim});
    add(b + "attn_v.bias", F32, {kKvDim});
    add(b + "attn_output.weight", Q8, {kEmbd, kEmbd});
    add(b + "ffn_norm.weight", F32, {kEmbd});
    add(b + "ffn_gate.weight", Q8, {kEmbd, kFf});
    add(b + "ffn_up.weight", Q8, {kEmbd, kFf});
    add(b + "ffn_down.weight", Q8, {kFf, kEmbd});
  }
  add("output_norm.weight", F32, {kEmbd});
  add("output.weight", Q8, {kEmbd, kVocab});
  fs::path dir = fs::path(LUMEN_BINARY_DIR) / "tests" / "runtime" / "binding_test_files" / std::to_string(getpid());
  fs::create_directories(dir);
  std::string path = (dir / (name + ".gguf")).string();
  w.write(path);
  return path;
}

class Binding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  static void expect_load_error(const std::string& gguf_path, const std::string& what) {
    try {
      Session s(model_, gguf_path);
      ADD_FAILURE() << "loaded; wanted an error containing: " << what;
    } catch (const LoadError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nwanted: " << what;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    }
  }

  static std::shared_ptr<const CompiledModel> model_;
};

std::shared_ptr<const CompiledModel> Binding::model_;

TEST_F(Binding, MissingContextLengthIsAClearError) {
  SynthOptions o;
  o.skip_key = "qwen2.context_length";
  expect_load_error(synth_gguf("no_context_length", o), "missing metadata key 'qwen2.context_length' (hparam 'n_ctx')");
}

TEST_F(Binding, SyntheticModelRunsAndPrefillMatchesDecode) {
  SessionOptions o;
  o.n_threads = 2;
  const std::string path = synth_gguf("good");
  Session prefill(model_, path, o);
  EXPECT_EQ(prefill.n_vocab(), kVocab);
  EXPECT_EQ(prefill.n_ctx(), 64);  // min(4096, context_length)
  const std::vector<int32_t> tokens = {1, 5, 9, 33, 2, 39, 0};
  std::span<const float> l = prefill.eval(tokens);
  std::vector<float> batched(l.begin(), l.end());
  EXPECT_EQ(prefill.position(), 7);

  o.n_batch = 1;
  Session decode(model_, path, o);
  for (int32_t t : tokens) l = decode.eval(std::span<const int32_t>(&t, 1));
  ASSERT_EQ(l.size(), batched.size());
  double spread = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_TRUE(std::isfinite(l[i]));
    EXPECT_NEAR(l[i], batched[i], tolerance::kBatchVsTokenLogitDiff) << i;
    spread = std::max(spread, std::fabs(double(l[i]) - l[0]));
  }
  EXPECT_GT(spread, tolerance::kBatchVsTokenLogitDiff) << "logits all equal: the model computes nothing";

  // clear() restarts at position 0 with the same results.
  decode.clear();
  EXPECT_EQ(decode.position(), 0);
  l = decode.eval(tokens);
  for (size_t i = 0; i < l.size(); ++i) EXPECT_NEAR(l[i], batched[i], tolerance::kBatchVsTokenLogitDiff);
}

TEST_F(Binding, EvalRefusalsLeaveTheSessionUnchanged) {
  SessionOptions o;
  o.n_ctx = 8;
  o.n_threads = 1;
  Session s(model_, synth_gguf("good"), o);
  std::vector<int32_t> nine(9, 1);
  EXPECT_THROW(s.eval(nine), EvalError);
  std::vector<int32_t> bad = {1, kVocab};
  EXPECT_THROW(s.eval(bad), EvalError);
  std::vector<int32_t> negative = {-1};
  EXPECT_THROW(s.eval(negative), EvalError);
  EXPECT_THROW(s.eval(std::span<const int32_t>{}), EvalError);
  EXPECT_EQ(s.position(), 0);
  std::vector<int32_t> eight(8, 3);
  s.eval(eight);
  EXPECT_EQ(s.position(), 8);
  std::vector<int32_t> one = {1};
  EXPECT_THROW(s.eval(one), EvalError);
}

// Without output.weight the LM head binds token_embd.weight itself (the
// tensor, not a copy), and computes exactly what an untied model whose
// output.weight holds the embedding's bytes computes.
TEST_F(Binding, TiedOutputFallsBackToTheEmbedding) {
  const std::string tied = synth_gguf("tied", without("output.weight"));
  SynthOptions copy;
  copy.output_is_embedding_copy = true;
  const std::string untied = synth_gguf("untied_copy", copy);

  int output = -1;
  for (size_t i = 0; i < model_->program.weights.size(); ++i)
    if (model_->program.weights[i].gguf_name == "output.weight") output = static_cast<int>(i);
  ASSERT_GE(output, 0) << "the program has no output.weight";
  EXPECT_EQ(model_->program.weights[static_cast<size_t>(output)].fallback, "token_embd.weight");
  const gguf::File file = gguf::File::open(tied);
  ThreadPool pool(1);
  const BoundModel bound = bind_model(*model_, file, /*release_file_pages=*/false, pool);
  const gguf::TensorInfo* embedding = file.find_tensor("token_embd.weight");
  ASSERT_NE(embedding, nullptr);
  EXPECT_EQ(bound.tensor(output, 0), embedding);

  const std::vector<int32_t> tokens = {3, 4, 17, 39};
  Session tied_session(model_, tied);
  std::span<const float> got = tied_session.eval(tokens);
  const std::vector<float> tied_logits(got.begin(), got.end());
  ASSERT_EQ(tied_logits.size(), static_cast<size_t>(kVocab));
  Session copy_session(model_, untied);
  got = copy_session.eval(tokens);
  EXPECT_EQ(tied_logits, std::vector<float>(got.begin(), got.end()));
  // The output head matters: the default model's own random output.weight gives other logits.
  Session own_head(model_, synth_gguf("own_head"));
  got = own_head.eval(tokens);
  EXPECT_NE(tied_logits, std::vector<float>(got.begin(), got.end()));
}

TEST_F(Binding, MetadataRefusals) {
  expect_load_error(synth_gguf("key_type", with_metadata([](gguf::Writer& w) {
                      w.set_i32("qwen2.embedding_length", kEmbd);
                    })),
                    "'qwen2.embedding_length' has type");
  expect_load_error(synth_gguf("float_type", with_metadata([](gguf::Writer& w) {
                      w.set_u32("qwen2.attention.layer_norm_rms_epsilon", 1);
                    })),
                    "expected f32");
  expect_load_error(synth_gguf("range", with_metadata([](gguf::Writer& w) {
                      w.set_u32("qwen2.attention.head_count", 0);
                    })),
                    "hparam 'n_head' = 0");
  expect_load_error(synth_gguf("check", with_metadata([](gguf::Writer& w) {
                      w.set_u32("qwen2.attention.head_count", 3);
                    })),
                    "n_embd must be a multiple of n_head");
  expect_load_error(synth_gguf("arch", with_metadata([](gguf::Writer& w) {
                      w.set_string("general.architecture", "llama");
                    })),
                    "is a 'llama' model");
  expect_load_error(synth_gguf("not_array", with_metadata([](gguf::Writer& w) {
                      w.set_string("tokenizer.ggml.tokens", "oops");
                    })),
                    "'tokenizer.ggml.tokens' has type");
}

TEST_F(Binding, TensorRefusals) {
  expect_load_error(synth_gguf("missing", without("blk.1.attn_q.bias")), "missing tensor 'blk.1.attn_q.bias'");
  expect_load_error(synth_gguf("shape", with_tensor(
                                             [](std::string& name, gguf::TensorType&, std::vector<int64_t>& ne) {
                                               if (name == "blk.0.attn_k.weight") ne[1] = 2 * kKvDim;
                                             })),
                    "tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]");
  expect_load_error(synth_gguf("dtype", with_tensor(
                                             [](std::string& name, gguf::TensorType& type, std::vector<int64_t>&) {
                                               if (name == "blk.0.ffn_norm.weight") type = gguf::TensorType::F16;
                                             })),
                    "model.so was compiled for 'blk.0.ffn_norm.weight' as F32, the file has F16: "
                    "recompile with --weights");
}

TEST_F(Binding, CpuFeatureRefusalNamesTheFeature) {
  try {
    check_cpu_features(kCpuAvx512vnni, kCpuAvx2 | kCpuFma | kCpuF16c, "avx512-vnni");
    ADD_FAILURE() << "accepted";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("avx512-vnni"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(cpu_feature_names(kCpuAvx512vnni)), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_cpu_features(kCpuAvx2, kCpuAvx2 | kCpuFma, "avx2"));
}

TEST_F(Binding, MalformedProgramsFailAtLoad) {
  program::Program p = testing::qwen2_program(best_isa(cpu_features()));
  p.buffers[2].offset = program::Dim::constant(3);  // misaligned
  auto model = testing::in_process_model(p, best_isa(cpu_features()));
  try {
    Session s(model, synth_gguf("good"));
    ADD_FAILURE() << "loaded";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("misplaced"), std::string::npos) << e.what();
  }
  // A kernel the schedule names but the model does not carry.
  auto model_q = std::make_shared<CompiledModel>(*model_);
  model_q->kernels.erase(model_q->program.layer[1].schedule.formats[0].decode_kernel);
  try {
    Session s(model_q, synth_gguf("good"));
    ADD_FAILURE() << "loaded";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("has no matmul kernel 'gemv.bias'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lumen::runtime
