#include "lumen/common/numeric.h"

#include <cmath>
#include <cstring>

namespace lumen {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in fp32
      float v = float(mant) * 0x1p-24f;
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7FFFFFFFu;
  if (ax > 0x7F800000u) return 0x7E00;                 // NaN
  if (ax >= 0x477FF000u) return uint16_t(sign | 0x7C00);  // overflow (incl. inf) after rounding
  if (ax < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24, rounded to nearest even.
    float a;
    std::memcpy(&a, &ax, 4);
    float scaled = a * 0x1p24f;  // exact (power of two)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return uint16_t(sign | uint16_t(r));
  }
  // Normal: keep 10 mantissa bits, round to nearest even on the 13 dropped bits.
  uint32_t mant = ax & 0x7FFFFFu;
  uint32_t exp = (ax >> 23) - 112u;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;  // may carry into exponent: correct
  return uint16_t(sign | h);
}

void quantize_row_q8_0_ref(const float* x, BlockQ8_0* out, size_t n) {
  for (size_t b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQ8Block; ++j) out[b].qs[j] = int8_t(std::roundf(xb[j] * id));
  }
}

void dequantize_row_q8_0(const BlockQ8_0* in, float* y, size_t n) {
  for (size_t b = 0; b < n / kQ8Block; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int j = 0; j < kQ8Block; ++j) y[b * kQ8Block + j] = float(in[b].qs[j]) * d;
  }
}

}  // namespace lumen
