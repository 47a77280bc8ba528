// The table of operators: for each op of the list (ops/op_list.h) its
// operands (count and role), its attributes (name, kind, required or
// optional), and its type rule (the check and the result type). Sema, the IR
// verifier, shape inference and the runtime's binding check all ask this
// table; adding an op is a row of the list and its entry here (plus its
// kernel).
//
// The rule sees operand types with symbolic dims (ops/sym_dim.h) and answers
// with the result type or with what is wrong and where (an operand or an
// attribute), so each caller can place its message: a caret under the DSL
// argument, an IR op, or a runtime op of the program. The runtime passes
// constant dims (the values of one binding).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/ops/op_list.h"
#include "lumen/ops/sym_dim.h"

namespace lumen::ops {

// One dim of a tensor type: the expression (what a result type carries on)
// and its canonical form (what equality compares).
struct ShapeDim {
  Dim dim;
  SymDim sym;
  std::string text() const { return dim.str(); }
  static ShapeDim of(int64_t value) { return {Dim::constant(value), SymDim::constant(value)}; }
};

struct TensorType {
  DType dtype = DType::F32;
  std::vector<ShapeDim> shape;
  std::string str() const;  // "f32[N, n_embd]"
};

enum class Role : uint8_t {
  Activation,  // a computed value (or the token ids)
  Weight,      // a weight of the model
  Either,      // either; add and mul broadcast a weight row over an activation
};

struct OperandSpec {
  const char* name;
  Role role;
  bool variadic = false;  // the last operand: one or more (a fused matmul's weights)
  bool optional = false;  // the last operand: zero or one (rope's frequency factors)
};

enum class AttrKind : uint8_t {
  Size,    // an integer size expression over the params (heads, dim)
  Scalar,  // a float: a param or a number (eps, base)
  Choice,  // one of `choices` (rope's mode)
};

struct AttrSpec {
  const char* name;
  AttrKind kind;
  bool required;
  std::vector<std::string> choices = {};  // Choice
  const char* default_value = nullptr;    // documentation: what an absent optional attribute means
  bool internal = false;                  // set by passes, never written in the DSL
};

// What a type rule sees. Operands in the order of the op's OperandSpecs
// (a variadic last spec takes the rest). Size attributes are given as dims;
// an absent optional one is absent from `sizes`.
struct OpCall {
  std::vector<TensorType> operands;
  std::vector<bool> is_weight;  // per operand
  std::map<std::string, ShapeDim> sizes;
  std::map<std::string, std::string> choices;
  // matmul only: the fused epilogue, its biases and its residual.
  Epilogue epilogue = Epilogue::None;
  std::vector<TensorType> biases;
  std::optional<TensorType> residual;
  ShapeDim tokens = {Dim::tokens(), SymDim::tokens()};  // N: the runtime passes the batch size
  const DimFacts* facts = nullptr;   // required
};

// A rule's answer: the result type, or what is wrong. `operand` (index into
// OpCall::operands) or `attr` says where, when one of them is at fault.
struct Verdict {
  std::optional<TensorType> result;
  std::string message;
  int operand = -1;
  std::string attr;
  bool ok() const { return result.has_value(); }
};

struct OpInfo {
  OpId id;
  std::vector<OperandSpec> operands;
  std::vector<AttrSpec> attrs;
  Verdict (*rule)(const OpCall&);
  bool per_layer_state;  // keeps state per layer (attention's KV cache): only in the layer loop body (one state per op)
  const char* summary;
  // From the list (ops/op_list.h):
  const char* name = nullptr;  // the IR name, and the DSL builtin's name when `in_dsl`
  bool in_dsl = false;         // callable from the DSL (the others are made by passes)
};

// One entry per op of the list, indexed by OpId.
const std::vector<OpInfo>& op_table();
const OpInfo& op_info(OpId id);
const OpInfo* find_op(std::string_view name);
const AttrSpec* find_attr(const OpInfo& op, std::string_view name);

// Checks the operand count against the specs, then runs the rule.
Verdict infer(const OpInfo& op, const OpCall& call);

// Whether two types are equal under the facts.
bool same_type(const TensorType& a, const TensorType& b, const DimFacts& facts);

}  // namespace lumen::ops
