// What the quantizers of src/quant/quantize*.cpp share: ggml's rounding
// helpers, reproduced bit for bit, and one quantizer per weight type.
// Every expression keeps the order of ggml-quants.c's so that the floats,
// and therefore the bytes, come out the same.
#pragma once

#include <cstdint>
#include <cstring>

#include "lumen/common/numeric.h"
#include "lumen/quant/blocks.h"

namespace lumen::quant::detail {

// A block whose largest magnitude is below this is all zeros (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// fp32 -> fp16 as ggml's scalar conversion (ggml-base is built without F16C):
// round to nearest even, and a NaN becomes a quiet NaN that keeps its sign.
inline uint16_t fp16(float f) {
  if (f != f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7E00u);
  }
  return f32_to_f16(f);
}

// ggml's nearest_int: adding 1.5·2^23 leaves the rounded integer in the low
// mantissa bits (round half to even, valid for |x| < 2^22).
inline int nearest_int(float x) {
  const float biased = x + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &biased, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// A C cast of a float to an 8-bit integer as x86-64 compilers emit it for
// ggml (cvttss2si, then the low byte): truncation toward zero, and NaN or a
// value outside int32 gives INT32_MIN, whose low byte is 0. Written out so
// that no input is undefined behaviour here.
inline uint8_t truncate_to_byte(float x) {
  const bool in_range = x > -2147483904.f && x < 2147483648.f;  // false for NaN
  const int32_t i = in_range ? static_cast<int32_t>(x) : INT32_MIN;
  return static_cast<uint8_t>(static_cast<uint32_t>(i) & 0xFFu);
}

// One quantizer per type: x[0..n) into blocks, n a multiple of the block.
void quantize_f16(const float* x, uint16_t* y, int64_t n);
void quantize_bf16(const float* x, uint16_t* y, int64_t n);
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n);
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n);
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n);
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n);
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n);
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n);

}  // namespace lumen::quant::detail
