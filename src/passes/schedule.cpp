// Pass schedule: kernel variants and thread split for every matmul (see passes.h).
#include <algorithm>
#include <string>
#include <vector>

#include "lumen/passes/passes.h"
#include "lumen/target/kernel_registers.h"
#include "lumen/target/packed_kquant.h"
#include "lumen/target/packed_q8_0.h"
#include "lumen/target/weight_formats.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {


// Prefill micro-kernel register tile, at most: 48 weight rows (three packed
// row groups, kernel_abi.h pack_row_group) by 4 tokens. Measured against
// m16n4, m32n5 and m64n3 (docs/performance.md): three groups share each
// broadcast activation dword, 12 accumulators fill the AVX-512 register file.
constexpr int64_t kTileM = 48;
constexpr int64_t kTileN = 4;
// The k-quant GEMM's register tile, at most (measured: docs/kernels.md
// "K-quant kernels"), and the fewest tokens a tile with its fp32 accumulators
// in registers must hold (else they go to stack slots).
constexpr int64_t kKQuantTileM = 48, kKQuantTileN = 8, kKQuantMinTokens = 4;
// Work items handed to the thread pool: 64 output rows (4 row groups) per
// task for decode; for prefill, whole register tiles (the runtime rounds 64
// up to 96 rows for m48n4) by 256 tokens. Every token task streams its rows'
// weights from memory again: 256 tokens per task made pp128 and pp512 7-12%
// faster than 64 at 1 and 2 threads (docs/performance.md).
constexpr int64_t kRowsPerTask = 64;
constexpr int64_t kTokensPerTask = 256;

// The packed formats of `op`'s weights (target/weight_formats.h), in
// first-layer order: one set of kernels each. The weights of one layer
// (fused side by side) must share their format: one kernel reads them all.
std::vector<ops::DType> packed_formats(const ir::Module& m, const ir::Op& op, Isa target, ops::DType input) {
  std::vector<const ir::Weight*> decls;
  size_t layers = 1;
  for (const auto& w : op.weights) {
    const ir::Weight* decl = m.find_weight(w.name);
    LUMEN_ASSERT(decl && !decl->types.empty(),
                 "schedule: " + detail::describe(op) + ": @" + w.name + " is not a weight bound to its types");
    decls.push_back(decl);
    if (w.per_layer) layers = std::max(layers, decl->types.size());
  }
  std::vector<ops::DType> formats;
  for (size_t layer = 0; layer < layers; ++layer) {
    const ops::DType first = packed_format(decls[0]->type_of_layer(static_cast<int64_t>(layer)), target, input);
    for (const ir::Weight* decl : decls)
      if (packed_format(decl->type_of_layer(static_cast<int64_t>(layer)), target, input) != first)
        throw ir::IrError("matmul: @" + decls[0]->name + " and @" + decl->name + " are packed in different formats in layer " +
                              std::to_string(layer) + "; a fused matmul reads one format",
                          op.line);
    if (std::find(formats.begin(), formats.end(), first) == formats.end()) formats.push_back(first);
  }
  return formats;
}

// The float formats' GEMM (the packed weights as they are): the tile of the
// most groups x tokens within kFloatTileM x kFloatTileN that fits the target,
// more tokens on a tie (m48n8 on AVX-512, m16n6 on AVX2; docs/kernels.md).
constexpr int64_t kFloatTileM = 48, kFloatTileN = 8;
program::KernelId float_prefill_kernel(Isa target, program::Epilogue e, ops::DType format) {
  const int64_t mult = e == program::Epilogue::SiluMul ? 2 : 1;
  int64_t best_groups = 1, best_tokens = 1;
  for (int64_t groups = 1; groups <= kFloatTileM / kPackRows; ++groups) {
    for (int64_t tokens = 1; tokens <= kFloatTileN; ++tokens) {
      if (!float_tile_fits(target, groups * mult, tokens)) continue;
      const int64_t reuse = groups * tokens, best = best_groups * best_tokens;
      if (reuse > best || (reuse == best && tokens > best_tokens)) {
        best_groups = groups;
        best_tokens = tokens;
      }
    }
  }
  return program::KernelId::gemm(e, best_groups * kPackRows, best_tokens, format);
}

}  // namespace

