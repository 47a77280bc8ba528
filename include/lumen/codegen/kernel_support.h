// Internals of the kernel generator shared with the kernel tests and the
// kernel benchmark. Not a stage contract: target/kernel_abi.h and codegen.h are.
#pragma once

#include <cstdint>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/target/kernel_abi.h"

namespace lumen::codegen {

// ------------------------------------------------------ generator knobs
// What the generator really uses for a kernel: the register tile is clamped
// to what the ISA's register file holds (see docs/kernels.md).
struct KernelShape {
  int64_t groups = 1;          // output row groups per register tile
  int64_t tokens = 1;          // tokens per register tile
  int64_t prefetch_bytes = 0;  // software prefetch distance on the weight stream, 0 = none
  int64_t chunk_act_bytes = 256 * 1024;  // token chunk: activations of at most this many bytes, 0 = one chunk
  // Keep the fp32 accumulators in stack slots (one load-FMA-store per
  // 32-block) so that the int accumulators can use the registers they held:
  // the ymm GEMM tiles and every batch kernel.
  bool fp32_acc_in_memory = false;
};
KernelShape kernel_shape(Isa isa, const program::KernelId& kernel);
// Accumulator pairs (int + fp32 vector) a register tile may hold beside the
// generator's temporaries: 32 zmm (VNNI 14, AVX-512 13) or 16 ymm (AVX-VNNI
// 6: no ones/zero constants; AVX2 5).
inline int64_t max_accumulators(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return 14;
    case Isa::Avx512: return 13;
    case Isa::AvxVnni: return 6;
    case Isa::Avx2: return 5;
  }
  return 5;
}
// Int accumulators beside the temporaries when the fp32 ones live in memory:
// 16 - 5 temporaries (AVX2), 16 - 4 (AVX-VNNI), 32 - 6 (AVX-512; a VNNI tile
// broadcasts its activations into registers only while 4 + tokens fit too).
inline int64_t max_int_accumulators(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni:
    case Isa::Avx512: return 26;
    case Isa::AvxVnni: return 12;
    case Isa::Avx2: return 11;
  }
  return 11;
}
// generate_matmul_kernel with an explicit shape (the benchmark sweeps it).
std::vector<uint8_t> generate_matmul_kernel(Isa isa, const program::KernelId& kernel, const KernelShape& shape);

}  // namespace lumen::codegen
