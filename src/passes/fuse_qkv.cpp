// Pass fuse_qkv: matmuls sharing an input -> one matmul over concatenated
// weight rows plus column views of its result (see passes.h).
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Epilogue;
using ir::Op;
using ops::OpId;

bool fusable(const Op& op) {
  return op.kind == OpId::MatMul && op.operands.size() == 1 && op.residual == ir::kNoValue &&
         (op.epilogue == Epilogue::None || op.epilogue == Epilogue::Bias);
}

// Whether ops a and b can share one matmul: one kernel reads both weights.
bool compatible(const ir::Module& m, const Op& a, const Op& b, Isa target) {
  if (a.operands != b.operands || a.epilogue != b.epilogue) return false;
  const ir::Weight* wa = m.find_weight(a.weights.at(0).name);
  const ir::Weight* wb = m.find_weight(b.weights.at(0).name);
  return wa && wb && detail::same_packed_formats(*wa, *wb, target);
}

void fuse_block(ir::Module& m, std::vector<Op>& block, Isa target) {
  ir::Function& f = m.forward;
  std::vector<Op> out;
  std::vector<bool> taken(block.size(), false);
  for (size_t i = 0; i < block.size(); ++i) {
    if (taken[i]) continue;
    if (!fusable(block[i])) {
      out.push_back(std::move(block[i]));
      continue;
    }
    std::vector<size_t> group = {i};
    for (size_t j = i + 1; j < block.size(); ++j)
      if (!taken[j] && fusable(block[j]) && compatible(m, block[i], block[j], target)) group.push_back(j);
    if (group.size() == 1) {
      out.push_back(std::move(block[i]));
      continue;
    }
    // The fused matmul sits where the first member was: its input and its
    // weights are available there; the views follow it immediately.
    Op fused;
    fused.kind = OpId::MatMul;
    fused.operands = block[i].operands;
    fused.epilogue = block[i].epilogue;
    fused.line = block[i].line;
    const ir::Type& x = f.type(fused.operands[0]);
    std::vector<ir::Dim> offsets;
    ir::Dim rows = ir::Dim::constant(0);
    for (size_t j : group) {
      taken[j] = true;
      const ir::Weight* w = m.find_weight(block[j].weights.at(0).name);
      // The verifier checked that matmul weights exist and are matrices.
      LUMEN_ASSERT(w && w->shape.size() == 2, "fuse_qkv: " + detail::describe(block[j]) + ": bad weight");
      for (size_t k = 0; k < block[j].weights.size(); ++k) {
        fused.weights.push_back(block[j].weights[k]);
        if (k < block[j].biases.size()) fused.biases.push_back(block[j].biases[k]);
      }
      offsets.push_back(rows);
      rows = rows + w->shape[0];
    }
    fused.result = f.new_value(ir::Type::of(ir::DType::F32, {x.shape.at(0), rows}));
    ir::ValueId whole = fused.result;
    out.push_back(std::move(fused));
    for (size_t g = 0; g < group.size(); ++g) {
      const Op& member = block[group[g]];
      Op view;
      view.kind = OpId::View;
      view.operands = {whole};
      view.result = member.result;  // keeps its value: uses need no rewrite
      view.line = member.line;
      const ir::Type& t = f.type(member.result);
      view.set_attr("offset", ir::Attr::of_dim(offsets[g]));
      view.set_attr("cols", ir::Attr::of_dim(t.shape.at(1)));
      out.push_back(std::move(view));
    }
  }
  block = std::move(out);
}

}  // namespace

void fuse_qkv(ir::Module& m, Isa target) {
  for (auto* block : detail::blocks(m.forward)) fuse_block(m, *block, target);
}

}  // namespace lumen::passes
