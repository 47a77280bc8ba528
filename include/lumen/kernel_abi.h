// The contract between generated matmul kernels (src/codegen) and the code
// that feeds them (src/runtime): argument block, activation format, packed
// weight format, CPU features. Plain C layout: kernels read it by offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lumen/numeric.h"

namespace lumen {

// ------------------------------------------------------------ CPU features
enum CpuFeature : uint64_t {
  kCpuAvx2 = 1u << 0,
  kCpuFma = 1u << 1,
  kCpuF16c = 1u << 2,
  kCpuAvx512f = 1u << 3,
  kCpuAvx512bw = 1u << 4,
  kCpuAvx512vl = 1u << 5,
  kCpuAvx512vnni = 1u << 6,
  kCpuAvxVnni = 1u << 7,
};
uint64_t cpu_features();                         // of this CPU (cpuid + xgetbv)
std::string cpu_feature_names(uint64_t mask);    // "avx512f avx512_vnni"

// Code-generation targets, from most to least capable.
enum class Isa : uint8_t { Avx512Vnni, Avx512, Avx2 };
const char* to_string(Isa isa);                  // "avx512-vnni", "avx512", "avx2"
uint64_t required_features(Isa isa);
Isa best_isa(uint64_t features);                 // throws if even AVX2+FMA+F16C is missing

// ------------------------------------------------------ activation format
// Activations are quantized per 32-block as ggml does for Q8_0 on x86
// (d = amax/127 rounded to fp16; q = round_half_even(x * 127/amax)), stored
// with the scale already widened to fp32 and the block sum the kernels need.
// `sum` holds -128 * (sum of qs): the AVX-512 VNNI kernels start each
// vpdpbusd accumulator with it, because they multiply u8 (w + 128) by s8 x.
struct ActBlock {
  float d;       // fp16-rounded scale, as fp32
  int32_t sum;   // -128 * sum of qs (the u8 x s8 correction)
  int8_t qs[kQ8Block];
};
static_assert(sizeof(ActBlock) == 40);
// x: k floats (k % 32 == 0) -> k/32 blocks.
void quantize_act(const float* x, ActBlock* out, int64_t k);

// ---------------------------------------------------------- packed weights
// Weights are repacked once at load time into row groups the kernels stream.
// The format is fixed per ISA; packed_bytes() gives its size (the layout:
// include/lumen/codegen/kernel_support.h; same 34 bytes per 32 weights as GGUF).
int64_t pack_row_group(Isa isa);                        // rows per group
int64_t packed_bytes(Isa isa, int64_t rows, int64_t k); // rows padded up to the group
// Packs `rows` rows of Q8_0 (k elements each) starting at packed row group
// `first_group` of `out`. Rows past `rows` up to the group are zero.
void pack_q8_0(Isa isa, const BlockQ8_0* src, int64_t rows, int64_t k, uint8_t* out,
               int64_t first_group);
// Packs gate and up (each `rows` x k) alternating per row group, as the
// SiluMul epilogue reads them: 2 * packed_bytes(isa, rows, k) bytes.
void pack_q8_0_gate_up(Isa isa, const BlockQ8_0* gate, const BlockQ8_0* up, int64_t rows, int64_t k,
                       uint8_t* out);

// ---------------------------------------------------------- kernel calls
// One call computes y[n, m] for m in [0, m_rows) and n in [0, n_tokens).
// For Epilogue SiluMul the packed weights alternate gate and up row groups
// (group g of gate, then group g of up) and m_rows counts gate rows.
// m_rows may be any count >= 1: the packed data is padded to whole row
// groups and the kernel never writes y (nor reads bias/residual) past m_rows.
// Threads split rows in tasks that start on a row group boundary.
struct MatMulArgs {
  const uint8_t* w;        // packed weights, at the first row group of this call
  const ActBlock* x;       // activations: n_tokens rows of k_blocks blocks
  float* y;                // output at (token 0, row 0) of this call
  const float* bias;       // at row 0 of this call, or null
  const float* residual;   // at (token 0, row 0) of this call, or null; may equal y
  int64_t x_stride;        // in ActBlocks between tokens
  int64_t y_stride;        // in floats between tokens
  int64_t r_stride;        // in floats between tokens of residual
  int64_t k_blocks;        // K / 32
  int64_t m_rows;          // >= 1 (see above)
  int64_t n_tokens;        // >= 1
};
using MatMulFn = void (*)(const MatMulArgs*);

}  // namespace lumen
