// Load-time refusals and Session behaviour on a small synthetic qwen2 GGUF:
// each wrong key type, missing key, out-of-range value, failed check, missing,
// misshapen or mistyped tensor is one LoadError naming the culprit; eval()
// refuses context overflow and bad ids without changing the session. Weights
// of every weight type bind (the program declaring their type), and run as
// their dequantized values do; malformed quantized tensors are refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/common/numeric.h"
#include "lumen/ops/op_list.h"
#include "lumen/quant/blocks.h"
#include "lumen/quant/quant.h"
#include "lumen/runtime/binding.h"
#include "lumen/passes/passes.h"
#include "lumen/target/packed_4bit.h"
#include "lumen/target/weight_formats.h"
#include "lumen/target/packed_kquant.h"
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
  // The type of the tensors that are Q8_0 by default (the matmul weights and
  // the embedding), their random blocks made with weight_bytes; with
  // as_dequantized_f32 they are written as F32 holding those blocks' values,
  // with as_exact_q8_0 as Q8_0 holding them exactly (convert_row_to_q8_0).
  gguf::TensorType quant_type = gguf::TensorType::Q8_0;
  bool as_dequantized_f32 = false;
  bool as_exact_q8_0 = false;
  int64_t embd = kEmbd, ff = kFf;  // 256 and 512 for the 256-element blocks
  std::function<void(const std::string&, std::vector<uint8_t>&)> bytes;  // edit one tensor's bytes
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

// The fp16 scales of a block of type t (offset, value): small enough that
// random quants and sub-block scales keep the weights well below 1.
std::vector<std::pair<size_t, float>> block_scales(ops::DType t) {
  using namespace quant;
  switch (t) {
    case ops::DType::Q4_0: return {{offsetof(BlockQ4_0, d), 0.02f}};
    case ops::DType::Q4_1: return {{offsetof(BlockQ4_1, d), 0.02f}, {offsetof(BlockQ4_1, m), -0.1f}};
    case ops::DType::Q5_0: return {{offsetof(BlockQ5_0, d), 0.01f}};
    case ops::DType::Q5_1: return {{offsetof(BlockQ5_1, d), 0.01f}, {offsetof(BlockQ5_1, m), -0.1f}};
    case ops::DType::Q2_K: return {{offsetof(BlockQ2_K, d), 0.02f}, {offsetof(BlockQ2_K, dmin), 0.01f}};
    case ops::DType::Q3_K: return {{offsetof(BlockQ3_K, d), 0.005f}};
    case ops::DType::Q4_K: return {{offsetof(BlockQ4_K, d), 0.001f}, {offsetof(BlockQ4_K, dmin), 0.001f}};
    case ops::DType::Q5_K: return {{offsetof(BlockQ5_K, d), 0.0005f}, {offsetof(BlockQ5_K, dmin), 0.001f}};
    case ops::DType::Q6_K: return {{offsetof(BlockQ6_K, d), 0.0002f}};
    case ops::DType::IQ4_NL: return {{offsetof(BlockIQ4_NL, d), 0.002f}};
    case ops::DType::IQ4_XS: return {{offsetof(BlockIQ4_XS, d), 0.0002f}};
    default: return {};
  }
}

