// The whole pipeline on dsl/*.dsl, through the compile driver: lowering,
// every pass with the verifier and a text round trip after each, the fused
// structure of a qwen2 layer, the memory plan (no two live buffers overlap),
// and the Program compared with the hand-written tests/data/qwen2.program.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "lumen/common/internal_error.h"
#include "lumen/driver/driver.h"
#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"
#include "lumen/passes/passes.h"
#include "lumen/target/weight_formats.h"
#include "support/test_files.h"

namespace {

using lumen::ir::Module;
using lumen::ops::OpId;

// In-repo inputs and lumenc's outputs must exist: a missing one fails.
std::string read_file(const std::string& path) { return lumen::test_support::read_existing_file(path); }

std::string source_path(const std::string& rel) { return std::string(LUMEN_SOURCE_DIR) + "/" + rel; }

// dsl/<name>.dsl, with the first `replace_from` replaced by `replace_to`.
lumen::driver::Source dsl_source(const std::string& rel_path, const std::string& replace_from = "",
                                 const std::string& replace_to = "") {
  std::string text = read_file(source_path(rel_path));
  if (!replace_from.empty()) {
    size_t at = text.find(replace_from);
    EXPECT_NE(at, std::string::npos);
    if (at != std::string::npos) text.replace(at, replace_from.size(), replace_to);
  }
  return {rel_path, text};
}

// The IR of a program before any pass.
Module lower_dsl(const lumen::driver::Source& source) {
  lumen::driver::Options options;
  options.stage = lumen::driver::Stage::Ir;
  options.stop_after = "lower";
  return std::move(*lumen::driver::compile(source, options).ir);
}

// The target the pipeline schedules for here: tests/data/qwen2.program names its kernels.
constexpr lumen::Isa kTarget = lumen::Isa::Avx512Vnni;
lumen::driver::Options target_options() {
  lumen::driver::Options options;
  options.target = kTarget;
  return options;
}

// Qwen2.5-0.5B hyperparameters, for evaluating symbolic sizes.
const std::map<std::string, double> kQwen05b = {
    {"n_vocab", 151936}, {"n_ctx", 32768}, {"n_embd", 896},     {"n_layer", 24},  {"n_ff", 4864},
    {"n_head", 14},      {"n_head_kv", 2}, {"rope_base", 1e6}, {"rms_eps", 1e-6}};

// dsl/<name>.dsl compiled to the program (`ir` is the IR after all passes),
// the IR verified and round-tripped through its text form after every pass.
lumen::driver::Compilation compiled(const std::string& dsl) {
  lumen::driver::Options options;
  options.target = kTarget;
  options.after_each = [](const lumen::passes::PassInfo& pass, const Module& current) {
    EXPECT_EQ(lumen::ir::verify(current), std::vector<std::string>{}) << "after " << pass.name;
    std::string text = lumen::ir::print_module(current);
    EXPECT_EQ(lumen::ir::print_module(lumen::ir::parse_module(text)), text) << "after " << pass.name;
  };
  return lumen::driver::compile(dsl_source(dsl), options);
}

TEST(Pipeline, ListsPassesInOrder) {
  auto passes = lumen::passes::pipeline();
  ASSERT_EQ(passes.size(), 8u);
  EXPECT_STREQ(passes.front().name, "infer_shapes");
  EXPECT_STREQ(passes.back().name, "plan_memory");
  EXPECT_EQ(lumen::passes::find_pass("nope"), nullptr);
}

TEST(Pipeline, LlamaCompilesAndVerifiesAfterEveryPass) {
  lumen::driver::Compilation c = compiled("dsl/llama.dsl");
  const Module& m = *c.ir;
  ASSERT_TRUE(m.forward.loop.has_value());
  // No biases: Q, K and V still fuse, with no epilogue.
  const auto& qkv = m.forward.loop->body.at(1);
  EXPECT_EQ(qkv.kind, OpId::MatMul);
  EXPECT_EQ(qkv.weights.size(), 3u);
  EXPECT_EQ(qkv.epilogue, lumen::ir::Epilogue::None);
  const auto* rope = m.forward.loop->body.at(5).attr("mode");
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(rope->text, "normal");
  const lumen::program::Program& p = *c.program;
  EXPECT_EQ(p.arch, "llama");
  EXPECT_EQ(p.layer.size(), 11u);
}

// "Done when": each qwen2 layer after fusion holds exactly these ops.
TEST(Pipeline, Qwen2LayerIsFullyFused) {
  const Module m = *compiled("dsl/qwen2.dsl").ir;
  ASSERT_TRUE(m.forward.loop.has_value());
  std::vector<std::string> ops;
  for (const auto& op : m.forward.loop->body) {
    if (op.kind == OpId::View) continue;  // column ranges, not work
    std::string s = lumen::ir::to_string(op.kind);
    if (op.kind == OpId::MatMul) {
      s += "(";
      for (const auto& w : op.weights) s += w.name + (&w == &op.weights.back() ? "" : ",");
      s += std::string(")/") + lumen::ir::to_string(op.epilogue);
    }
    ops.push_back(s);
  }
  std::vector<std::string> expected = {"rms_norm_quant", "matmul(wq,wk,wv)/bias",       "rope",
                                       "rope",           "attention",                    "quantize",
                                       "matmul(wo)/residual", "rms_norm_quant", "matmul(wgate,wup)/silu_mul",
                                       "quantize",       "matmul(wdown)/residual"};
  EXPECT_EQ(ops, expected);
  std::vector<std::string> post;
  for (const auto& op : m.forward.post) post.push_back(lumen::ir::to_string(op.kind));
  EXPECT_EQ(post, (std::vector<std::string>{"last", "rms_norm_quant", "matmul"}));
}

// ------------------------------------------------------------ memory plan
struct Interval {
  int begin = 0, end = 0;
};

// Liveness per buffer, computed independently of plan_memory: positions in
// program order; values from before the loop read inside it stay live to
// the loop's end; the returned value is read at the very end.
std::vector<Interval> buffer_liveness(const Module& m) {
  const auto& f = m.forward;
  const int loop_begin = 1 + static_cast<int>(f.pre.size());
  const int loop_end = f.loop ? loop_begin + 1 + static_cast<int>(f.loop->body.size()) : -1;
  std::map<int, int> def, last;
  auto use = [&](int v, int at) {
    if (f.loop && def.at(v) < loop_begin && at > loop_begin && at <= loop_end) at = loop_end;
    last[v] = std::max(last.count(v) ? last[v] : def.at(v), at);
  };
  int pos = 0;
  def[f.tokens] = pos++;
  auto visit = [&](const lumen::ir::Op& op) {
    for (int v : lumen::ir::op_inputs(op)) use(v, pos);
    def[op.result] = pos++;
  };
  for (const auto& op : f.pre) visit(op);
  if (f.loop) {
    for (const auto& c : f.loop->carried) {
      use(c.init, pos);
      def[c.arg] = pos;
    }
    ++pos;
    for (const auto& op : f.loop->body) visit(op);
    for (const auto& c : f.loop->carried) {
      use(c.yield, pos);
      def[c.result] = pos;
    }
    ++pos;
  }
  for (const auto& op : f.post) visit(op);
  use(f.result, pos);
  std::vector<Interval> out;
  for (const auto& b : m.memory->buffers) {
    Interval live{INT32_MAX, 0};
    for (int v : b.values) {
      live.begin = std::min(live.begin, def.at(v));
      live.end = std::max(live.end, last.count(v) ? last[v] : def.at(v));
    }
    out.push_back(live);
  }
  return out;
}

int64_t eval(const lumen::ir::Dim& d, const std::map<std::string, double>& params, int64_t n) {
  auto v = d.eval([&](const std::string& name) -> std::optional<int64_t> {
    auto it = params.find(name);
    if (it != params.end()) return static_cast<int64_t>(it->second);
    if (name == "head_dim") return static_cast<int64_t>(params.at("n_embd") / params.at("n_head"));
    if (name == "n_embd_kv")
      return static_cast<int64_t>(params.at("n_head_kv") * (params.at("n_embd") / params.at("n_head")));
    return std::nullopt;
  }, n);
  EXPECT_TRUE(v.has_value()) << d.str();
  return v.value_or(0);
}

TEST(Pipeline, ArenaPlanNeverOverlapsLiveBuffers) {
  const Module m = *compiled("dsl/qwen2.dsl").ir;
  ASSERT_TRUE(m.memory.has_value());
  auto live = buffer_liveness(m);
  const auto& buffers = m.memory->buffers;
  for (int64_t n : {1, 7, 512}) {
    int64_t arena = *lumen::passes::arena_bytes(m, kQwen05b, n);
    for (size_t i = 0; i < buffers.size(); ++i) {
      int64_t off_i = eval(buffers[i].offset, kQwen05b, n), size_i = eval(buffers[i].bytes, kQwen05b, n);
      EXPECT_EQ(off_i % 64, 0) << "buffer " << i << " at N=" << n;
      EXPECT_LE(off_i + size_i, arena) << "buffer " << i << " at N=" << n;
      EXPECT_GE(size_i, 0);
      for (size_t j = i + 1; j < buffers.size(); ++j) {
        bool live_together = live[i].begin <= live[j].end && live[j].begin <= live[i].end;
        if (!live_together) continue;
        int64_t off_j = eval(buffers[j].offset, kQwen05b, n), size_j = eval(buffers[j].bytes, kQwen05b, n);
        EXPECT_TRUE(off_i + size_i <= off_j || off_j + size_j <= off_i)
            << "buffers " << i << " and " << j << " overlap at N=" << n;
      }
    }
  }
  // Reuse happens: the arena is smaller than all buffers side by side.
  int64_t total = 0;
  for (const auto& b : buffers) total += eval(b.bytes, kQwen05b, 512);
  EXPECT_LT(*lumen::passes::arena_bytes(m, kQwen05b, 512), total);
}

TEST(Pipeline, ArenaBytesNeedsParamValues) {
  const Module m = *compiled("dsl/qwen2.dsl").ir;
  std::string missing;
  EXPECT_EQ(lumen::passes::arena_bytes(m, {}, 1, &missing), std::nullopt);
  EXPECT_EQ(missing, "n_embd");
}

// --------------------------------------------------------------- program
// Values of every hparam of `p` (inputs by name, then defaults and derived).
std::vector<double> resolve(const lumen::program::Program& p, const std::map<std::string, double>& inputs) {
  std::vector<double> values;
  for (const auto& h : p.hparams) {
    double v = 0;
    if (auto it = inputs.find(h.name); it != inputs.end()) v = it->second;
    else if (h.default_value) v = *h.default_value;
    else if (h.derived) v = static_cast<double>(lumen::program::HParamValues(p.hparams, values).eval(*h.derived, 1));
    values.push_back(v);
  }
  return values;
}

// One op as comparable text with sizes evaluated: kind, weights, epilogue,
// kernels, and the dtype and column range of every view.
std::vector<std::string> describe_ops(const lumen::program::Program& p, const std::vector<lumen::program::Op>& ops) {
  auto values = resolve(p, kQwen05b);
  const lumen::program::HParamValues hp(p.hparams, values);
  auto view = [&](const lumen::program::View& v) {
    const auto& b = p.buffers.at(static_cast<size_t>(v.buffer));
    return std::string(lumen::program::to_string(b.dtype)) + "[" + std::to_string(hp.eval(v.col_offset, 7)) + ":" +
           std::to_string(hp.eval(v.cols, 7)) + "]";
  };
  std::vector<std::string> out;
  for (const auto& op : ops) {
    std::string s = lumen::program::to_string(op.kind);
    for (const auto& in : op.inputs) s += " in=" + view(in);
    s += " out=" + view(op.output);
    for (int w : op.weights) s += " w=" + p.weights.at(static_cast<size_t>(w)).name;
    for (int b : op.biases) s += " b=" + p.weights.at(static_cast<size_t>(b)).name;
    if (op.kind == lumen::ops::OpId::MatMul) {
      s += std::string(" epilogue=") + lumen::program::to_string(op.epilogue) + " " + to_string(op.schedule.formats[0].decode_kernel) +
           " " + to_string(op.schedule.formats[0].prefill_kernel);
      if (op.epilogue == lumen::program::Epilogue::Residual) s += " residual=" + view(op.residual);
    }
    if (op.kind == lumen::ops::OpId::Rope || op.kind == lumen::ops::OpId::Attention)
      s += " heads=" + std::to_string(hp.eval(op.n_heads.value(), 7)) + " dim=" + std::to_string(hp.eval(op.head_dim.value(), 7));
    out.push_back(s);
  }
  return out;
}

TEST(Pipeline, Qwen2ProgramMatchesTheHandWrittenOne) {
  const lumen::program::Program mine = *compiled("dsl/qwen2.dsl").program;
  const std::string reference_text = lumen::test_support::read_existing_file(source_path("tests/data/qwen2.program"));
  lumen::program::Program ref = lumen::program::deserialize(reference_text);
  EXPECT_EQ(mine.arch, ref.arch);
  ASSERT_EQ(mine.hparams.size(), ref.hparams.size());
  for (size_t i = 0; i < ref.hparams.size(); ++i) {
    EXPECT_EQ(mine.hparams[i].name, ref.hparams[i].name);
    EXPECT_EQ(mine.hparams[i].gguf_key, ref.hparams[i].gguf_key);
    EXPECT_EQ(mine.hparams[i].required, ref.hparams[i].required) << ref.hparams[i].name;
    if (mine.hparams[i].kind == lumen::program::HParam::Kind::Int) {
      EXPECT_EQ(mine.hparams[i].min_value, 1.0) << ref.hparams[i].name;
    }
  }
  ASSERT_EQ(mine.weights.size(), ref.weights.size());
  auto values = resolve(ref, kQwen05b);
  const lumen::program::HParamValues hp(ref.hparams, values);  // mine has the same hparams (above)
  for (size_t i = 0; i < ref.weights.size(); ++i) {
    EXPECT_EQ(mine.weights[i].name, ref.weights[i].name);
    EXPECT_EQ(mine.weights[i].gguf_name, ref.weights[i].gguf_name);
    EXPECT_EQ(mine.weights[i].fallback, ref.weights[i].fallback);
    EXPECT_EQ(mine.weights[i].dtypes, ref.weights[i].dtypes);
    ASSERT_EQ(mine.weights[i].shape.size(), ref.weights[i].shape.size());
    for (size_t d = 0; d < ref.weights[i].shape.size(); ++d)
      EXPECT_EQ(hp.eval(mine.weights[i].shape[d], 1), hp.eval(ref.weights[i].shape[d], 1)) << ref.weights[i].name;
  }
  EXPECT_EQ(describe_ops(mine, mine.pre), describe_ops(ref, ref.pre));
  EXPECT_EQ(describe_ops(mine, mine.layer), describe_ops(ref, ref.layer));
  EXPECT_EQ(describe_ops(mine, mine.post), describe_ops(ref, ref.post));
  EXPECT_EQ(hp.eval(mine.n_layers, 1), 24);
  EXPECT_EQ(hp.eval(mine.kv_dim, 1), hp.eval(ref.kv_dim, 1));
  EXPECT_EQ(hp.eval(mine.n_ctx_train, 1), hp.eval(ref.n_ctx_train, 1));
  EXPECT_EQ(mine.buffers.at(static_cast<size_t>(mine.tokens_buffer)).dtype, lumen::program::DType::I32);
  EXPECT_EQ(hp.eval(mine.buffers.at(static_cast<size_t>(mine.logits_buffer)).cols, 1), 151936);
  // Liveness-based reuse: never more than the reference's side-by-side layout.
  EXPECT_LE(hp.eval(mine.arena_bytes, 512), hp.eval(ref.arena_bytes, 512));
  // The serialized form reads back identically.
  std::string text = lumen::program::serialize(mine);
  EXPECT_EQ(lumen::program::serialize(lumen::program::deserialize(text)), text);
}

// ------------------------------------------------------- lowering limits
TEST(Lowering, LiteralsBecomeConstantParams) {
  std::string text = read_file(source_path("dsl/qwen2.dsl"));
  text = text.replace(text.find("h = rms_norm(x, attn_norm[l], rms_eps)"), 38, "h = rms_norm(x, attn_norm[l], 1e-6)");
  text = text.replace(text.find(", base = rope_base, mode = neox)"), 32, ", mode = neox)");
  const lumen::driver::Compilation c = lumen::driver::compile({"qwen2.dsl", text}, target_options());
  const lumen::ir::Param* eps = c.ir->find_param("eps_const");
  const lumen::ir::Param* base = c.ir->find_param("rope_base_const");
  ASSERT_NE(eps, nullptr);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(eps->default_value, 1e-6);
  EXPECT_EQ(base->default_value, 10000.0);
  const lumen::program::Program& p = *c.program;
  const auto& h = p.hparams.at(static_cast<size_t>(p.layer.at(0).eps_hparam));
  EXPECT_EQ(h.name, "eps_const");
  EXPECT_EQ(h.gguf_key, "");
  EXPECT_FALSE(h.required);
  EXPECT_EQ(h.default_value, 1e-6);
}

TEST(Lowering, StandaloneSoftmaxBecomesAProgramOp) {
  // qwen2 returning probabilities instead of logits.
  const lumen::driver::Compilation c =
      lumen::driver::compile(dsl_source("dsl/qwen2.dsl", "return matmul(h, output)", "return softmax(matmul(h, output))"), target_options());
  const lumen::program::Program& p = *c.program;
  ASSERT_FALSE(p.post.empty());
  const lumen::program::Op& softmax = p.post.back();
  EXPECT_EQ(softmax.kind, lumen::ops::OpId::Softmax);
  ASSERT_EQ(softmax.inputs.size(), 1u);
  EXPECT_EQ(softmax.output.buffer, p.logits_buffer);
  EXPECT_GT(softmax.line, 0);
  // It reads the output matmul's result, in a buffer of its own.
  const lumen::program::Op& logits = p.post.at(p.post.size() - 2);
  EXPECT_EQ(logits.kind, lumen::ops::OpId::MatMul);
  EXPECT_EQ(softmax.inputs[0].buffer, logits.output.buffer);
  EXPECT_NE(softmax.inputs[0].buffer, softmax.output.buffer);
  const std::vector<double> values = {151936, 32768, 896, 24, 4864, 14, 2, 1e6, 1e-6, 64, 128};
  ASSERT_EQ(p.hparams.size(), values.size());
  const lumen::program::HParamValues hp(p.hparams, values);
  EXPECT_EQ(hp.eval(softmax.inputs[0].cols, 1), 151936);
  EXPECT_EQ(hp.eval(softmax.output.cols, 1), 151936);
  // The op survives the text form.
  std::string text = lumen::program::serialize(p);
  EXPECT_NE(text.find("post op=Softmax "), std::string::npos);
  lumen::program::Program back = lumen::program::deserialize(text);
  ASSERT_EQ(back.post.size(), p.post.size());
  EXPECT_EQ(back.post.back().kind, lumen::ops::OpId::Softmax);
  EXPECT_EQ(lumen::program::serialize(back), text);
}

TEST(Lowering, ReportsWhatTheIrCannotExpress) {
  try {
    lower_dsl(dsl_source("dsl/qwen2.dsl", "h = rms_norm(x, attn_norm[l], rms_eps)",
                         "h = rms_norm(x, attn_norm[l], rms_eps * 2.0)"));
    FAIL() << "no error";
  } catch (const lumen::driver::Error& e) {
    EXPECT_NE(e.diagnostics.find("qwen2.dsl:52:"), std::string::npos) << e.diagnostics;
    EXPECT_NE(e.diagnostics.find("error: rms_norm's eps must be a param or a number"), std::string::npos)
        << e.diagnostics;
    EXPECT_EQ(std::string(e.what()), "1 error(s) in 'dsl/qwen2.dsl'");
  }
}

TEST(Lowering, AnUnplannedModuleIsAnInternalError) {
  Module m = *compiled("dsl/qwen2.dsl").ir;
  m.memory.reset();
  try {
    (void)lumen::passes::lower_to_program(m);
    FAIL() << "no error";
  } catch (const lumen::InternalError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("internal error: lower_to_program: the module has no memory plan", 0), 0u)
        << e.what();
  }
}

