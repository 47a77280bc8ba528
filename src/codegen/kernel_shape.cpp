// The register tile and knobs the generator uses for a kernel on an ISA.
#include <algorithm>

#include "lumen/codegen/float_kernel.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/common/internal_error.h"
#include "lumen/target/packed_q8_0.h"
#include "lumen/target/weight_formats.h"

namespace lumen::codegen {

namespace {

// Four blocks ahead on every weight stream, the next tile's blocks, or none,
// as the tuning says (cpu_tune.h: its measurements).
void set_prefetch(KernelShape& shape, WeightPrefetch prefetch, ops::DType format) {
  if (prefetch == WeightPrefetch::BlocksAhead) shape.prefetch_bytes = 4 * packed_block_bytes(format);
  shape.prefetch_next_tile = prefetch == WeightPrefetch::NextTile;
}

// One packed group per tile, a SiluMul pair's gate and then up, where the
// tuning streams one (cpu_tune.h).
void set_one_stream(KernelShape& shape, CpuTune tune, int64_t mult) {
  if (!one_stream(tune)) return;
  shape.groups = 1;
  shape.sequential_groups = mult == 2;
}

}  // namespace

KernelShape kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune) {
  if (is_float_kernel(kernel)) return float_kernel_shape(isa, kernel, tune);
  std::string why;
  LUMEN_ASSERT(program::fits(kernel, isa, &why), "kernel " + program::to_string(kernel) + ": " + why);
  const int64_t halves = vectors_per_group(isa);
  const int64_t mult = kernel.epilogue == program::Epilogue::SiluMul ? 2 : 1;
  KernelShape shape;
  if (kernel.kind == program::KernelKind::Gemv) {
    // Up to four packed groups side by side, as many as the accumulators
    // allow, or one stream as the tuning says.
    constexpr int64_t kGemvPackedGroups = 4;
    shape.tokens = 1;
    shape.groups = std::max<int64_t>(1, std::min(kGemvPackedGroups, max_accumulators(isa) / halves) / mult);
    set_one_stream(shape, tune, mult);
    set_prefetch(shape, gemv_prefetch(tune, isa, kernel.weight), kernel.weight);
    return shape;
  }
  if (kernel.kind == program::KernelKind::Batch) {
    // The GEMV's streams with every token of the batch (up to 8) on each
    // weight block, prefetched as the tuning says: the fp32 accumulators go
    // to memory so that the int ones fill the registers. Two packed groups
    // (gate and up for SiluMul; one on AVX2, whose 11 int registers would
    // leave 2 tokens), or one stream as the tuning says.
    shape.fp32_acc_in_memory = true;
    set_prefetch(shape, batch_prefetch(tune, isa, kernel.weight), kernel.weight);
    shape.groups = isa == Isa::Avx2 ? 1 : std::max<int64_t>(1, 2 / mult);
    set_one_stream(shape, tune, mult);
    const int64_t max_tokens = std::min(max_tile_tokens(isa), program::KernelId::kBatchMaxTokens);
    shape.tokens = std::max<int64_t>(
        1, std::min(max_tokens, max_int_accumulators(isa) / (shape.groups * mult * halves)));
    // AVX-VNNI's Q5_0/Q5_1, IQ4_NL and IQ4_XS kernels keep a register for the fifth
    // bits or the level table beside the int accumulators and one x register
    // per token (16 ymm in all).
    if (isa == Isa::AvxVnni && (has_fifth_bits(kernel.weight) || has_iq4_levels(kernel.weight))) {
      shape.tokens = std::max<int64_t>(1, std::min(shape.tokens, 14 / (shape.groups * mult * halves + 1)));
    }
    return shape;
  }
  // A GEMM runs its id's tile, which the schedule picked to fit (fits() above).
  shape.groups = kernel.tile_m / kPackRows;
  shape.tokens = kernel.tile_n;
  shape.fp32_acc_in_memory = gemm_fp32_acc_in_memory(isa, shape.groups * mult, shape.tokens);
  return shape;
}

}  // namespace lumen::codegen