// rows x cols of type t: random quants with block_scales, or random values
// in [-0.05, 0.05] for F32/F16/BF16.
std::vector<uint8_t> weight_bytes(ops::DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  const ops::DTypeRow& r = ops::row(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(ops::row_bytes(t, rows * cols)));
  if (r.block_elems == 1) {
    std::uniform_real_distribution<float> value(-0.05f, 0.05f);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float f = value(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const uint16_t h = t == ops::DType::F16 ? f32_to_f16(f) : static_cast<uint16_t>(bits >> 16);
      if (t == ops::DType::F32) std::memcpy(bytes.data() + 4 * i, &f, 4);
      else std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(byte(rng));
  for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(r.block_bytes))
    for (const auto& [offset, value] : block_scales(t)) {
      const uint16_t h = f32_to_f16(value);
      std::memcpy(bytes.data() + at + offset, &h, 2);
    }
  return bytes;
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
  w.set_u32("qwen2.embedding_length", static_cast<uint32_t>(o.embd));
  w.set_u32("qwen2.block_count", kLayers);
  w.set_u32("qwen2.feed_forward_length", static_cast<uint32_t>(o.ff));
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
    const ops::DType quant_type = *ops::dtype_of_ggml(static_cast<uint32_t>(o.quant_type));
    if (original == "output.weight" && o.output_is_embedding_copy) {
      bytes = embedding_bytes;
      if (type == gguf::TensorType::Q8_0) type = o.quant_type;
    } else if (type == gguf::TensorType::Q8_0 && o.quant_type != gguf::TensorType::Q8_0) {
      bytes = weight_bytes(quant_type, rows, ne[0], rng);
      type = o.quant_type;
    } else if (type == gguf::TensorType::Q8_0) bytes = q8_0_bytes(rows, ne[0], rng);
    else if (type == gguf::TensorType::F16) bytes = std::vector<uint8_t>(static_cast<size_t>(2 * rows * ne[0]), 0);
    else bytes = f32_bytes(rows * ne[0], original.find("bias") != std::string::npos ? 0.01f : 1.0f);
    if (original == "token_embd.weight") embedding_bytes = bytes;
    if (o.as_dequantized_f32 && type == o.quant_type) {
      std::vector<float> values(static_cast<size_t>(rows * ne[0]));
      quant::dequantize_row(quant_type, bytes.data(), values.data(), rows * ne[0]);
      bytes.assign(reinterpret_cast<const uint8_t*>(values.data()),
                   reinterpret_cast<const uint8_t*>(values.data() + values.size()));
      type = gguf::TensorType::F32;
    }
    if (o.as_exact_q8_0 && type == o.quant_type) {
      std::vector<BlockQ8_0> blocks(static_cast<size_t>(rows * ne[0] / kQ8Block));
      convert_row_to_q8_0(quant_type, bytes.data(), blocks.data(), rows * ne[0]);
      bytes.assign(reinterpret_cast<const uint8_t*>(blocks.data()),
                   reinterpret_cast<const uint8_t*>(blocks.data() + blocks.size()));
      type = gguf::TensorType::Q8_0;
    }
    if (o.bytes) o.bytes(tname, bytes);
    w.add_tensor(tname, type, ne, bytes);
  };
  const auto Q8 = gguf::TensorType::Q8_0, F32 = gguf::TensorType::F32;
  const int64_t kEmbd = o.embd, kFf = o.ff, kKvDim = kEmbd / kHeads * kHeadsKv;
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
// A Q8_0 cache reads each head's row as whole blocks of 32: this model's
// heads are 16 wide (its K rows, 32, would fit), so --kv q8_0 is refused.
TEST_F(Binding, AQ8CacheNeedsHeadsOfWholeBlocks) {
  SessionOptions o;
  o.n_threads = 1;
  o.kv_type = KvType::Q8_0;
  try {
    Session s(model_, synth_gguf("good"), o);
    ADD_FAILURE() << "loaded with a q8_0 cache and 16-wide heads";
  } catch (const LoadError& e) {
    EXPECT_STREQ(e.what(), "--kv q8_0 needs a head size that is a multiple of 32; this model's is 16");
  }
}

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

// The qwen2 program declaring type t for every weight it declares Q8_0 (the
// DSL's q8_0), as a program compiled for a file of type t declares them.
// The reference program with its Q8_0 weights declared `t`, and its matmuls
// given the kernels of t's packed format, as the schedule pass would (its
// matmuls read act_q8, so float types run as Q8_0 there; their own kernels
// are test_weight_types' and test_codegen_float's).
std::shared_ptr<const CompiledModel> model_declaring(ops::DType t) {
  const Isa isa = best_isa(cpu_features());
  program::Program p = testing::qwen2_program(isa);
  for (program::Weight& w : p.weights)
    if (w.dtypes == std::vector<program::DType>{ops::DType::Q8_0}) w.dtypes = {t};
  const ops::DType format = packed_format(t, isa, ops::DType::ActQ8);
  for (std::vector<program::Op>* ops : {&p.pre, &p.layer, &p.post})
    for (program::Op& op : *ops)
      if (op.kind == ops::OpId::MatMul && format != ops::DType::Q8_0)
        op.schedule.formats = {program::MatMulKernels{format, program::KernelId::gemv(op.epilogue, format),
                                                      program::KernelId::batch(op.epilogue, format),
                                                      passes::prefill_kernel(isa, op.epilogue, format)}};
  return testing::in_process_model(p, isa);
}

SynthOptions of_type(ops::DType t) {
  SynthOptions o;
  o.quant_type = static_cast<gguf::TensorType>(ops::row(t).ggml_type);
  if (ops::row(t).block_elems == quant::kQK_K) {
    o.embd = 256;
    o.ff = 512;
  }
  return o;
}

std::vector<float> logits_of(const std::shared_ptr<const CompiledModel>& model, const std::string& path) {
  SessionOptions o;
  o.n_threads = 2;
  Session s(model, path, o);
  const std::vector<int32_t> tokens = {3, 4, 17, 39, 0};
  std::span<const float> l = s.eval(tokens);
  return std::vector<float>(l.begin(), l.end());
}

// Every weight type binds (matmul weights and the embedding table; the Embed
// op dequantizes the looked-up rows) and runs as its values do:
// - a type that converts to Q8_0 exactly (Q4_0, Q5_0, IQ4_NL, in their own
//   packed formats) bitwise as a Q8_0 file holding that conversion: the
//   native kernels' integer block sums and FMA chain are the Q8_0 kernels';
// - the float types (F16, BF16) bitwise as an F32 file holding their values;
// - the k-quants (Q2_K to Q6_K), Q4_1 and Q5_1 (their own formats, exact
//   weights) within what requantizing their values to Q8_0 costs the F32 file.
TEST_F(Binding, EveryWeightTypeRunsAsItsValues) {
  for (const ops::DTypeRow& row : ops::kDTypes) {
    if (!row.weight || row.id == ops::DType::Q8_0 || row.id == ops::DType::F32) continue;
    SCOPED_TRACE(row.name);
    SynthOptions o = of_type(row.id);
    const std::string quantized = synth_gguf(std::string("type_") + row.name, o);
    const std::vector<float> got = logits_of(model_declaring(row.id), quantized);
    ASSERT_EQ(got.size(), static_cast<size_t>(kVocab));
    float lo = got[0], hi = got[0];
    for (float v : got) {
      ASSERT_TRUE(std::isfinite(v));
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    EXPECT_GT(hi - lo, 0.01f) << "logits all equal: the model computes nothing";
    if (converts_exactly_to_q8_0(row.id)) {
      o.as_exact_q8_0 = true;
      EXPECT_EQ(got, logits_of(model_declaring(ops::DType::Q8_0), synth_gguf(std::string("type_") + row.name + "_q8", o)));
      continue;
    }
    o.as_dequantized_f32 = true;
    const std::vector<float> dequantized =
        logits_of(model_declaring(ops::DType::F32), synth_gguf(std::string("type_") + row.name + "_f32", o));
    if (packed_format(row.id, best_isa(cpu_features()), ops::DType::ActQ8) == ops::DType::Q8_0) {
      EXPECT_EQ(got, dequantized);
      continue;
    }
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - dequantized[i]));
    EXPECT_LE(worst, tolerance::kNativeVsRequantizedLogitSpread * (hi - lo)) << "logits in [" << lo << ", " << hi << "]";
  }
}

