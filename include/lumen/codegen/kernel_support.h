// Internals shared by the kernel generator, its support code (activation
// quantization, weight packing), the kernel tests and the kernel benchmark.
// Not a stage contract: kernel_abi.h and codegen.h are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/kernel_abi.h"
#include "lumen/program.h"

namespace lumen::codegen {

// ---------------------------------------------------------- packed format
// Every ISA uses row groups of 16 rows. Group g of a matrix with k_blocks
// 32-blocks starts at byte g * k_blocks * kPackedBlockBytes; inside it,
// block b holds 16 fp16 scales (row r at 2r) then 512 bytes of quants where
// byte 32 + 64*j + 4*r + i is weight k = 32b + 4j + i of row r: one 64-byte
// load gives 4 consecutive k of all 16 rows, one dword per row.
// Avx512Vnni stores w ^ 0x80 (= w + 128 as u8, for vpdpbusd); the others
// store w as is.
constexpr int64_t kPackRows = 16;
constexpr int64_t kPackedScaleBytes = 2 * kPackRows;
constexpr int64_t kPackedBlockBytes = kPackedScaleBytes + kPackRows * kQ8Block;  // 544

// Value of weight (row r, k) of one packed group (reference decoding).
int8_t packed_weight(Isa isa, const uint8_t* group, int64_t k_blocks, int64_t r, int64_t k);
uint16_t packed_scale(const uint8_t* group, int64_t k_blocks, int64_t r, int64_t block);

// ------------------------------------------------- activation quantization
// Both compute exactly ggml's x86 quantize_row_q8_0 (see kernel_abi.h); the
// public quantize_act picks the AVX2 one when the CPU has AVX2+F16C.
void quantize_act_scalar(const float* x, ActBlock* out, int64_t k);
void quantize_act_avx2(const float* x, ActBlock* out, int64_t k);

// ---------------------------------------------------------- kernel names
// A parsed program::kernel_name(): "gemv.<epilogue>" or
// "gemm.<epilogue>.m<tile_m>n<tile_n>".
struct KernelSpec {
  bool prefill = false;
  program::Epilogue epilogue = program::Epilogue::None;
  int64_t tile_m = 16;
  int64_t tile_n = 1;
};
// Throws std::invalid_argument for anything else.
KernelSpec parse_kernel_name(const std::string& name);
// The inverse; matches program::kernel_name().
std::string format_kernel_name(const KernelSpec& spec);
const char* epilogue_name(program::Epilogue e);

// ------------------------------------------------------ generator knobs
// What the generator really uses for a spec: the register tile is clamped to
// what the ISA's register file holds (see docs/kernels.md).
struct KernelShape {
  int64_t groups = 1;          // output row groups per register tile
  int64_t tokens = 1;          // tokens per register tile
  int64_t prefetch_bytes = 0;  // software prefetch distance on the weight stream, 0 = none
  int64_t chunk_act_bytes = 256 * 1024;  // token chunk: activations of at most this many bytes, 0 = one chunk
};
KernelShape kernel_shape(Isa isa, const KernelSpec& spec);
// generate_matmul_kernel with an explicit shape (the benchmark sweeps it).
std::vector<uint8_t> generate_matmul_kernel(Isa isa, const KernelSpec& spec, const KernelShape& shape);

}  // namespace lumen::codegen
