// Small helpers shared by the passes (internal to src/passes).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "lumen/common/internal_error.h"
#include "lumen/ir/ir.h"
#include "lumen/target/isa.h"
#include "lumen/target/weight_formats.h"

namespace lumen::passes::detail {

// The function's straight-line blocks: pre, the loop body (if any), post.
inline std::vector<std::vector<ir::Op>*> blocks(ir::Function& f) {
  std::vector<std::vector<ir::Op>*> out = {&f.pre};
  if (f.loop) out.push_back(&f.loop->body);
  out.push_back(&f.post);
  return out;
}

// Index of the op of `block` that defines `v`, or -1.
inline int defining_op(const std::vector<ir::Op>& block, ir::ValueId v) {
  for (size_t i = 0; i < block.size(); ++i)
    if (block[i].result == v) return static_cast<int>(i);
  return -1;
}

// "matmul (line 12)": how errors name an op.
inline std::string describe(const ir::Op& op) {
  std::string s = ir::to_string(op.kind);
  if (op.line) s += " (line " + std::to_string(op.line) + ")";
  return s;
}

// Whether weights `a` and `b` are packed in one format in every layer
// (target/weight_formats.h), so that one kernel reads them side by side.
inline bool same_packed_formats(const ir::Weight& a, const ir::Weight& b, Isa target) {
  LUMEN_ASSERT(!a.types.empty() && !b.types.empty(), "@" + a.name + " or @" + b.name + " is not bound to its types");
  const size_t layers = std::max(a.types.size(), b.types.size());
  for (size_t l = 0; l < layers; ++l)
    if (packed_format(a.type_of_layer(static_cast<int64_t>(l)), target) !=
        packed_format(b.type_of_layer(static_cast<int64_t>(l)), target))
      return false;
  return true;
}

// The activations matmul `op` reads (target/weight_formats.h
// matmul_input_dtype): f32 when every layer's weights are packed in a float
// format, else act_q8, which its float weights then run under as Q8_0; act_q8
// for weights not bound to their types.
inline ops::DType matmul_input_dtype(const ir::Module& m, const ir::Op& op, Isa target) {
  for (const auto& w : op.weights) {
    const ir::Weight* decl = m.find_weight(w.name);
    if (decl == nullptr || decl->types.empty()) return ops::DType::ActQ8;
    for (const ops::DType t : decl->types)
      if (::lumen::matmul_input_dtype(packed_format(t, target)) != ops::DType::F32) return ops::DType::ActQ8;
  }
  return op.weights.empty() ? ops::DType::ActQ8 : ops::DType::F32;
}

}  // namespace lumen::passes::detail
