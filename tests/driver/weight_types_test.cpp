// A program compiled for one file's tensor types: `any` weights take each
// tensor's type per layer (a tied head the embedding's), fixed types must
// match, the types round-trip through the IR and program text, key the
// compiled-model cache, and a model.so bound to a file of other types is
// refused naming the first tensor that differs; `lumenc compile --weights`
// compiles for a file with mixed types.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "lumen/driver/driver.h"
#include "lumen/passes/passes.h"
#include "lumen/gguf/gguf.h"
#include "lumen/ir/text.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/weight_types_check.h"

namespace lumen::driver {
namespace {

namespace fs = std::filesystem;
using ops::DType;

constexpr int kLayers = 2;

// The tensor types of a Q4_K_M-like 2-layer qwen2 file: Q5_0 where rows are
// not a multiple of 256, Q4_K and Q6_K ffn_down (llama-quantize's
// use_more_bits), no output.weight (the head is tied to the embedding).
WeightTypes mixed_types() {
  WeightTypes t = {{"token_embd.weight", DType::Q5_0}, {"output_norm.weight", DType::F32}};
  for (int l = 0; l < kLayers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "ffn_norm.weight"})
      t[b + n] = DType::F32;
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                          "ffn_up.weight"})
      t[b + n] = DType::Q5_0;
    t[b + "ffn_down.weight"] = l == 0 ? DType::Q4_K : DType::Q6_K;
  }
  return t;
}

Source qwen2() { return Source::read(LUMEN_SOURCE_DIR "/dsl/qwen2.dsl"); }

program::Program program_for(const WeightTypes& types) {
  Options o;
  o.weight_types = types;
  return *compile(qwen2(), o).program;
}

const program::Weight& weight(const program::Program& p, const std::string& name) {
  for (const program::Weight& w : p.weights)
    if (w.name == name) return w;
  ADD_FAILURE() << "no weight " << name;
  return p.weights.front();
}

TEST(WeightTypes, AnyWeightsTakeTheFilesTypesPerLayer) {
  const program::Program p = program_for(mixed_types());
  EXPECT_EQ(weight(p, "wdown").dtypes, (std::vector<DType>{DType::Q4_K, DType::Q6_K}));
  EXPECT_EQ(weight(p, "wq").dtypes, (std::vector<DType>{DType::Q5_0}));  // one for every layer when they agree
  EXPECT_EQ(weight(p, "attn_norm").dtypes, (std::vector<DType>{DType::F32}));
  EXPECT_EQ(weight(p, "tok_embd").dtypes, (std::vector<DType>{DType::Q5_0}));
  EXPECT_EQ(weight(p, "output").dtypes, (std::vector<DType>{DType::Q5_0}));  // tied: the embedding's type
  // One kernel set per packed format among a matmul's layers, each reading
  // its format: ffn_down has two (Q4_K in layer 0, Q6_K after), the others
  // one (Q5_0); the k-quants prefill with their own GEMM (on rows expanded
  // per task), Q5_0 with the Q8_0 GEMM (on rows converted per task).
  for (const program::Op& op : p.layer)
    if (op.kind == ops::OpId::MatMul) {
      const bool down = p.weights[static_cast<size_t>(op.weights[0])].name == "wdown";
      std::vector<DType> formats;
      for (const program::MatMulKernels& k : op.schedule.formats) {
        formats.push_back(k.format);
        EXPECT_EQ(k.decode_kernel, program::KernelId::gemv(op.epilogue, k.format));
        EXPECT_EQ(k.prefill_kernel, passes::prefill_kernel(Options{}.target, op.epilogue, k.format));
        EXPECT_EQ(k.prefill_kernel.kind, program::KernelKind::Gemm);
        EXPECT_EQ(k.prefill_kernel.weight, k.format == DType::Q5_0 ? DType::Q8_0 : k.format);
      }
      const std::vector<DType> want = down ? std::vector<DType>{DType::Q4_K, DType::Q6_K} : std::vector<DType>{DType::Q5_0};
      EXPECT_EQ(formats, want);
    }

  // Without a file, `any` is Q8_0: the program of a Q8_0 file is that one.
  WeightTypes q8 = mixed_types();
  for (auto& [name, type] : q8)
    if (type != DType::F32) type = DType::Q8_0;
  EXPECT_EQ(program::serialize(program_for(q8)), program::serialize(*compile(qwen2(), {}).program));
}

