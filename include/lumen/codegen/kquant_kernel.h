// Internal: the k-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) GEMV and batch kernels, shared by the
// kernel tests and the kernel benchmark. Same ABI as the Q8_0 kernels
// (MatMulArgs, ActBlock activations); the weights are the packed layouts of
// target/packed_kquant.h and k_blocks must be a multiple of 8 (K % 256 == 0:
// otherwise the kernel returns without writing y).
#pragma once

#include <cstdint>
#include <vector>

#include "lumen/ops/op_list.h"
#include "lumen/program/program.h"
#include "lumen/target/cpu_tune.h"
#include "lumen/target/kernel_abi.h"

namespace lumen::codegen {

struct KQuantShape {
  int64_t groups = 1;          // output row groups per register tile
  int64_t tokens = 1;          // tokens per register tile
  int64_t prefetch_bytes = 0;  // software prefetch distance on the weight stream, 0 = none
  bool fp32_acc_in_memory = false;
  // The weights are expanded blocks (packed_kquant.h expand_kquant): the GEMM's.
  // It broadcasts each token's activation dword into a register of its own
  // when the registers its tile leaves hold them all.
  bool expanded = false;
};

// Whether `kernel` is a k-quant kernel: its weight Q2_K, Q3_K, Q4_K, Q5_K or Q6_K, any
// kind and epilogue, or a GEMM of Q4_1 or Q5_1 (has_expanded_kquant); every
// ISA has them. A GEMV or batch kernel reads the packed layout, a GEMM
// (prefill) the expanded one, with its id's tile.
// generate_matmul_kernel (codegen.h) generates these with the functions below.
bool is_kquant_kernel(const program::KernelId& kernel);
// The shape the generator uses; InternalError unless is_kquant_kernel.
KQuantShape kquant_kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune = CpuTune::Generic);
std::vector<uint8_t> generate_kquant_kernel(Isa isa, const program::KernelId& kernel, CpuTune tune);
std::vector<uint8_t> generate_kquant_kernel(Isa isa, const program::KernelId& kernel, const KQuantShape& shape);

// The scalar oracle with the kernels' arithmetic (fp32 stage in the same
// order). Throws std::invalid_argument unless k_blocks % 8 == 0.
void reference_kquant_matmul(ops::DType t, program::Epilogue epilogue, const MatMulArgs& args);

}  // namespace lumen::codegen
