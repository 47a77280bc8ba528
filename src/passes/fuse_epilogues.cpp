// Pass fuse_epilogues: bias and residual adds into matmul epilogues (see passes.h).
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Epilogue;
using ir::Op;
using ops::OpId;

// Whether `v` is visible at op index `at` of `block`: defined by an earlier
// op of the block, or outside it (function argument, loop argument, earlier block).
bool defined_before(const std::vector<Op>& block, ir::ValueId v, int at) {
  int def = detail::defining_op(block, v);
  return def < at;  // -1 (outside the block) counts as before
}

// Tries to fold `add` (at index `add_at`) into a matmul producing one of its
// operands. Returns true when it did (the add is then erased by the caller).
bool fold_add(ir::Function& f, std::vector<Op>& block, int add_at) {
  Op& add = block[static_cast<size_t>(add_at)];
  if (add.operands.empty()) return false;
  // Bias: add(%mm, @b).
  if (add.weights.size() == 1 && add.operands.size() == 1) {
    int mm_at = detail::defining_op(block, add.operands[0]);
    if (mm_at < 0) return false;
    Op& mm = block[static_cast<size_t>(mm_at)];
    if (mm.kind != OpId::MatMul || mm.weights.size() != 1 || use_count(f, mm.result) != 1) return false;
    if (mm.epilogue == Epilogue::None) mm.epilogue = Epilogue::Bias;
    else if (mm.epilogue == Epilogue::Residual) mm.epilogue = Epilogue::BiasResidual;
    else return false;
    mm.biases = {add.weights[0]};
    replace_uses(f, add.result, mm.result);
    return true;
  }
  // Residual: add(%mm, %r) or add(%r, %mm); prefer the later-defined matmul.
  if (add.operands.size() != 2 || !add.weights.empty()) return false;
  for (int side : {1, 0}) {
    ir::ValueId product = add.operands[static_cast<size_t>(side)];
    ir::ValueId residual = add.operands[static_cast<size_t>(1 - side)];
    int mm_at = detail::defining_op(block, product);
    if (mm_at < 0) continue;
    Op& mm = block[static_cast<size_t>(mm_at)];
    if (mm.kind != OpId::MatMul || use_count(f, mm.result) != 1 || !defined_before(block, residual, mm_at) ||
        residual == product)
      continue;
    if (mm.epilogue == Epilogue::None) mm.epilogue = Epilogue::Residual;
    else if (mm.epilogue == Epilogue::Bias) mm.epilogue = Epilogue::BiasResidual;
    else continue;
    mm.residual = residual;
    replace_uses(f, add.result, mm.result);
    return true;
  }
  return false;
}

}  // namespace

void fuse_epilogues(ir::Module& m) {
  for (auto* block : detail::blocks(m.forward)) {
    for (int i = 0; i < static_cast<int>(block->size()); ++i) {
      if ((*block)[static_cast<size_t>(i)].kind != OpId::Add) continue;
      if (fold_add(m.forward, *block, i)) {
        block->erase(block->begin() + i);
        --i;
      }
    }
  }
}

}  // namespace lumen::passes
