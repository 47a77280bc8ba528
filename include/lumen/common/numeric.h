// Scalar numeric building blocks shared by every stage: IEEE half precision
// and the Q8_0 block format, written plainly. They are the reference the
// vector kernels are tested against.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lumen {

// IEEE 754 binary16 <-> binary32. to_f16 rounds to nearest even; NaN -> 0x7E00.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float round_to_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// A Q8_0 block as stored in GGUF: fp16 scale, then 32 signed quants. 34 bytes.
constexpr int kQ8Block = 32;
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQ8Block];
};
static_assert(sizeof(BlockQ8_0) == 34);

// ggml's reference quantizer (quantize_row_q8_0_ref): d = amax/127,
// q = roundf(x / d) (round half away from zero). Model files are made with it.
// n must be a multiple of 32.
void quantize_row_q8_0_ref(const float* x, BlockQ8_0* out, size_t n);
// y[i] = q * fp32(d); exact.
void dequantize_row_q8_0(const BlockQ8_0* in, float* y, size_t n);

}  // namespace lumen
