// The IR text form: print(parse(text)) == text, and parse errors name the line.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"

namespace lumen::ir {
namespace {

std::string read_golden(const std::string& name) {
  std::ifstream in(std::string(LUMEN_SOURCE_DIR) + "/tests/passes/golden/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kSmall = R"(module tiny source "tiny.dsl"

param n_embd : int = key("tiny.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
param n_layer : int = key("tiny.block_count", default = 2)
param eps : float = key("tiny.eps", default = 1e-06)
param half : int = n_embd / 2
param scale : float = const(0.125)
check n_embd % 32 == 0 : "n_embd must be a multiple of \"32\""

weight @emb : q8_0[n_vocab, n_embd] = "token_embd.weight"
weight @norm[l] : f32[n_embd] = "blk.{i}.norm.weight"
weight @out : q8_0[n_vocab, n_embd] = "output.weight" else "token_embd.weight"
weight @maybe : f32[n_embd] = "maybe.weight"

func @forward(%0 : i32[N]) -> f32[1, n_vocab] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n_embd] line 7
  %2 = layers n_layer iter(%3 = %1 : f32[N, n_embd]) {
    %4 = rms_norm %3, @norm[l] : (f32[N, n_embd]) -> f32[N, n_embd] {eps = eps}
    %5 = view %4 : (f32[N, n_embd]) -> f32[N, half] {offset = half, cols = half}
    %6 = add %3, %4 : (f32[N, n_embd], f32[N, n_embd]) -> f32[N, n_embd]
    yield %6
  }
  %7 = last %2 : (f32[N, n_embd]) -> f32[1, n_embd]
  %8 = quantize %7 : (f32[1, n_embd]) -> act_q8[1, n_embd]
  %9 = matmul %8, @out : (act_q8[1, n_embd]) -> f32[1, n_vocab] {epilogue = none, decode_kernel = "gemv.none", tile_m = 16}
  return %9
}

memory arena = max(64, 128) {
  buffer 0 : i32[N, 1] at 0 size 64 holds %0
  buffer 1 : f32[N, n_embd] at 64 size N * n_embd * 4 holds %1, %3, %6, %2
}
)";

TEST(IrText, RoundTripsExactly) {
  Module m = parse_module(kSmall);
  // "epilogue = none" is the default and is not printed back.
  std::string printed = print_module(m);
  std::string expected = kSmall;
  expected.replace(expected.find("epilogue = none, "), 17, "");
  expected.replace(expected.find("max(64, 128)"), 12, "128");
  EXPECT_EQ(printed, expected);
  EXPECT_EQ(print_module(parse_module(printed)), printed);
  EXPECT_EQ(m.params[3].default_value, 1e-06);
  EXPECT_EQ(m.checks[0].message, "n_embd must be a multiple of \"32\"");
  EXPECT_TRUE(m.weights[1].per_layer);
  EXPECT_EQ(m.weights[2].fallback, "token_embd.weight");
  ASSERT_TRUE(m.forward.loop.has_value());
  EXPECT_EQ(m.forward.loop->body.size(), 3u);
  EXPECT_EQ(m.forward.pre.at(0).line, 7);
}

TEST(IrText, RenumbersValues) {
  std::string text = kSmall;
  // Arbitrary names parse; printing numbers them in order of definition.
  for (auto [from, to] : {std::pair{"%9", "%logits"}, {"%1 ", "%x "}, {"%1,", "%x,"}, {"%1\n", "%x\n"}}) {
    size_t at;
    while ((at = text.find(from)) != std::string::npos) text.replace(at, std::string(from).size(), to);
  }
  EXPECT_NE(text.find("%logits"), std::string::npos);
  EXPECT_EQ(print_module(parse_module(text)), print_module(parse_module(kSmall)));
}

TEST(IrText, GoldenFilesRoundTrip) {
  for (const char* name : {"infer_shapes.in.ir", "plan_memory.out.ir"}) {
    std::string text = read_golden(name);
    ASSERT_FALSE(text.empty()) << name;
    EXPECT_EQ(print_module(parse_module(text)), text) << name;
  }
}

void expect_parse_error(std::string text, const std::string& message) {
  try {
    parse_module(text);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const IrError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// A weight bound to its file's types: one per layer, printed after its names.
TEST(IrText, BoundWeightTypesRoundTrip) {
  const std::string text = R"(module m

param n : int = key("m.n")

weight @emb : any[n, n] = "token_embd.weight" types(q5_0)
weight @down[l] : any[n, n] = "blk.{i}.ffn_down.weight" types(q4_k, q6_k, q4_k)
weight @norm[l] : f32[n] = "blk.{i}.norm.weight" optional types(f32)

func @forward(%0 : i32[N]) -> f32[N, n] {
  %1 = embed %0, @emb : (i32[N]) -> f32[N, n]
  return %1
}
)";
  Module m = parse_module(text);
  EXPECT_EQ(m.weights[1].types, (std::vector<DType>{DType::Q4_K, DType::Q6_K, DType::Q4_K}));
  EXPECT_EQ(m.weights[1].type_of_layer(1), DType::Q6_K);
  EXPECT_EQ(m.weights[0].type_of_layer(7), DType::Q5_0);  // one type: every layer's
  EXPECT_EQ(print_module(m), text);
  expect_parse_error("module m\nweight @w : any[2] = \"w\" types(act_q8)\n", "line 2: 'act_q8' is not a weight type");
  expect_parse_error("module m\nweight @w : any[2] = \"w\" types(any)\n", "line 2: 'any' is not a weight type");
  // The verifier: a global weight has one type, and a fixed type binds to itself.
  Module two = parse_module("module m\nweight @w : any[2] = \"w\" types(q8_0, q5_0)\nweight @v : f32[2] = \"v\" "
                            "types(f16)\nfunc @forward(%0 : i32[N]) -> i32[N] {\n  return %0\n}\n");
  const std::vector<std::string> problems = verify(two);
  for (const char* p : {"weight @w: a global weight has one tensor, one type", "weight @v: declared f32, bound to f16"})
    EXPECT_NE(std::find(problems.begin(), problems.end(), p), problems.end()) << p;
}

TEST(IrText, ReportsErrorsWithLines) {
  expect_parse_error("module m\nfunc @forward(%0 : i32[N]) -> ? {\n  return %1\n}\n",
                     "line 3: use of undefined value %1");
  expect_parse_error("module m\nfunc @forward(%0 : i32[N]) -> ? {\n  %1 = frobnicate %0 : (i32[N]) -> ?\n",
                     "line 3: unknown op 'frobnicate'");
  expect_parse_error("module m\nparam a : int = key(\"k\")\nparam a : int = key(\"k\")\n",
                     "line 3: param 'a' defined twice");
  expect_parse_error("module m\nweight @w : f64[2] = \"w\"\n", "line 2: unknown dtype 'f64'");
  expect_parse_error("module m\nfunc @forward(%0 : i32[N]) -> ? {\n  %1 = silu %0 : (f32[N]) -> ?\n",
                     "line 3: operand 0 has type i32[N], not f32[N]");
  expect_parse_error("module m\ncheck a ~ b : \"x\"\n", "line 2: unexpected character '~'");
  expect_parse_error("module m\nfoo\n", "line 2: expected 'func', found 'foo'");
  expect_parse_error("module m\nparam s : int = key(\"abc\n", "line 2: unterminated string");
  // Dims are read by the one parser of sizes (ops/dim.h); its errors get the line they are on.
  expect_parse_error("module m\nweight @w : f32[2 *\n] = \"w\"\n", "line 3: expected a dimension, found ']'");
  expect_parse_error("module m\nweight @w : f32[max(a)] = \"w\"\n", "line 2: expected ','");
  expect_parse_error("module m\nweight @w : f32[1.5] = \"w\"\n", "line 2: bad dimension: '1.5'");
}

}  // namespace
}  // namespace lumen::ir