TEST(Lowering, ContextLengthComesFromItsParamOrAnHParamOfItsOwn) {
  const lumen::program::Program qwen2 = *compiled("dsl/qwen2.dsl").program;
  ASSERT_EQ(qwen2.n_ctx_train.kind(), lumen::ops::Dim::Kind::Param);
  EXPECT_EQ(qwen2.n_ctx_train.name(), "n_ctx");

  // No param reads tiny.context_length: the program still bounds --ctx by it.
  const lumen::driver::Compilation c = lumen::driver::compile({"tiny.ir", R"(module tiny
param n_ctx_train : int = key("tiny.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
weight @emb : q8_0[n_vocab, n_ctx_train] = "token_embd.weight"
func @forward(%0 : i32[N]) -> f32[N, n_vocab] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n_ctx_train]
  %2 = matmul %1, @emb : (f32[N, n_ctx_train]) -> f32[N, n_vocab]
  return %2
}
)"}, target_options());
  const lumen::program::Program& p = *c.program;
  ASSERT_EQ(p.n_ctx_train.kind(), lumen::ops::Dim::Kind::Param);
  const lumen::program::HParam& h = p.hparams.back();
  EXPECT_EQ(p.n_ctx_train.name(), h.name);
  EXPECT_EQ(h.name, "n_ctx_train_");  // the DSL's own n_ctx_train is another key
  EXPECT_EQ(h.gguf_key, "tiny.context_length");
  EXPECT_TRUE(h.required);
  EXPECT_FALSE(h.default_value.has_value());
  EXPECT_EQ(h.min_value, 1.0);
}

