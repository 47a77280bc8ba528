// Small helpers shared by the passes (internal to src/passes).
#pragma once

#include <string>
#include <vector>

#include "lumen/common/internal_error.h"
#include "lumen/ir/ir.h"

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

}  // namespace lumen::passes::detail
