// Internal: the float-weight (F16, BF16, F32) GEMV, batch and prefill GEMM
// kernels, shared by the kernel tests and the kernel benchmark. Same ABI as
// the other matmul kernels (MatMulArgs) but the activations are f32 rows
// (MatMulArgs::x_f32, x_stride in floats) and the weights the packed layout of
// target/packed_float.h.
#pragma once

#include <cstdint>
#include <vector>

#include "lumen/codegen/kernel_support.h"
#include "lumen/ops/op_list.h"
#include "lumen/program/program.h"
#include "lumen/target/kernel_abi.h"

namespace lumen::codegen {

// Whether `kernel` reads float weights: its weight F16, BF16 or F32, any kind
// and epilogue; every ISA has them. generate_matmul_kernel (codegen.h) and
// kernel_shape (kernel_support.h) answer these through the functions below.
bool is_float_kernel(const program::KernelId& kernel);
// The register tile (groups x tokens) and prefetch the generator uses; the
// fp32 accumulators are always in registers. InternalError unless is_float_kernel.
KernelShape float_kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune);
std::vector<uint8_t> generate_float_kernel(Isa isa, const program::KernelId& kernel, const KernelShape& shape);

// The scalar oracle with the kernels' arithmetic: per row and token,
// acc = fma(w[k], x[k], acc) for k in order from 0, then the epilogue.
void reference_float_matmul(ops::DType format, program::Epilogue epilogue, const MatMulArgs& args);

}  // namespace lumen::codegen