// A k-quant, Q4_1 or Q5_1 prefill of 64 tokens (every matmul runs the k-quant
// GEMM on rows expanded per task) gives the logits of the same prompt in
// chunks of 8 (the batch kernel), bit for bit: each GEMM row is the GEMV's.
TEST_F(Binding, KQuantPrefillGemmIsBitwiseTheBatchKernel) {
  for (ops::DType t : {ops::DType::Q2_K, ops::DType::Q3_K, ops::DType::Q4_K, ops::DType::Q5_K, ops::DType::Q6_K, ops::DType::Q4_1,
                       ops::DType::Q5_1}) {
    SCOPED_TRACE(ops::row(t).name);
    const std::string path = synth_gguf(std::string("prefill_") + ops::row(t).name, of_type(t));
    const auto model = model_declaring(t);
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 64; ++i) tokens.push_back((i * 37 + 5) % kVocab);
    SessionOptions o;
    o.n_threads = 2;
    Session whole(model, path, o);
    std::span<const float> l = whole.eval(tokens);
    const std::vector<float> once(l.begin(), l.end());
    Session chunked(model, path, o);
    for (size_t at = 0; at < tokens.size(); at += 8) l = chunked.eval(std::span<const int32_t>(tokens).subspan(at, 8));
    EXPECT_EQ(std::vector<float>(l.begin(), l.end()), once);
  }
}

