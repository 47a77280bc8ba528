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

}  // namespace lumen::passes::detail
