// The verifier accepts well-formed IR and names what is wrong otherwise.
#include <gtest/gtest.h>

#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"

namespace lumen::ir {
namespace {

const char* kValid = R"(module tiny
param n_embd : int = key("tiny.embedding_length")
param n_ff : int = key("tiny.feed_forward_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
param n_layer : int = key("tiny.block_count")
param eps : float = key("tiny.eps")
weight @emb : q8_0[n_vocab, n_embd] = "token_embd.weight"
weight @norm[l] : f32[n_embd] = "blk.{i}.norm.weight"
weight @bias[l] : f32[n_ff] = "blk.{i}.bias"
weight @up[l] : q8_0[n_ff, n_embd] = "blk.{i}.up.weight"
weight @down[l] : q8_0[n_embd, n_ff] = "blk.{i}.down.weight"
weight @out : q8_0[n_vocab, n_embd] = "output.weight"
func @forward(%0 : i32[N]) -> f32[1, n_vocab] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n_embd]
  %2 = layers n_layer iter(%3 = %1 : f32[N, n_embd]) {
    %4 = rms_norm %3, @norm[l] : (f32[N, n_embd]) -> f32[N, n_embd] {eps = eps}
    %5 = matmul %4, @up[l] : (f32[N, n_embd]) -> f32[N, n_ff] {epilogue = bias(@bias[l])}
    %6 = matmul %5, @down[l] : (f32[N, n_ff]) -> f32[N, n_embd] {epilogue = residual(%3)}
    yield %6
  }
  %7 = last %2 : (f32[N, n_embd]) -> f32[1, n_embd]
  %8 = matmul %7, @out : (f32[1, n_embd]) -> f32[1, n_vocab]
  return %8
}
)";

// Replaces the first occurrence of `from` in kValid with `to` and returns
// the verifier's first problem ("" when none).
std::string first_problem(const std::string& from, const std::string& to) {
  std::string text = kValid;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  auto problems = verify(parse_module(text));
  return problems.empty() ? "" : problems.front();
}

TEST(Verifier, AcceptsValidIr) { EXPECT_EQ(verify(parse_module(kValid)), std::vector<std::string>{}); }

TEST(Verifier, RejectsWrongMatmulShapes) {
  EXPECT_EQ(first_problem("%6 = matmul %5, @down[l]", "%6 = matmul %5, @up[l]"),
            "matmul: matmul shapes do not match: f32[N, n_ff] times q8_0[n_ff, n_embd] (row length n_ff vs n_embd)");
  EXPECT_EQ(first_problem("-> f32[1, n_vocab]\n  return", "-> f32[1, n_embd]\n  return"),
            "matmul: result is f32[1, n_embd] but the operands give f32[1, n_vocab]");
}

TEST(Verifier, RejectsBadEpilogues) {
  EXPECT_EQ(first_problem("{epilogue = bias(@bias[l])}", "{epilogue = bias}"), "matmul: epilogue bias needs one bias per weight");
  EXPECT_EQ(first_problem("{epilogue = residual(%3)}", "{epilogue = residual}"), "matmul: epilogue residual needs residual");
  EXPECT_EQ(first_problem("{epilogue = bias(@bias[l])}", "{epilogue = bias(@norm[l])}"),
            "matmul: a bias of 'matmul' must be f32[n_ff], found f32[n_embd]");
}

TEST(Verifier, RejectsLayerWeightMisuse) {
  EXPECT_EQ(first_problem("@norm[l] : (f32", "@norm : (f32"),
            "rms_norm: @norm is a layer weight: write @norm[l]");
  EXPECT_EQ(first_problem("%7 = last %2 : (f32[N, n_embd]) -> f32[1, n_embd]",
                          "%7 = rms_norm %2, @norm[l] : (f32[N, n_embd]) -> f32[1, n_embd] {eps = eps}"),
            "rms_norm: @norm[l] outside the layer loop");
  EXPECT_EQ(first_problem("@emb : (i32[N])", "@nope : (i32[N])"), "embed: unknown weight @nope");
}

TEST(Verifier, RejectsUnknownParamsAndAttributes) {
  EXPECT_EQ(first_problem("{eps = eps}", "{eps = epsilon}"), "rms_norm: attribute eps names an unknown param 'epsilon'");
  EXPECT_EQ(first_problem("{eps = eps}", ""), "rms_norm: missing attribute eps");
  EXPECT_EQ(first_problem("f32[n_embd] = \"blk.{i}.norm.weight\"", "f32[n_emb] = \"blk.{i}.norm.weight\""),
            "weight @norm: unknown param 'n_emb' in `n_emb`");
  EXPECT_EQ(first_problem("\"blk.{i}.norm.weight\"", "\"blk.norm.weight\""),
            "weight @norm: a layer weight's tensor name needs {i}");
}

TEST(Verifier, RejectsScopeAndTypeErrors) {
  // A body value used after the loop.
  EXPECT_EQ(first_problem("%7 = last %2", "%7 = last %6"),
            "last uses a value before its definition (or outside the loop that defines it)");
  EXPECT_EQ(first_problem("-> f32[1, n_vocab] {", "-> f32[1, n_embd] {"),
            "the function returns f32[1, n_vocab] but is declared f32[1, n_embd]");
  EXPECT_EQ(first_problem("%1 = embed %0, @emb : (i32[N]) -> f32[N, n_embd]", "%1 = embed %0, @emb : (i32[N]) -> f32[N, n_ff]"),
            "embed: result is f32[N, n_ff] but the operands give f32[N, n_embd]");
  // Open types are fine before infer_shapes only.
  std::string open = kValid;
  open.replace(open.find("-> f32[1, n_vocab]\n  return"), 18, "-> ?");
  EXPECT_EQ(verify(parse_module(open), /*require_types=*/false), std::vector<std::string>{});
  EXPECT_EQ(verify(parse_module(open)).at(0), "matmul: result type not inferred");
}

TEST(Verifier, VerifyOrThrowSummarizes) {
  std::string text = kValid;
  text.replace(text.find("{eps = eps}"), 11, "");
  try {
    verify_or_throw(parse_module(text));
    FAIL();
  } catch (const IrError& e) {
    EXPECT_EQ(std::string(e.what()), "invalid IR: rms_norm: missing attribute eps");
  }
}

}  // namespace
}  // namespace lumen::ir
