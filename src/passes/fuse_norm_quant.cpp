// Pass fuse_norm_quant: quantize(rms_norm(x)) -> rms_norm_quant(x) (see passes.h).
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

void fuse_norm_quant(ir::Module& m) {
  ir::Function& f = m.forward;
  for (auto* block : detail::blocks(f)) {
    std::vector<bool> dead(block->size(), false);
    for (size_t i = 0; i < block->size(); ++i) {
      ir::Op& quant = (*block)[i];
      if (quant.kind != ops::OpId::Quantize || quant.operands.size() != 1) continue;
      int norm_at = detail::defining_op(*block, quant.operands[0]);
      if (norm_at < 0) continue;
      ir::Op& norm = (*block)[static_cast<size_t>(norm_at)];
      if (norm.kind != ops::OpId::RmsNorm || use_count(f, norm.result) != 1) continue;
      // The fused op takes the norm's place and the quantize's result.
      norm.kind = ops::OpId::RmsNormQuant;
      norm.result = quant.result;
      dead[i] = true;
    }
    std::vector<ir::Op> kept;
    for (size_t i = 0; i < block->size(); ++i)
      if (!dead[i]) kept.push_back(std::move((*block)[i]));
    *block = std::move(kept);
  }
}

}  // namespace lumen::passes
