// The table of operators (ops/op_table.h): complete, consistent with the IR
// and the DSL, and its rules on symbolic and on constant shapes.
#include "lumen/ops/op_table.h"

#include <gtest/gtest.h>

#include <set>

#include "lumen/dsl/ast.h"

namespace {

using namespace lumen::ops;

ShapeDim shape(const Dim& x) { return {x, SymDim::of(x)}; }
ShapeDim d(const char* name) { return shape(Dim::param(name)); }
ShapeDim n() { return shape(Dim::tokens()); }
TensorType f32(std::vector<ShapeDim> shape) { return {DType::F32, std::move(shape)}; }
TensorType q8(std::vector<ShapeDim> shape) { return {DType::Q8_0, std::move(shape)}; }

OpCall call_of(std::vector<TensorType> operands, std::vector<bool> weights, const DimFacts& facts) {
  OpCall c;
  c.operands = std::move(operands);
  c.is_weight = std::move(weights);
  c.facts = &facts;
  return c;
}

TEST(OpTable, EveryOpIdHasOneEntryWithAUniqueName) {
  std::set<std::string> names;
  for (const OpInfo& op : op_table()) {
    EXPECT_TRUE(names.insert(op.name).second) << op.name;
    EXPECT_EQ(&op_info(op.id), &op);
    EXPECT_EQ(find_op(op.name), &op);
    ASSERT_NE(op.rule, nullptr) << op.name;
    for (size_t i = 0; i + 1 < op.operands.size(); ++i) EXPECT_FALSE(op.operands[i].variadic) << op.name;
  }
  EXPECT_EQ(names.size(), kOpCount);
}

TEST(OpTable, EveryDslOpOfTheListIsABuiltinAndNoOther) {
  for (const OpRow& op : kOps) {
    std::optional<OpId> builtin = lumen::dsl::ast::dsl_op_from_name(op.name);
    EXPECT_EQ(builtin.has_value(), op.in_dsl) << op.name;
    if (builtin) {
      EXPECT_EQ(*builtin, op.id) << op.name;
    }
  }
}

TEST(OpTable, SoftcapKeepsItsActivationsTypeAndNeedsItsCap) {
  DimFacts none;
  OpCall c = call_of({f32({n(), d("n_vocab")})}, {false}, none);
  Verdict v = infer(op_info(OpId::Softcap), c);
  ASSERT_TRUE(v.ok()) << v.message;
  EXPECT_EQ(v.result->str(), "f32[N, n_vocab]");
  EXPECT_TRUE(find_attr(op_info(OpId::Softcap), "cap")->required);

  c.operands = {q8({n(), d("n_vocab")})};
  v = infer(op_info(OpId::Softcap), c);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.operand, 0);
}

TEST(OpTable, RopeNeedsHeadsTimesDimAndAnEvenDim) {
  DimFacts facts;
  facts.assume_divides(SymDim::constant(2), SymDim::param("hd"));
  OpCall c = call_of({f32({n(), shape(Dim::param("h") * Dim::param("hd"))})}, {false}, facts);
  c.sizes = {{"heads", d("h")}, {"dim", d("hd")}};
  Verdict v = infer(op_info(OpId::Rope), c);
  ASSERT_TRUE(v.ok()) << v.message;
  EXPECT_EQ(v.result->str(), "f32[N, h * hd]");

  c.sizes["dim"] = d("other");
  v = infer(op_info(OpId::Rope), c);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.operand, 0);

  DimFacts none;
  c.facts = &none;
  c.sizes["dim"] = d("hd");
  v = infer(op_info(OpId::Rope), c);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.attr, "dim");
  EXPECT_EQ(v.message, "'rope' needs an even dim: add a check that hd % 2 == 0");
}

TEST(OpTable, RopeAndAttentionNeedOneRowPerToken) {
  DimFacts none;
  OpCall c = call_of({f32({ShapeDim::of(1), shape(Dim::param("h") * Dim::constant(2))})}, {false}, none);
  c.sizes = {{"heads", d("h")}, {"dim", ShapeDim::of(2)}};
  Verdict v = infer(op_info(OpId::Rope), c);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.message.find("one row per token"), std::string::npos) << v.message;
}

TEST(OpTable, AttentionKvHeadsDefaultsToHeads) {
  DimFacts none;
  ShapeDim width = shape(Dim::param("h") * Dim::param("hd"));
  OpCall c = call_of({f32({n(), width}), f32({n(), width}), f32({n(), width})}, {false, false, false}, none);
  c.sizes = {{"heads", d("h")}, {"dim", d("hd")}};
  EXPECT_TRUE(infer(op_info(OpId::Attention), c).ok());
  c.sizes["kv_heads"] = d("kv");
  Verdict v = infer(op_info(OpId::Attention), c);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.operand, 1);
}

