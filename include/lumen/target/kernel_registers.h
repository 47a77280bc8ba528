// The register budget of the generated matmul kernels, per ISA: the one
// statement of what a register tile (packed 16-row groups x tokens) may hold.
// The schedule picks each GEMM tile within it, codegen's kernel_shape checks
// a kernel against it, and the generator allocates its registers by it
// (src/codegen/matmul_generator.cpp; measurements in docs/kernels.md).
#pragma once

#include <cstdint>

#include "lumen/target/isa.h"

namespace lumen {

// Vector registers per packed group and token: one zmm, or two ymm halves.
inline constexpr int64_t vectors_per_group(Isa isa) { return is_ymm_isa(isa) ? 2 : 1; }

// Accumulator pairs (an int and an fp32 vector) a tile may hold beside the
// generator's temporaries: 32 zmm (VNNI 14, AVX-512 13) or 16 ymm
// (AVX-VNNI 6: no ones/zero constants; AVX2 5).
inline constexpr int64_t max_accumulators(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return 14;
    case Isa::Avx512: return 13;
    case Isa::AvxVnni: return 6;
    case Isa::Avx2: return 5;
  }
  return 5;
}

// Int accumulators beside the temporaries when the fp32 ones live in stack
// slots: 16 - 5 temporaries (AVX2), 16 - 4 (AVX-VNNI), 32 - 6 (AVX-512; a
// VNNI tile broadcasts its activations into registers only while 4 + tokens
// fit too).
inline constexpr int64_t max_int_accumulators(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni:
    case Isa::Avx512: return 26;
    case Isa::AvxVnni: return 12;
    case Isa::Avx2: return 11;
  }
  return 11;
}

// General-purpose registers that point at a tile's packed groups and tokens,
// one each.
inline constexpr int64_t kTilePointerRegs = 12;

// Tokens a tile may hold: AVX-VNNI broadcasts each token's activation dword
// into a register of its own (VEX has no {1to8}), over three temporaries the
// dot products leave free; elsewhere the pointer registers bound it.
inline constexpr int64_t max_tile_tokens(Isa isa) { return isa == Isa::AvxVnni ? 3 : kTilePointerRegs - 1; }

// Whether a tile of `packed_groups` (gate and up count twice) x `tokens` fits,
// with its fp32 accumulators in registers or in stack slots.
inline constexpr bool tile_fits(Isa isa, int64_t packed_groups, int64_t tokens, bool fp32_acc_in_memory) {
  if (packed_groups < 1 || tokens < 1 || tokens > max_tile_tokens(isa) || packed_groups + tokens > kTilePointerRegs)
    return false;
  const int64_t accumulators = packed_groups * vectors_per_group(isa) * tokens;
  return accumulators <= (fp32_acc_in_memory ? max_int_accumulators(isa) : max_accumulators(isa));
}

// A GEMM tile keeps its fp32 accumulators in registers when they fit; the
// ymm ISAs may keep them in stack slots instead, which frees their registers
// for int accumulators: a larger tile for one load-FMA-store per accumulator
// and 32-block (docs/kernels.md).
inline constexpr bool gemm_fp32_acc_in_memory(Isa isa, int64_t packed_groups, int64_t tokens) {
  return !tile_fits(isa, packed_groups, tokens, false);
}
inline constexpr bool gemm_tile_fits(Isa isa, int64_t packed_groups, int64_t tokens) {
  return tile_fits(isa, packed_groups, tokens, false) || (is_ymm_isa(isa) && tile_fits(isa, packed_groups, tokens, true));
}

// A k-quant register tile (src/codegen/kquant_generator.cpp): per accumulator
// pair `int_accs` int vectors (kquant_int_accumulators: Q6_K has one per
// 16-block) and an fp32 one in a register or a stack slot, beside 4 temporaries.
inline constexpr bool kquant_tile_fits(Isa isa, int64_t packed_groups, int64_t tokens, int64_t int_accs,
                                       bool fp32_acc_in_memory) {
  const int64_t pairs = packed_groups * vectors_per_group(isa) * tokens;
  return packed_groups >= 1 && tokens >= 1 && packed_groups + tokens <= kTilePointerRegs &&
         pairs * (int_accs + (fp32_acc_in_memory ? 0 : 1)) + 4 <= (is_ymm_isa(isa) ? 16 : 32);
}
// A k-quant GEMM keeps its fp32 accumulators in registers when they fit.
inline constexpr bool kquant_gemm_fp32_acc_in_memory(Isa isa, int64_t packed_groups, int64_t tokens, int64_t int_accs) {
  return !kquant_tile_fits(isa, packed_groups, tokens, int_accs, false);
}
inline constexpr bool kquant_gemm_tile_fits(Isa isa, int64_t packed_groups, int64_t tokens, int64_t int_accs) {
  return kquant_tile_fits(isa, packed_groups, tokens, int_accs, false) ||
         kquant_tile_fits(isa, packed_groups, tokens, int_accs, true);
}

// A float-weight register tile (src/codegen/float_generator.cpp): an fp32
// accumulator per (packed group, vector, token), every vector of the tile's
// converted weights for one k, and on ymm (VEX has no {1to8}) one register
// for the broadcast activation; the epilogue needs 4 temporaries in all.
inline constexpr bool float_tile_fits(Isa isa, int64_t packed_groups, int64_t tokens) {
  const int64_t vectors = packed_groups * vectors_per_group(isa);
  const int64_t temps = vectors + (is_ymm_isa(isa) ? 1 : 0);
  return packed_groups >= 1 && tokens >= 1 && packed_groups + tokens <= kTilePointerRegs &&
         vectors * tokens + (temps > 4 ? temps : 4) <= (is_ymm_isa(isa) ? 16 : 32);
}

}  // namespace lumen
