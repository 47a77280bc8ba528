// Internals of the kernel generator shared with the kernel tests and the
// kernel benchmark. Not a stage contract: target/kernel_abi.h and codegen.h are.
#pragma once

#include <cstdint>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/target/cpu_tune.h"
#include "lumen/target/kernel_abi.h"
#include "lumen/target/kernel_registers.h"

namespace lumen::codegen {

// ------------------------------------------------------ generator knobs
// What the generator uses for a kernel: a GEMM's register tile is its
// KernelId's (the schedule picked one that fits the ISA); a GEMV's and a
// batch kernel's are fixed per ISA (see docs/kernels.md).
struct KernelShape {
  int64_t groups = 1;          // output row groups per register tile
  int64_t tokens = 1;          // tokens per register tile
  int64_t prefetch_bytes = 0;  // software prefetch distance on the weight stream, 0 = none
  int64_t chunk_act_bytes = 256 * 1024;  // token chunk: activations of at most this many bytes, 0 = one chunk
  // Keep the fp32 accumulators in stack slots (one load-FMA-store per
  // 32-block) so that the int accumulators can use the registers they held:
  // the ymm GEMM tiles and every batch kernel.
  bool fp32_acc_in_memory = false;
  // A GEMV or batch kernel of the 32-wide formats prefetches each block of
  // the next register tile's rows instead (prefetch_bytes unused): a distance
  // of one tile, which the kernel knows at run time from K (cpu_tune.h: why).
  bool prefetch_next_tile = false;
  // A tile streams its packed groups one after another (a gate/up pair:
  // gate's K blocks, then up's, adjacent in memory) instead of side by side:
  // one weight stream instead of several. The same sums, in the same order.
  bool sequential_groups = false;
};
// InternalError for a kernel that is not program::fits(kernel, isa). `tune`
// decides what the CPU, not the ISA, makes faster (cpu_tune.h).
KernelShape kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune = CpuTune::Generic);
// generate_matmul_kernel with an explicit shape (the benchmark sweeps it).
std::vector<uint8_t> generate_matmul_kernel(Isa isa, const program::KernelId& kernel, const KernelShape& shape);

}  // namespace lumen::codegen
