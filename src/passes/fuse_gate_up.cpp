// Pass fuse_gate_up: silu(gate)·up into one gate/up matmul with the silu_mul
// epilogue, or into one silu_mul op (see passes.h).
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Epilogue;
using ir::Op;
using ops::OpId;

// The op of `block` defining `v` if it has kind `kind` and `v` has exactly
// one use; else -1.
int single_use_def(const ir::Function& f, const std::vector<Op>& block, ir::ValueId v, OpId kind) {
  int at = detail::defining_op(block, v);
  if (at < 0 || block[static_cast<size_t>(at)].kind != kind || use_count(f, v) != 1) return -1;
  return at;
}

bool plain_matmul(const Op& op) {
  return op.kind == OpId::MatMul && op.weights.size() == 1 && op.epilogue == Epilogue::None;
}

// Rewrites the mul at `mul_at`; returns the indices of ops that became dead.
std::vector<int> fuse(ir::Module& m, std::vector<Op>& block, int mul_at, Isa target) {
  ir::Function& f = m.forward;
  Op& mul = block[static_cast<size_t>(mul_at)];
  if (mul.operands.size() != 2 || !mul.weights.empty()) return {};
  // silu may be on either side: mul(silu(g), u) or mul(u, silu(g)).
  for (int side : {0, 1}) {
    int silu_at = single_use_def(f, block, mul.operands[static_cast<size_t>(side)], OpId::Silu);
    if (silu_at < 0) continue;
    ir::ValueId gate = block[static_cast<size_t>(silu_at)].operands.at(0);
    ir::ValueId up = mul.operands[static_cast<size_t>(1 - side)];
    int gate_at = single_use_def(f, block, gate, OpId::MatMul);
    int up_at = single_use_def(f, block, up, OpId::MatMul);
    if (gate_at >= 0 && up_at >= 0) {
      const Op& g = block[static_cast<size_t>(gate_at)];
      const Op& u = block[static_cast<size_t>(up_at)];
      const ir::Weight* gw = m.find_weight(g.weights.at(0).name);
      const ir::Weight* uw = m.find_weight(u.weights.at(0).name);
      if (plain_matmul(g) && plain_matmul(u) && g.operands == u.operands && gw && uw && gw->shape == uw->shape &&
          detail::same_packed_formats(*gw, *uw, target)) {
        // The fused matmul replaces the mul (all its inputs are defined by then).
        Op fused;
        fused.kind = OpId::MatMul;
        fused.result = mul.result;
        fused.operands = g.operands;
        fused.weights = {g.weights[0], u.weights[0]};
        fused.epilogue = Epilogue::SiluMul;
        fused.line = mul.line;
        mul = std::move(fused);
        return {silu_at, gate_at, up_at};
      }
    }
    // No matmul pair: silu(a) * b as one op.
    Op fused;
    fused.kind = OpId::SiluMul;
    fused.result = mul.result;
    fused.operands = {gate, up};
    fused.line = mul.line;
    mul = std::move(fused);
    return {silu_at};
  }
  return {};
}

}  // namespace

void fuse_gate_up(ir::Module& m, Isa target) {
  for (auto* block : detail::blocks(m.forward)) {
    std::vector<bool> dead(block->size(), false);
    for (int i = 0; i < static_cast<int>(block->size()); ++i) {
      if ((*block)[static_cast<size_t>(i)].kind != OpId::Mul || dead[static_cast<size_t>(i)]) continue;
      for (int d : fuse(m, *block, i, target)) dead[static_cast<size_t>(d)] = true;
    }
    std::vector<Op> kept;
    for (size_t i = 0; i < block->size(); ++i)
      if (!dead[i]) kept.push_back(std::move((*block)[i]));
    *block = std::move(kept);
  }
}

}  // namespace lumen::passes