TEST(Lowering, KeepsSourceLinesOnOps) {
  Module m = lower_dsl(dsl_source("dsl/qwen2.dsl"));
  ASSERT_FALSE(m.forward.pre.empty());
  EXPECT_GT(m.forward.pre[0].line, 0);
  EXPECT_EQ(m.source, "qwen2.dsl");
  EXPECT_EQ(m.params.size(), 11u);
  EXPECT_EQ(m.weights.size(), 15u);
}

}  // namespace

// ------------------------------------------------------ pass errors
const char* kMismatch = R"(module tiny
param n_embd : int = key("tiny.embedding_length")
param n_ff : int = key("tiny.feed_forward_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
weight @emb : q8_0[n_vocab, n_embd] = "token_embd.weight"
weight @up : q8_0[n_ff, n_embd] = "up.weight"
weight @down : q8_0[n_embd, n_ff] = "down.weight"
func @forward(%0 : i32[N]) -> ? {
  %1 = embed %0, @emb : (i32[N]) -> ?
  %2 = matmul %1, @up : (?) -> ?
  %3 = matmul %2, @down : (?) -> ?
  %4 = add %3, %2 : (?, ?) -> ?
  return %4
}
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string infer_error(const std::string& text) {
  Module m = lumen::ir::parse_module(text);
  try {
    lumen::passes::infer_shapes(m);
  } catch (const lumen::ir::IrError& e) {
    return e.what();
  }
  return "";
}

TEST(InferShapes, ReportsMismatchesNamingTheOp) {
  // The messages are the op table's (the same as sema's for the DSL).
  EXPECT_EQ(infer_error(kMismatch), "infer_shapes: add: cannot add f32[N, n_embd] and f32[N, n_ff]: shapes do not match");
  EXPECT_EQ(infer_error(replaced(kMismatch, "%3 = matmul %2, @down", "%3 = matmul %2, @up")),
            "infer_shapes: matmul: matmul shapes do not match: f32[N, n_ff] times q8_0[n_ff, n_embd] (row length n_ff "
            "vs n_embd)");
  EXPECT_EQ(infer_error(replaced(kMismatch, "%4 = add %3, %2 : (?, ?) -> ?", "%4 = silu %1 : (?) -> f32[N, n_ff]")),
            "infer_shapes: silu result is declared f32[N, n_ff] but computes f32[N, n_embd]");
}

TEST(PlanMemory, RefusesRopeWhoseInputIsReadAfterwards) {
  Module m = *compiled("dsl/qwen2.dsl").ir;
  ASSERT_TRUE(m.forward.loop.has_value());
  // Make attention read the un-rotated Q view: rope can no longer work in place.
  auto& body = m.forward.loop->body;
  auto rope = std::find_if(body.begin(), body.end(), [](const auto& op) { return op.kind == OpId::Rope; });
  auto attention = std::find_if(body.begin(), body.end(), [](const auto& op) { return op.kind == OpId::Attention; });
  attention->operands[0] = rope->operands[0];
  m.memory.reset();
  try {
    lumen::passes::plan_memory(m);
    FAIL() << "no error";
  } catch (const lumen::ir::IrError& e) {
    EXPECT_EQ(std::string(e.what()), "plan_memory: rope's input is read after the rotation");
    EXPECT_EQ(e.line, rope->line);  // the driver points there in the DSL program
  }
}

// ------------------------------------------------------------ lumenc
// Runs the lumenc binary (built before this test: tests/passes/CMakeLists.txt).
int run_lumenc(const std::string& args, std::string* out) {
  std::string exe = std::string(LUMEN_BINARY_DIR) + "/tools/lumenc";
  std::string out_path = std::string(LUMEN_BINARY_DIR) + "/tests/passes/lumenc_test." + std::to_string(getpid()) + ".out";
  int status = std::system((exe + " " + args + " > " + out_path + " 2>&1").c_str());
  *out = read_file(out_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

TEST(Lumenc, ChecksDumpsAndReportsErrors) {
  std::string out;
  ASSERT_EQ(run_lumenc("--help", &out), 0) << out;
  EXPECT_NE(out.find("Examples:"), std::string::npos);
  EXPECT_EQ(run_lumenc("check " + source_path("dsl/qwen2.dsl"), &out), 0) << out;
  EXPECT_EQ(out, "");
  EXPECT_EQ(run_lumenc("dump-ir --after=all " + source_path("dsl/llama.dsl"), &out), 0) << out;
  size_t headers = 0;
  for (size_t at = 0; (at = out.find("// ----- IR after ", at)) != std::string::npos; ++at) ++headers;
  EXPECT_EQ(headers, lumen::passes::pipeline().size());
  EXPECT_NE(out.find("// arena: needs a value for 'n_embd'"), std::string::npos);
  EXPECT_EQ(run_lumenc("dump-ir --set n_vocab=151936 --set n_embd=896 --set n_ff=4864 --set n_head=14 "
                       "--set n_head_kv=2 " + source_path("dsl/qwen2.dsl"), &out), 0);
  EXPECT_NE(out.find("// arena bytes at N=512: "), std::string::npos) << out;
  EXPECT_EQ(run_lumenc("dump-ir --after=nope " + source_path("dsl/qwen2.dsl"), &out), 1);
  EXPECT_EQ(out, "lumenc: error: unknown pass 'nope' (see lumenc dump-ir --help)\n");
  EXPECT_EQ(run_lumenc("check /nonexistent/x.dsl", &out), 1);
  EXPECT_EQ(out, "lumenc: error: cannot read '/nonexistent/x.dsl'\n");
  EXPECT_EQ(run_lumenc("compile --frobnicate x.dsl", &out), 2);
  EXPECT_EQ(run_lumenc("compile " + source_path("dsl/qwen2.dsl") + " -o /nonexistent/x.so --tune znver4", &out), 1);
  EXPECT_EQ(out, "lumenc: error: --tune 'znver4' is not one of generic, zen4, zen5, native\n");
  // A pass after infer_shapes run alone on untyped IR: the file's fault (exit 1), not an internal error (70).
  EXPECT_EQ(run_lumenc("dump-ir --only=plan_memory " + source_path("tests/passes/golden/infer_shapes.in.ir"), &out), 1);
  EXPECT_EQ(out.rfind("lumenc: error: plan_memory alone needs a fully typed IR (run infer_shapes first): ", 0), 0u)
      << out;
  EXPECT_EQ(run_lumenc("dump-program " + source_path("dsl/qwen2.dsl"), &out), 0);
  EXPECT_EQ(out.rfind("lumen-program 3\n", 0), 0u) << out.substr(0, 100);
  // The kernels of the --target: AVX2's registers hold m16n4, not m48n4.
  EXPECT_EQ(run_lumenc("dump-program --target avx2 " + source_path("dsl/qwen2.dsl"), &out), 0);
  EXPECT_NE(out.find("prefill_kernel=\"gemm.bias.m16n4\""), std::string::npos);
  EXPECT_EQ(out.find("m48n4"), std::string::npos);
}

// A matmul of any weight type compiles: the schedule gives it the kernels of
// its packed format (target/weight_formats.h); a schedule run on weights not
// bound to their types is a broken promise (the driver binds them first).
TEST(Schedule, MatmulsTakeTheKernelsOfTheirWeightsPackedFormat) {
  const char* text = R"(module tiny
param n_embd : int = key("tiny.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
weight @emb : any[n_vocab, n_embd] = "token_embd.weight"
weight @out : f16[n_vocab, n_embd] = "output.weight"
func @forward(%0 : i32[N]) -> f32[N, n_vocab] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n_embd]
  %2 = quantize %1 : (f32[N, n_embd]) -> act_q8[N, n_embd]
  %3 = matmul %2, @out : (act_q8[N, n_embd]) -> f32[N, n_vocab]
  return %3
}
)";
  const lumen::driver::Compilation c = lumen::driver::compile({"f16.ir", text}, target_options());
  int matmuls = 0;
  for (const auto* ops : {&c.program->pre, &c.program->post})
    for (const lumen::program::Op& op : *ops)
      if (op.kind == lumen::ops::OpId::MatMul) {
        ++matmuls;
        ASSERT_EQ(op.schedule.formats.size(), 1u);
        // The IR quantizes the input itself: an act_q8 matmul runs its F16 weights as Q8_0.
        EXPECT_EQ(op.schedule.formats[0].format,
                  lumen::packed_format(lumen::ops::DType::F16, kTarget, lumen::ops::DType::ActQ8));
      }
  EXPECT_EQ(matmuls, 1);
  Module m = lumen::ir::parse_module(text);
  EXPECT_THROW(lumen::passes::schedule(m, kTarget), lumen::InternalError);
}

// The type rule (target/weight_formats.h matmul_input_dtype): a matmul of
// F16 weights keeps its f32 input, no quantize op, and takes the F16 kernels.
TEST(Schedule, FloatWeightsReadF32Activations) {
  const char* text = R"(module tiny
param n_embd : int = key("tiny.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
weight @emb : any[n_vocab, n_embd] = "token_embd.weight"
weight @out : f16[n_vocab, n_embd] = "output.weight"
func @forward(%0 : i32[N]) -> f32[N, n_vocab] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n_embd]
  %2 = matmul %1, @out : (f32[N, n_embd]) -> f32[N, n_vocab]
  return %2
}
)";
  const lumen::driver::Compilation c = lumen::driver::compile({"f16.ir", text}, target_options());
  int matmuls = 0;
  for (const auto* ops : {&c.program->pre, &c.program->post})
    for (const lumen::program::Op& op : *ops) {
      EXPECT_NE(op.kind, lumen::ops::OpId::Quantize);
      if (op.kind != lumen::ops::OpId::MatMul) continue;
      ++matmuls;
      ASSERT_EQ(op.schedule.formats.size(), 1u);
      EXPECT_EQ(op.schedule.formats[0].format, lumen::ops::DType::F16);
      EXPECT_EQ(lumen::program::to_string(op.schedule.formats[0].decode_kernel), "gemv.f16.none");
      EXPECT_EQ(c.program->buffers[size_t(op.inputs[0].buffer)].dtype, lumen::ops::DType::F32);
    }
  EXPECT_EQ(matmuls, 1);
}