TEST(WeightTypes, TheTypesRoundTripThroughTheIrAndTheProgramText) {
  Options o;
  o.stage = Stage::Ir;
  o.stop_after = "lower";
  o.weight_types = mixed_types();
  const Compilation c = compile(qwen2(), o);
  const std::string ir_text = ir::print_module(*c.ir);
  EXPECT_NE(ir_text.find("weight @wdown[l] : any[n_embd, n_ff] = \"blk.{i}.ffn_down.weight\" types(q4_k, q6_k)"),
            std::string::npos)
      << ir_text;
  EXPECT_EQ(ir::print_module(ir::parse_module(ir_text)), ir_text);
  // An IR source keeps the types it states.
  const program::Program from_ir = *compile({"bound.ir", ir_text}, {}).program;
  EXPECT_EQ(weight(from_ir, "wdown").dtypes, (std::vector<DType>{DType::Q4_K, DType::Q6_K}));

  const program::Program p = program_for(mixed_types());
  const std::string text = program::serialize(p);
  EXPECT_NE(text.find("name=\"wdown\" gguf=\"blk.{i}.ffn_down.weight\" per_layer=1 dtypes=Q4_K,Q6_K"),
            std::string::npos);
  EXPECT_EQ(program::serialize(program::deserialize(text)), text);
  // Two packed formats: a kernel set each, in the text as lists.
  EXPECT_NE(text.find(" formats=Q4_K,Q6_K decode_kernel=\"gemv.q4_k.residual,gemv.q6_k.residual\""), std::string::npos)
      << text;
  // A kernel that reads another format than its set's is refused.
  program::Program wrong = p;
  for (program::Op& op : wrong.layer)
    if (op.kind == ops::OpId::MatMul) op.schedule.formats[0].decode_kernel = program::KernelId::gemv(op.epilogue);
  try {
    program::deserialize(program::serialize(wrong));
    FAIL() << "read a Q8_0 kernel for another format";
  } catch (const program::ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("does not read the format"), std::string::npos) << e.what();
  }
}

TEST(WeightTypes, AFileThatLacksATensorOrDisagreesWithAFixedTypeIsRefused) {
  WeightTypes missing = mixed_types();
  missing.erase("blk.1.ffn_up.weight");
  try {
    program_for(missing);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the file has no tensor 'blk.1.ffn_up.weight' (weight 'wup')");
  }
  WeightTypes f16_norm = mixed_types();
  f16_norm["blk.0.attn_norm.weight"] = DType::F16;
  try {
    program_for(f16_norm);
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor 'blk.0.attn_norm.weight' is f16 in the file, but the program declares 'attn_norm' f32");
  }
}

TEST(WeightTypes, TheCacheKeyHasTheTypes) {
  const std::string text = qwen2().text;
  const WeightTypes a = mixed_types();
  WeightTypes b = a;
  b["blk.1.ffn_down.weight"] = DType::Q4_K;
  EXPECT_EQ(model_cache_key(text, Isa::Avx2, CpuTune::Generic, a), model_cache_key(text, Isa::Avx2, CpuTune::Generic, mixed_types()));
  EXPECT_NE(model_cache_key(text, Isa::Avx2, CpuTune::Generic, a), model_cache_key(text, Isa::Avx2, CpuTune::Generic, b));
  EXPECT_NE(model_cache_key(text, Isa::Avx2, CpuTune::Generic, a), model_cache_key(text, Isa::Avx2, CpuTune::Generic, {}));
  EXPECT_NE(model_cache_key(text, Isa::Avx2, CpuTune::Generic, a), model_cache_key(text, Isa::Avx512, CpuTune::Generic, a));
  EXPECT_NE(model_cache_key(text, Isa::Avx2, CpuTune::Generic, a), model_cache_key(text, Isa::Avx2, CpuTune::Zen4, a));
}

