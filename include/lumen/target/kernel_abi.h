// The calling convention of the generated matmul kernels: the argument block
// codegen's kernels read by offset and the runtime fills. Plain C layout.
// Inputs are ActBlocks (act_quant.h), weights the packed layout (packed_q8_0.h);
// the float formats' kernels (packed_float.h) read f32 rows instead.
#pragma once

#include <cstdint>

#include "lumen/target/act_quant.h"
#include "lumen/target/isa.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen {

// One call computes y[n, m] for m in [0, m_rows) and n in [0, n_tokens).
// For Epilogue SiluMul the packed weights alternate gate and up row groups
// (group g of gate, then group g of up) and m_rows counts gate rows.
// m_rows may be any count >= 1: the packed data is padded to whole row
// groups and the kernel never writes y (nor reads bias/residual) past m_rows.
// Threads split rows in tasks that start on a row group boundary.
struct MatMulArgs {
  const uint8_t* w;        // packed weights, at the first row group of this call
  union {
    const ActBlock* x;     // activations: n_tokens rows of k_blocks blocks
    const float* x_f32;    // float formats: n_tokens rows of 32 * k_blocks floats
  };
  float* y;                // output at (token 0, row 0) of this call
  const float* bias;       // at row 0 of this call, or null
  const float* residual;   // at (token 0, row 0) of this call, or null; may equal y
  int64_t x_stride;        // in ActBlocks between tokens (float formats: in floats)
  int64_t y_stride;        // in floats between tokens
  int64_t r_stride;        // in floats between tokens of residual
  int64_t k_blocks;        // K / 32
  int64_t m_rows;          // >= 1 (see above)
  int64_t n_tokens;        // >= 1
};
using MatMulFn = void (*)(const MatMulArgs*);

}  // namespace lumen