// Passes on IR that parses and verifies (open types allowed) either work or
// throw; mutated inputs exercise their error paths (under ASan in CI).
// Each edit of a well-formed module, compiled by the driver, has one expected
// verdict: the parser or the verifier rejects it, a pass rejects it with a one-line error
// (never an InternalError: IR that verifies is the user's input), or it
// compiles, and then the module after the passes verifies with every type
// known and lowers to a Program with ops in every section it had.
enum class Verdict { Parser, Verifier, Passes, Compiles };

const char* name(Verdict v) {
  switch (v) {
    case Verdict::Parser: return "rejected by the parser";
    case Verdict::Verifier: return "rejected by the verifier";
    case Verdict::Passes: return "rejected by the passes";
    case Verdict::Compiles: return "compiles";
  }
  return "?";
}

TEST(Pipeline, MutatedIrNeverCrashesThePasses) {
  std::string text = read_file(source_path("tests/passes/golden/infer_shapes.in.ir"));
  ASSERT_FALSE(text.empty());
  struct Edit {
    std::string from, to;
    Verdict expected;
  };
  const std::vector<Edit> edits = {
      {"@wk[l]", "@wq[l]", Verdict::Parser},  // weight defined twice
      {"@bq[l]", "@bk[l]", Verdict::Parser},
      {"%3, %14", "%14, %14", Verdict::Compiles},  // a different residual, computed in place
      {"%4 = rms_norm", "%4 = silu", Verdict::Verifier},  // silu takes no weight
      {"@wup[l]", "@wgate[l]", Verdict::Parser},
      {"silu %17", "silu %16", Verdict::Passes},  // mul of [N, n_embd] and [N, n_ff]
      {"mul %18, %19", "add %18, %19", Verdict::Compiles},  // a different model, but a valid one
      {"heads = n_head,", "heads = n_ff,", Verdict::Passes},  // rope: heads * dim is not the row length
      {"%11, %12, %10", "%11, %11, %11", Verdict::Passes},  // attention: k's row is not kv_heads * dim
      {"last %2", "last %1", Verdict::Passes},  // reads the loop's initial value inside it
      {"yield %22", "yield %21", Verdict::Passes},
      {"n_embd_kv, n_embd]", "n_embd, n_embd_kv]", Verdict::Passes},  // a transposed weight
      {"@wdown[l]", "@wo[l]", Verdict::Parser}};
  for (const Edit& edit : edits) {
    const std::string what = edit.from + " -> " + edit.to;
    size_t at = text.find(edit.from);
    ASSERT_NE(at, std::string::npos) << edit.from;
    std::string mutated = text;
    mutated.replace(at, edit.from.size(), edit.to);
    Verdict got = Verdict::Compiles;
    std::string message;
    try {
      const lumen::driver::Compilation c = lumen::driver::compile({"mutated.ir", mutated}, target_options());
      EXPECT_EQ(lumen::ir::verify(*c.ir, /*require_types=*/true), std::vector<std::string>{}) << what;
      EXPECT_FALSE(c.program->layer.empty()) << what;
      EXPECT_FALSE(c.program->post.empty()) << what;
    } catch (const lumen::driver::Error& e) {
      // The driver names the file, then the parser's "line L: ...", the
      // verifier's "does not verify: ..." or the pass's "<pass>: ...".
      message = e.what();
      got = message.rfind("mutated.ir: line ", 0) == 0               ? Verdict::Parser
            : message.rfind("the IR of 'mutated.ir' does not verify", 0) == 0 ? Verdict::Verifier
                                                                             : Verdict::Passes;
      EXPECT_EQ(e.diagnostics, "") << what;
    } catch (const lumen::InternalError& e) {
      ADD_FAILURE() << what << ": " << e.what();
      continue;
    }
    EXPECT_EQ(name(got), std::string(name(edit.expected))) << what << ": " << message;
    if (got != Verdict::Compiles) {
      EXPECT_FALSE(message.empty()) << what;
      EXPECT_EQ(message.find('\n'), std::string::npos) << what << ": not one line: " << message;
    }
  }
}
