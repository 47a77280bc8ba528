// The per-ISA register tile the generator really uses for a kernel.
#include <algorithm>

#include "lumen/codegen/kernel_support.h"
#include "lumen/common/internal_error.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen::codegen {

KernelShape kernel_shape(Isa isa, const program::KernelId& kernel) {
  std::string why;
  LUMEN_ASSERT(program::is_valid(kernel, &why), "kernel " + program::to_string(kernel) + ": " + why);
  // Accumulators (one int + one float vector per packed group, vector half and
  // token) must fit beside the temporaries: see generate_matmul_kernel.
  const int64_t halves = is_ymm_isa(isa) ? 2 : 1;
  const int64_t max_acc = max_accumulators(isa);
  const int64_t mult = kernel.epilogue == program::Epilogue::SiluMul ? 2 : 1;
  // One pointer register per packed group and per token, 12 in all.
  constexpr int64_t kMaxPackedGroups = 4;
  constexpr int64_t kMaxTokens = 8;
  constexpr int64_t kGemvPackedGroups = 4;
  KernelShape shape;
  if (kernel.kind == program::KernelKind::Gemv) {
    shape.tokens = 1;
    shape.groups = std::max<int64_t>(1, std::min(kGemvPackedGroups, max_acc / halves) / mult);
    // Four blocks ahead on every weight stream: end to end decode at 1 and 2
    // threads gained 4-5% over no software prefetch (docs/kernels.md).
    shape.prefetch_bytes = 4 * kPackedBlockBytes;
    return shape;
  }
  if (kernel.kind == program::KernelKind::Batch) {
    // The GEMV's streams and prefetch with every token of the batch (up to
    // 8) on each weight block: the fp32 accumulators go to memory so that the
    // int ones fill the registers. Two packed groups (gate and up for
    // SiluMul; one on AVX2, whose 11 int registers would leave 2 tokens).
    shape.fp32_acc_in_memory = true;
    shape.prefetch_bytes = 4 * kPackedBlockBytes;
    shape.groups = isa == Isa::Avx2 ? 1 : std::max<int64_t>(1, 2 / mult);
    const int64_t max_tokens = isa == Isa::AvxVnni ? 3 : program::KernelId::kBatchMaxTokens;
    shape.tokens = std::max<int64_t>(
        1, std::min(max_tokens, max_int_accumulators(isa) / (shape.groups * mult * halves)));
    return shape;
  }
  // Within the asked tile, the largest groups x tokens that fits (the most
  // register reuse), more tokens on a tie: AVX2 turns m48n4 into m16n2, whose
  // weights serve two tokens, not m32n1 (15% slower on the QKV shape).
  const int64_t asked_groups = std::min(kernel.tile_m / kPackRows, kMaxPackedGroups / mult);
  const int64_t asked_tokens = std::min(kernel.tile_n, kMaxTokens);
  // The ymm ISAs may keep the fp32 accumulators in memory, which frees 16
  // registers for int accumulators: a larger tile for one load-FMA-store per
  // accumulator and 32-block (see docs/kernels.md for the measurements).
  shape.groups = 1;
  shape.tokens = 1;
  for (bool in_memory : {false, true}) {
    if (in_memory && !is_ymm_isa(isa)) break;
    const int64_t fits = in_memory ? max_int_accumulators(isa) : max_acc;
    const int64_t max_tokens = isa == Isa::AvxVnni ? std::min<int64_t>(asked_tokens, 3) : asked_tokens;
    for (int64_t g = 1; g <= asked_groups; ++g) {
      for (int64_t t = 1; t <= max_tokens; ++t) {
        if (g * mult * halves * t > fits) continue;
        if (g * t > shape.groups * shape.tokens || (g * t == shape.groups * shape.tokens && t > shape.tokens)) {
          shape.groups = g;
          shape.tokens = t;
          shape.fp32_acc_in_memory = in_memory;
        }
      }
    }
  }
  return shape;
}

}  // namespace lumen::codegen
