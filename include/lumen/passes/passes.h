// The passes of lumenc, in pipeline order, each a free function in its own
// file under src/passes/, plus the registry `lumenc dump-ir --after=PASS`
// uses. Every pass keeps the IR valid: ir::verify() runs after each one.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "lumen/ir/ir.h"
#include "lumen/program/program.h"
#include "lumen/target/isa.h"

namespace lumen::passes {

/// Fills every open result type from the operands' types and the op's rule
/// (matmul f32[N, K] x [M, K] -> f32[N, M], ...), the loop's argument and
/// result types from its initial values, and the function's result type.
/// Throws ir::IrError naming the op on a dtype or shape mismatch, including
/// a result type that was given but disagrees.
void infer_shapes(ir::Module& m);

/// Folds element-wise adds into the matmul that produces one of their
/// operands: `add(matmul, @b)` -> epilogue bias, `add(matmul, %r)` or
/// `add(%r, matmul)` -> residual, both -> bias_residual. Only when the matmul
/// result has no other use and %r is defined before the matmul.
/// Preconditions: infer_shapes.
void fuse_epilogues(ir::Module& m);

/// Turns `mul(silu(matmul(%h, @gate)), matmul(%h, @up))` into one matmul
/// over {@gate, @up} with the silu_mul epilogue, and any other
/// `mul(silu(%a), %b)` into one silu_mul op. Intermediate values must have no
/// other use. Preconditions: infer_shapes, fuse_epilogues (so that Q/K/V keep
/// their bias epilogues apart from gate/up). Gate and up fuse only when
/// packed in one format in every layer (target/weight_formats.h).
void fuse_gate_up(ir::Module& m, Isa target);

/// Merges the matmuls of one block that read the same input with the same
/// epilogue (none or bias) and packed weight format in every layer
/// (target/weight_formats.h) - Q, K and V - into one matmul
/// over the concatenated weight rows (biases concatenated alike); each
/// original result becomes a `view` of the columns it occupies.
/// Preconditions: fuse_epilogues, fuse_gate_up.
void fuse_qkv(ir::Module& m, Isa target);

/// Makes the activation quantization of the matmul kernels explicit: each
/// f32 input of a matmul whose kernels read act_q8 gets a `quantize` op (one
/// per value and block) and the matmul reads its act_q8 result; a matmul whose
/// weights are all in float formats on `target` keeps its f32 input
/// (target/weight_formats.h matmul_input_dtype). Preconditions: the fusions above.
void insert_quantize(ir::Module& m, Isa target);

/// `quantize(rms_norm(%x, @w))` -> `rms_norm_quant(%x, @w)` when the norm has
/// no other use. Preconditions: insert_quantize.
void fuse_norm_quant(ir::Module& m);

/// Annotates every matmul with its kernels for `target` and its thread split:
/// one set of kernels per packed format of its layers' weights
/// (target/weight_formats.h): decode_kernel (N == 1), batch_kernel (N = 2..8),
/// prefill_kernel (larger N), rows_per_task, tokens_per_task (kernels as
/// to_string(program::KernelId)). An input that is not the formats' input
/// dtype (matmul_input_dtype: act_q8, or f32 for float weights), or a weight
/// not bound to its types, is an InternalError. Preconditions: all fusions
/// (the epilogue picks the kernel), insert_quantize.
void schedule(ir::Module& m, Isa target);
/// The prefill kernel schedule gives a matmul of epilogue `e` whose weights
/// are packed in `format` on `target`: the Q8_0 GEMM of the register tile
/// that fits `target` for Q8_0 and the formats that convert to it exactly
/// (Q4_0, Q5_0: the runtime converts each task's rows); for the k-quants
/// their batch kernel (which walks any number of tokens in its token tiles).
program::KernelId prefill_kernel(Isa target, program::Epilogue e, ops::DType format = ops::DType::Q8_0);

/// Places every activation in one arena: values that share storage (views,
/// rope in place, a residual matmul writing over its residual, loop-carried
/// values) form one buffer; buffers get 64-byte aligned symbolic offsets,
/// by liveness, such that no two buffers live at the same time overlap.
/// Sets Module::memory. Throws ir::IrError, with the DSL line of the op at
/// fault, when a value that must be computed in place cannot be: rope's input
/// read after the rotation, a loop's initial value read after the loop
/// starts, a loop yielding a value not computed in place of the carried one.
/// Preconditions: schedule (the op list is final).
void plan_memory(ir::Module& m);

/// The scheduled, memory-planned IR as a program::Program (weights in ggml
/// order, views as column ranges, one op list per loop iteration). Its
/// input comes from the pipeline, so anything it cannot express (no memory
/// plan, an unscheduled matmul) is an InternalError. A module without a
/// param for "<arch>.context_length" gets a required hparam for that key
/// (docs/runtime.md). Preconditions: plan_memory.
program::Program lower_to_program(const ir::Module& m);

// ------------------------------------------------------------ the pipeline
struct PassInfo {
  const char* name;                // "fuse_qkv", as --after takes it
  void (*run)(ir::Module&, Isa target);  // the target ISA matters to schedule only
  const char* summary;             // one line for --help
};
// The IR-to-IR passes in pipeline order (lower_to_program follows them).
std::span<const PassInfo> pipeline();
const PassInfo* find_pass(std::string_view name);

// Runs the pipeline for `target`, verifying the IR after every pass; `after_each` (if set)
// sees the IR after each pass. `stop_after` (a pass name) ends the pipeline
// early. A pass whose output does not verify is a bug: InternalError naming it.
void run_pipeline(ir::Module& m, Isa target, const std::function<void(const PassInfo&, const ir::Module&)>& after_each = {},
                  std::string_view stop_after = {});

// The arena size of a planned module for N tokens, with params taken from
// `values` (by name), else their numeric defaults or derived expressions.
// nullopt (and `missing` set to the first param without a value) when a
// param the size needs has no value.
std::optional<int64_t> arena_bytes(const ir::Module& m, const std::map<std::string, double>& values,
                                   int64_t n_tokens, std::string* missing = nullptr);

}  // namespace lumen::passes
