// The pass registry and pipeline: every IR-to-IR pass in order, each
// followed by the verifier. Ordering constraints are noted at each entry.
#include <array>

#include "lumen/common/internal_error.h"
#include "lumen/ir/verifier.h"
#include "lumen/passes/passes.h"

namespace lumen::passes {

namespace {

// A pass whose result is the same for every target.
template <void (*Pass)(ir::Module&)>
void for_any_target(ir::Module& m, Isa) {
  Pass(m);
}

constexpr std::array<PassInfo, 8> kPipeline = {{
    {"infer_shapes", for_any_target<infer_shapes>, "fill in dtypes and symbolic shapes; report mismatches"},
    // Before fuse_qkv: Q/K/V keep their bias epilogue through the merge.
    {"fuse_epilogues", for_any_target<fuse_epilogues>, "fold bias and residual adds into matmul epilogues"},
    // Before fuse_qkv: gate and up also share an input but belong together.
    {"fuse_gate_up", fuse_gate_up, "gate and up matmuls plus silu*mul -> one silu_mul matmul"},
    {"fuse_qkv", fuse_qkv, "matmuls sharing an input (Q, K, V) -> one matmul plus column views"},
    // After all matmul fusions: one quantize per fused input.
    {"insert_quantize", insert_quantize, "explicit act_q8 quantization of the f32 input of every matmul whose kernels read act_q8"},
    {"fuse_norm_quant", for_any_target<fuse_norm_quant>, "rms_norm followed by quantize -> rms_norm_quant"},
    {"schedule", schedule, "the target's decode/batch/prefill kernels and thread split of every matmul"},
    // Last: it fixes storage for the final op list.
    {"plan_memory", for_any_target<plan_memory>, "one arena, liveness-based symbolic offsets"},
}};

}  // namespace

std::span<const PassInfo> pipeline() { return kPipeline; }

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : kPipeline)
    if (name == p.name) return &p;
  return nullptr;
}

void run_pipeline(ir::Module& m, Isa target, const std::function<void(const PassInfo&, const ir::Module&)>& after_each,
                  std::string_view stop_after) {
  for (const auto& pass : kPipeline) {
    pass.run(m, target);
    // Every pass maps verified IR to verified IR: a failure here is a bug in the pass.
    auto problems = ir::verify(m);
    LUMEN_ASSERT(problems.empty(), std::string("the IR after ") + pass.name + " does not verify: " + problems.front());
    if (after_each) after_each(pass, m);
    if (stop_after == pass.name) return;
  }
}

std::optional<int64_t> arena_bytes(const ir::Module& m, const std::map<std::string, double>& values, int64_t n_tokens,
                                   std::string* missing) {
  if (!m.memory) return std::nullopt;
  std::map<std::string, int64_t> resolved;
  std::function<std::optional<int64_t>(const std::string&)> lookup = [&](const std::string& name) -> std::optional<int64_t> {
    if (auto it = resolved.find(name); it != resolved.end()) return it->second;
    std::optional<int64_t> v;
    if (auto it = values.find(name); it != values.end()) {
      v = static_cast<int64_t>(it->second);
    } else if (const ir::Param* p = m.find_param(name)) {
      if (p->default_value) v = static_cast<int64_t>(*p->default_value);
      else if (p->default_expr) v = p->default_expr->eval(lookup, n_tokens);
      else if (p->derived) v = p->derived->eval(lookup, n_tokens);
    }
    if (!v) {
      if (missing && missing->empty()) *missing = name;
      return std::nullopt;
    }
    resolved[name] = *v;
    return v;
  };
  return m.memory->arena_bytes.eval(lookup, n_tokens);
}

}  // namespace lumen::passes
