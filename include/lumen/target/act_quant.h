// Activation quantization: the format in which the matmul kernels read their
// inputs. Activations are quantized per 32-block as ggml does for Q8_0 on x86
// (d = amax/127 rounded to fp16; q = round_half_even(x * 127/amax)), stored
// with the scale already widened to fp32 and the block sum the kernels need.
#pragma once

#include <cstdint>

#include "lumen/common/numeric.h"

namespace lumen {

// `sum` holds -128 * (sum of qs): the AVX-512 VNNI kernels start each
// vpdpbusd accumulator with it, because they multiply u8 (w + 128) by s8 x.
struct ActBlock {
  float d;       // fp16-rounded scale, as fp32
  int32_t sum;   // -128 * sum of qs (the u8 x s8 correction)
  int8_t qs[kQ8Block];
};
static_assert(sizeof(ActBlock) == 40);

// x: k floats (k % 32 == 0) -> k/32 blocks. Picks the AVX2 path when the CPU
// has AVX2+F16C; both compute exactly ggml's x86 quantize_row_q8_0.
void quantize_act(const float* x, ActBlock* out, int64_t k);
void quantize_act_scalar(const float* x, ActBlock* out, int64_t k);
void quantize_act_avx2(const float* x, ActBlock* out, int64_t k);

}  // namespace lumen