// A tied head reads the embedding's tensor in the embedding's type (here
// Q4_K: the Embed op dequantizes it, the head packs it).
TEST_F(Binding, TiedHeadReadsTheEmbeddingsType) {
  SynthOptions tied = of_type(ops::DType::Q4_K);
  tied.skip_tensor = "output.weight";
  SynthOptions copy = of_type(ops::DType::Q4_K);
  copy.output_is_embedding_copy = true;
  const auto model = model_declaring(ops::DType::Q4_K);
  EXPECT_EQ(logits_of(model, synth_gguf("tied_q4_k", tied)), logits_of(model, synth_gguf("untied_q4_k", copy)));
}

// Until the compiler takes the file's types, the program's declared type is the one a tensor must have.
TEST_F(Binding, ATensorMustHaveTheProgramsDeclaredType) {
  expect_load_error(synth_gguf("q5_0_for_q8_0", of_type(ops::DType::Q5_0)),
                    "model.so was compiled for 'token_embd.weight' as Q8_0, the file has Q5_0: recompile with --weights");
  Session s(model_declaring(ops::DType::Q5_0), synth_gguf("q5_0_for_q8_0", of_type(ops::DType::Q5_0)));
  EXPECT_EQ(s.n_vocab(), kVocab);
}

// Types Lumen does not run are refused by name, whatever the program declares.
TEST_F(Binding, UnrunnableTypesAreRefusedByName) {
  auto typed = [](gguf::TensorType type, const char* tensor) {
    SynthOptions o = of_type(ops::DType::Q4_K);  // rows of 256 and 512
    o.tensor = [=](std::string& name, gguf::TensorType& t, std::vector<int64_t>&) {
      if (name == tensor) t = type;
    };
    o.bytes = [=](const std::string& name, std::vector<uint8_t>& bytes) {
      if (name != tensor) return;
      const gguf::TypeTraits traits = *gguf::type_traits(static_cast<uint32_t>(type));
      // ffn_down is [n_embd rows, n_ff] = 256 x 512.
      bytes.assign(size_t(256) * 512 / traits.block_size * traits.type_size, 0);
    };
    return o;
  };
  const auto model = model_declaring(ops::DType::Q4_K);
  auto refused = [&](gguf::TensorType type, const std::string& what) {
    const std::string path = synth_gguf(std::string("refused_") + std::string(gguf::to_string(type)),
                                        typed(type, "blk.0.ffn_down.weight"));
    try {
      Session s(model, path);
      ADD_FAILURE() << "loaded a " << gguf::to_string(type) << " tensor";
    } catch (const LoadError& e) {
      EXPECT_EQ(std::string(e.what()), what);
    }
  };
  refused(gguf::TensorType::IQ2_XXS,
          "tensor 'blk.0.ffn_down.weight' has type IQ2_XXS, which Lumen does not run (an importance-matrix type)");
  refused(gguf::TensorType::IQ1_M,
          "tensor 'blk.0.ffn_down.weight' has type IQ1_M, which Lumen does not run (an importance-matrix type)");
  refused(gguf::TensorType::IQ3_S,
          "tensor 'blk.0.ffn_down.weight' has type IQ3_S, which Lumen does not run (an importance-matrix type)");
  refused(gguf::TensorType::TQ2_0,
          "tensor 'blk.0.ffn_down.weight' has type TQ2_0, which Lumen does not run (a ternary type)");
  refused(gguf::TensorType::Q8_1, "tensor 'blk.0.ffn_down.weight' has type Q8_1, which is not a weight type Lumen runs");
  refused(gguf::TensorType::Q8_K, "tensor 'blk.0.ffn_down.weight' has type Q8_K, which is not a weight type Lumen runs");
}