TEST(OpTable, MatmulRowsAddUpOverFusedWeights) {
  DimFacts none;
  OpCall c = call_of({f32({n(), d("e")}), q8({d("a"), d("e")}), q8({d("b"), d("e")})}, {false, true, true}, none);
  Verdict v = infer(op_info(OpId::MatMul), c);
  ASSERT_TRUE(v.ok()) << v.message;
  EXPECT_EQ(v.result->str(), "f32[N, a + b]");
  c.epilogue = Epilogue::SiluMul;
  v = infer(op_info(OpId::MatMul), c);
  EXPECT_FALSE(v.ok());  // gate and up differ
  c.epilogue = Epilogue::Bias;
  v = infer(op_info(OpId::MatMul), c);
  EXPECT_EQ(v.attr, "epilogue");
  c.operands[2] = q8({d("b"), d("f")});
  c.epilogue = Epilogue::None;
  v = infer(op_info(OpId::MatMul), c);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.message, "matmul shapes do not match: f32[N, e] times q8_0[b, f] (row length e vs f)");
}

TEST(OpTable, AddBroadcastsAWeightRowInEitherOrder) {
  DimFacts none;
  OpCall c = call_of({f32({n(), d("e")}), f32({d("e")})}, {false, true}, none);
  EXPECT_EQ(infer(op_info(OpId::Add), c).result->str(), "f32[N, e]");
  c = call_of({f32({d("e")}), f32({n(), d("e")})}, {true, false}, none);
  EXPECT_EQ(infer(op_info(OpId::Add), c).result->str(), "f32[N, e]");
  c = call_of({f32({d("e")}), f32({d("e")})}, {true, true}, none);
  EXPECT_EQ(infer(op_info(OpId::Add), c).message, "cannot add two weights");
  c = call_of({f32({n(), d("e")}), f32({n(), d("f")})}, {false, false}, none);
  EXPECT_EQ(infer(op_info(OpId::Mul), c).message, "cannot multiply f32[N, e] and f32[N, f]: shapes do not match");
}

TEST(OpTable, OperandCountsAndRolesComeFromTheSpecs) {
  DimFacts none;
  OpCall c = call_of({f32({n(), d("e")})}, {false}, none);
  EXPECT_EQ(infer(op_info(OpId::RmsNorm), c).message, "'rms_norm' takes 2 operands, has 1");
  c = call_of({f32({n(), d("e")}), f32({d("e")})}, {false, false}, none);
  EXPECT_EQ(infer(op_info(OpId::RmsNorm), c).operand, 1);  // the weight must be a weight
  c = call_of({f32({n(), d("e")})}, {false}, none);
  EXPECT_EQ(infer(op_info(OpId::MatMul), c).message, "'matmul' takes at least 2 operands, has 1");
}

TEST(OpTable, ChoicesAreChecked) {
  DimFacts none;
  OpCall c = call_of({f32({n(), ShapeDim::of(8)})}, {false}, none);
  c.sizes = {{"heads", ShapeDim::of(2)}, {"dim", ShapeDim::of(4)}};
  c.choices = {{"mode", "sideways"}};
  Verdict v = infer(op_info(OpId::Rope), c);
  EXPECT_EQ(v.attr, "mode");
  EXPECT_EQ(v.message, "attribute 'mode' of 'rope' must be one of neox, normal, not 'sideways'");
}

// The runtime asks with the values of one binding: constants compare by value.
TEST(OpTable, ConstantShapesCheckByValue) {
  DimFacts none;
  OpCall c = call_of({f32({ShapeDim::of(5), ShapeDim::of(256)})}, {false}, none);
  c.tokens = ShapeDim::of(5);
  c.sizes = {{"heads", ShapeDim::of(4)}, {"dim", ShapeDim::of(64)}};
  EXPECT_TRUE(infer(op_info(OpId::Rope), c).ok());
  c.sizes["dim"] = ShapeDim::of(32);
  EXPECT_FALSE(infer(op_info(OpId::Rope), c).ok());
  c.sizes["dim"] = ShapeDim::of(64);
  c.tokens = ShapeDim::of(6);
  EXPECT_FALSE(infer(op_info(OpId::Rope), c).ok());
}

}  // namespace
