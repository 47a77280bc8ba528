// Pass insert_quantize: an explicit quantize op in front of every matmul
// whose input is f32 and whose kernels read act_q8 (see passes.h).
#include <map>

#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

void insert_quantize(ir::Module& m, Isa target) {
  ir::Function& f = m.forward;
  for (auto* block : detail::blocks(f)) {
    std::vector<ir::Op> out;
    std::map<ir::ValueId, ir::ValueId> quantized;  // f32 value -> its act_q8 twin in this block
    for (auto& op : *block) {
      if (op.kind == ops::OpId::MatMul && !op.operands.empty()) {
        ir::ValueId x = op.operands[0];
        const ir::Type& t = f.type(x);
        // Float-weight kernels read the f32 rows themselves (the type rule of
        // target/weight_formats.h matmul_input_dtype).
        if (t.known && t.dtype == ops::DType::F32 &&
            detail::matmul_input_dtype(m, op, target) == ops::DType::ActQ8) {
          auto it = quantized.find(x);
          if (it == quantized.end()) {
            ir::Op q;
            q.kind = ops::OpId::Quantize;
            q.operands = {x};
            q.result = f.new_value(ir::Type::of(ops::DType::ActQ8, t.shape));
            q.line = op.line;
            it = quantized.emplace(x, q.result).first;
            out.push_back(std::move(q));
          }
          op.operands[0] = it->second;
        }
      }
      out.push_back(std::move(op));
    }
    *block = std::move(out);
  }
}

}  // namespace lumen::passes