// A GGUF with the tensors of `types` (rows of 256 elements, 32 rows; the
// bytes are zeros: what is read here is the tensor table).
gguf::Writer file_of(const WeightTypes& types) {
  gguf::Writer w;
  w.set_string("general.architecture", "qwen2");
  for (const auto& [name, type] : types) {
    const int64_t rows = 32, cols = 256;
    const bool vector = type == DType::F32;
    std::vector<int64_t> ne = vector ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
    const size_t bytes = static_cast<size_t>(ops::row_bytes(type, cols) * (vector ? 1 : rows));
    w.add_tensor(name, static_cast<gguf::TensorType>(ops::row(type).ggml_type), ne, std::vector<uint8_t>(bytes));
  }
  return w;
}

TEST(WeightTypes, AModelCompiledForOtherTypesIsRefusedNamingTheFirstTensorThatDiffers) {
  const program::Program p = program_for(mixed_types());
  WeightTypes other = mixed_types();
  other["blk.1.ffn_down.weight"] = DType::Q4_K;
  const std::vector<uint8_t> bytes = file_of(other).to_bytes();
  const gguf::File file = gguf::File::from_memory(bytes);
  try {
    runtime::check_weight_types(p, file, kLayers);
    FAIL() << "accepted";
  } catch (const runtime::LoadError& e) {
    EXPECT_STREQ(e.what(),
                 "model.so was compiled for 'blk.1.ffn_down.weight' as Q6_K, the file has Q4_K: recompile with --weights");
  }
  const std::vector<uint8_t> same = file_of(mixed_types()).to_bytes();
  EXPECT_NO_THROW(runtime::check_weight_types(p, gguf::File::from_memory(same), kLayers));
  try {
    runtime::check_weight_types(p, gguf::File::from_memory(same), 3);
    FAIL() << "accepted";
  } catch (const runtime::LoadError& e) {
    EXPECT_STREQ(e.what(), "model.so was compiled for 2 layers of 'blk.{i}.ffn_down.weight', the file has 3: recompile "
                           "with --weights");
  }
}

TEST(WeightTypes, LumencCompilesForTheTypesOfAFile) {
  const fs::path dir = fs::path(LUMEN_BINARY_DIR) / "tests" / "driver" / ("weights-" + std::to_string(getpid()));
  fs::create_directories(dir);
  file_of(mixed_types()).write((dir / "mixed.gguf").string());
  const std::string lumenc = std::string(LUMEN_BINARY_DIR) + "/tools/lumenc";
  const std::string dsl = std::string(LUMEN_SOURCE_DIR) + "/dsl/qwen2.dsl";
  const std::string run = lumenc + " compile " + dsl + " --target avx2 --weights " + (dir / "mixed.gguf").string() +
                          " -o " + (dir / "mixed.so").string() + " > " + (dir / "out.txt").string() + " 2>&1";
  EXPECT_EQ(std::system(run.c_str()), 0) << run;
  EXPECT_GT(fs::file_size(dir / "mixed.so"), 0u);
  const std::string dump = lumenc + " dump-program " + dsl + " --target avx2 --weights " +
                           (dir / "mixed.gguf").string() + " > " + (dir / "program.txt").string();
  ASSERT_EQ(std::system(dump.c_str()), 0);
  const std::string text = Source::read((dir / "program.txt").string()).text;
  EXPECT_NE(text.find("per_layer=1 dtypes=Q4_K,Q6_K"), std::string::npos);
  EXPECT_EQ(program::serialize(program::deserialize(text)), program::serialize(program_for(mixed_types())));
  // A file without a tensor the program needs: one line naming it.
  WeightTypes missing = mixed_types();
  missing.erase("token_embd.weight");
  file_of(missing).write((dir / "missing.gguf").string());
  const std::string refused = lumenc + " check " + dsl + " --weights " + (dir / "missing.gguf").string() + " 2> " +
                              (dir / "err.txt").string();
  EXPECT_NE(std::system(refused.c_str()), 0);
  EXPECT_EQ(Source::read((dir / "err.txt").string()).text,
            "lumenc: error: the file has no tensor 'token_embd.weight' (weight 'tok_embd')\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lumen::driver