// One fp16 scale of block `block` of row `row` of `tensor` (type t, rows of cols) set to `bits`.
std::function<void(const std::string&, std::vector<uint8_t>&)> bad_scale(ops::DType t, std::string tensor,
                                                                         int64_t cols, int64_t row, int64_t block,
                                                                         size_t offset, uint16_t bits) {
  return [=](const std::string& name, std::vector<uint8_t>& bytes) {
    if (name != tensor) return;
    const size_t at = static_cast<size_t>(ops::row_bytes(t, cols) * row + ops::row(t).block_bytes * block) + offset;
    std::memcpy(bytes.data() + at, &bits, 2);
  };
}

// A NaN or infinite scale anywhere in a quantized weight is refused at load
// time with the tensor, row and block: in a matmul weight (checked as it is
// packed, so a pack cache file is never written for it) and in the
// embedding table (read in place; checked on every load).
TEST_F(Binding, NanOrInfiniteScalesAreRefused) {
  const auto q5_0 = model_declaring(ops::DType::Q5_0);
  SynthOptions nan = of_type(ops::DType::Q5_0);
  nan.bytes = bad_scale(ops::DType::Q5_0, "blk.1.attn_v.weight", kEmbd, 3, 1, offsetof(quant::BlockQ5_0, d), 0x7E00);
  const fs::path cache = fs::path(LUMEN_BINARY_DIR) / "tests" / "runtime" / "binding_test_files" /
                         std::to_string(getpid()) / "nan_pack_cache";
  SessionOptions with_cache;
  with_cache.pack_cache_dir = cache.string();
  const std::string path = synth_gguf("nan_scale", nan);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      Session s(q5_0, path, with_cache);
      ADD_FAILURE() << "loaded a NaN scale";
    } catch (const LoadError& e) {
      EXPECT_EQ(std::string(e.what()), "tensor 'blk.1.attn_v.weight', row 3, block 1: scale d is NaN");
    }
    EXPECT_FALSE(fs::exists(cache) && !fs::is_empty(cache)) << "a pack cache file was written";
  }
  const auto q4_k = model_declaring(ops::DType::Q4_K);
  SynthOptions inf = of_type(ops::DType::Q4_K);
  inf.bytes = bad_scale(ops::DType::Q4_K, "token_embd.weight", 256, 5, 0, offsetof(quant::BlockQ4_K, dmin), 0xFC00);
  try {
    Session s(q4_k, synth_gguf("inf_embedding_scale", inf), with_cache);
    ADD_FAILURE() << "loaded an infinite scale";
  } catch (const LoadError& e) {
    EXPECT_EQ(std::string(e.what()), "tensor 'token_embd.weight', row 5, block 0: scale dmin is infinite");
  }
  // Both again after the good file's weights are in the cache: still refused.
  Session good(q5_0, synth_gguf("nan_scale_good", of_type(ops::DType::Q5_0)), with_cache);
  EXPECT_THROW(Session(q5_0, path, with_cache), LoadError);
}

// The GGUF reader sizes every tensor from its shape and type: a quantized
// tensor whose data is cut short, or whose type claims more bytes than it
// has, is refused with the tensor named.
TEST_F(Binding, MalformedQuantizedTensorsAreRefused) {
  const auto model = model_declaring(ops::DType::Q5_0);
  const std::string good = synth_gguf("malformed_source", of_type(ops::DType::Q5_0));
  std::string bytes = testing::read_file(good);
  const fs::path dir = fs::path(good).parent_path();
  auto write = [&](const std::string& name, const std::string& contents) {
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  };
  // output.weight (Q5_0, the last tensor) loses its last 7 bytes.
  expect_load_error(write("truncated.gguf", bytes.substr(0, bytes.size() - 7)), "tensor 'output.weight'");
  expect_load_error(write("truncated.gguf", bytes.substr(0, bytes.size() - 7)), "runs past the end");
  // blk.0.ffn_down.weight's type id turned from Q5_0 (22-byte blocks) into Q8_0 (34): it overlaps the next tensor.
  const std::string name = "blk.0.ffn_down.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;  // after n_dims and two dimensions
  uint32_t type;
  std::memcpy(&type, bytes.data() + type_at, 4);
  ASSERT_EQ(type, static_cast<uint32_t>(gguf::TensorType::Q5_0));
  type = static_cast<uint32_t>(gguf::TensorType::Q8_0);
  std::memcpy(bytes.data() + type_at, &type, 4);
  expect_load_error(write("oversized.gguf", bytes), "overlaps tensor 'blk.0.ffn_down.weight'");
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