// Within kTileM x kTileN, the tile of the most groups x tokens (the most
// register reuse) that fits the target's registers, more tokens on a tie.
// AVX2 gets m16n4 with its fp32 accumulators in memory, whose weights serve
// four tokens, not m32n2; gate and up (SiluMul) take two groups' registers
// each: m32n3 on AVX-512.
program::KernelId prefill_kernel(Isa target, program::Epilogue e, ops::DType format) {
  const int64_t mult = e == program::Epilogue::SiluMul ? 2 : 1;
  if (is_float_format(format)) return float_prefill_kernel(target, e, format);
  // The k-quants, Q4_1 and Q5_1 run the k-quant GEMM on each task's rows
  // expanded to u8 quants and fp32 factors (packed_kquant.h): the tile of the most groups x tokens
  // within kKQuantTileM x kKQuantTileN, more tokens on a tie, fp32
  // accumulators in registers where the ISA has room for a tile of
  // kKQuantMinTokens tokens, and always for the types with two int
  // accumulators (Q6_K, Q3_K, Q2_K: 2-4 FMAs per row, token and 32-block,
  // each a load-FMA-store chain in a stack slot; docs/kernels.md).
  if (has_expanded_kquant(format)) {
    const int64_t int_accs = kquant_int_accumulators(format);
    const bool in_memory = int_accs == 1 && !kquant_tile_fits(target, mult, kKQuantMinTokens, int_accs, false);
    int64_t best_groups = 1, best_tokens = 1;
    for (int64_t groups = 1; groups <= kKQuantTileM / kPackRows; ++groups) {
      for (int64_t tokens = 1; tokens <= kKQuantTileN; ++tokens) {
        if (!kquant_tile_fits(target, groups * mult, tokens, int_accs, in_memory)) continue;
        const int64_t reuse = groups * tokens, best = best_groups * best_tokens;
        if (reuse > best || (reuse == best && tokens > best_tokens)) {
          best_groups = groups;
          best_tokens = tokens;
        }
      }
    }
    return program::KernelId::gemm(e, best_groups * kPackRows, best_tokens, format);
  }
  // Q4_0, Q5_0 and IQ4_NL run the Q8_0 GEMM on each task's rows converted to
  // Q8_0 (exactly: each row keeps the GEMV's bits); IQ4_XS, with neither
  // form, its batch kernel.
  if (format != ops::DType::Q8_0 && !converts_exactly_to_q8_0(format)) return program::KernelId::batch(e, format);
  int64_t best_groups = 1, best_tokens = 1;
  for (int64_t groups = 1; groups <= kTileM / kPackRows; ++groups) {
    for (int64_t tokens = 1; tokens <= kTileN; ++tokens) {
      if (!gemm_tile_fits(target, groups * mult, tokens)) continue;
      const int64_t reuse = groups * tokens, best = best_groups * best_tokens;
      if (reuse > best || (reuse == best && tokens > best_tokens)) {
        best_groups = groups;
        best_tokens = tokens;
      }
    }
  }
  return program::KernelId::gemm(e, best_groups * kPackRows, best_tokens);
}

void schedule(ir::Module& m, Isa target) {
  for_each_op(m.forward, [&m, target](ir::Op& op) {
    if (op.kind != ops::OpId::MatMul) return;
    program::Epilogue e = op.epilogue;
    std::string formats, decode, batch, prefill;
    // insert_quantize, earlier in the pipeline, gave every matmul its formats' input.
    LUMEN_ASSERT(!op.operands.empty(), "schedule: " + detail::describe(op) + ": no input");
    const ops::DType input = m.forward.type(op.operands[0]).dtype;
    for (const ops::DType format : packed_formats(m, op, target, input)) {
      LUMEN_ASSERT(matmul_input_dtype(format) == input, "schedule: " + detail::describe(op) + ": the input must be " +
                                                            ops::to_string(matmul_input_dtype(format)) +
                                                            " (run insert_quantize first)");
      const char* sep = formats.empty() ? "" : ",";
      formats.append(sep).append(ops::id_name(format));
      decode.append(sep).append(to_string(program::KernelId::gemv(e, format)));
      batch.append(sep).append(to_string(program::KernelId::batch(e, format)));
      prefill.append(sep).append(to_string(prefill_kernel(target, e, format)));
    }
    // The program text's convention: `formats` only when not just Q8_0 (program/serialize.cpp).
    if (formats != ops::id_name(ops::DType::Q8_0)) op.set_attr("formats", ir::Attr::string(formats));
    op.set_attr("decode_kernel", ir::Attr::string(decode));
    op.set_attr("batch_kernel", ir::Attr::string(batch));
    op.set_attr("prefill_kernel", ir::Attr::string(prefill));
    op.set_attr("rows_per_task", ir::Attr::integer(kRowsPerTask));
    op.set_attr("tokens_per_task", ir::Attr::integer(kTokensPerTask));
  });
}

}  // namespace lumen::passes
