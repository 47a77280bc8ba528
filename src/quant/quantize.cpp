// quantize_row, and the float types and ggml's 32-wide "legacy" quantizers
// (quantize_row_q*_ref in ggml-quants.c, which llama-quantize uses when it
// has no importance matrix).
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "lumen/quant/quant.h"
#include "quantize_internal.h"

namespace lumen::quant {

namespace detail {

void quantize_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16(x[i]);
}

// ggml_compute_fp32_to_bf16: round to nearest even on the dropped 16 bits; a
// NaN keeps its top bits and is forced quiet (bit 6 of the bf16).
void quantize_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      y[i] = static_cast<uint16_t>((u >> 16) | 64u);
    } else {
      y[i] = static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
    }
  }
}

namespace {

// The element of largest magnitude, signed (the first one on ties); 0 for a
// block of zeros. The symmetric types scale by it so that it lands on the
// most negative level, which has one more step than the positive side.
float signed_absmax(const float* xb, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(xb[j])) {
      amax = std::fabs(xb[j]);
      max = xb[j];
    }
  }
  return max;
}

void min_max(const float* xb, int n, float& min, float& max) {
  min = std::numeric_limits<float>::max();
  max = -std::numeric_limits<float>::max();
  for (int j = 0; j < n; ++j) {
    if (xb[j] < min) min = xb[j];
    if (xb[j] > max) max = xb[j];
  }
}

int min_int(int a, int b) { return a < b ? a : b; }

// The five bits of two quants of a 5-bit block: low nibbles in qs, the fifth
// bits of element j and j + 16 in bits j and j + 16 of qh.
void pack_5bit(const uint8_t* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint8_t x0 = q[j], x1 = q[j + kQK / 2];
    qs[j] = static_cast<uint8_t>((x0 & 0x0F) | ((x1 & 0x0F) << 4));
    qh |= ((x0 & 0x10u) >> 4) << (j + 0);
    qh |= ((x1 & 0x10u) >> 4) << (j + kQK / 2);
  }
  std::memcpy(qh_bytes, &qh, sizeof qh);
}

}  // namespace

// d = max / -8, q = min(15, trunc(x/d + 8.5)): the +8.5 then truncation is
// ggml's rounding (half up), and the min clips the one value that reaches 16.
void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    const float d = signed_absmax(xb, kQK) / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK / 2 + j] * id;
      const auto xi0 = static_cast<uint8_t>(min_int(15, static_cast<int8_t>(truncate_to_byte(x0 + 8.5f))));
      const auto xi1 = static_cast<uint8_t>(min_int(15, static_cast<int8_t>(truncate_to_byte(x1 + 8.5f))));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    float min, max;
    min_max(xb, kQK, min, max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp16(d);
    y[i].m = fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK / 2 + j] - min) * id;
      const auto xi0 = static_cast<uint8_t>(min_int(15, static_cast<int8_t>(truncate_to_byte(x0 + 0.5f))));
      const auto xi1 = static_cast<uint8_t>(min_int(15, static_cast<int8_t>(truncate_to_byte(x1 + 0.5f))));
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    const float d = signed_absmax(xb, kQK) / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp16(d);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) {
      q[j] = static_cast<uint8_t>(min_int(31, static_cast<int8_t>(truncate_to_byte(xb[j] * id + 16.5f))));
    }
    pack_5bit(q, y[i].qs, y[i].qh);
  }
}

// Unlike Q4_1, ggml does not clip Q5_1's quants to 31 (a value rounding to 32
// loses its fifth bit); reproduced as is.
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    float min, max;
    min_max(xb, kQK, min, max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp16(d);
    y[i].m = fp16(min);
    uint8_t q[kQK];
    for (int j = 0; j < kQK; ++j) q[j] = truncate_to_byte((xb[j] - min) * id + 0.5f);
    pack_5bit(q, y[i].qs, y[i].qh);
  }
}

// Q8_0 as ggml writes it: amax by `a > b ? a : b`, which (unlike fmax) lets
// a NaN through to the scale.
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* xb = x + i * kQK;
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = amax > std::fabs(xb[j]) ? amax : std::fabs(xb[j]);
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(truncate_to_byte(std::round(xb[j] * id)));
  }
}

}  // namespace detail

void quantize_row(ops::DType t, const float* x, void* row, int64_t n) {
  using ops::DType;
  if (!is_weight_type(t) || n % ops::row(t).block_elems != 0) {
    throw std::invalid_argument(std::string("quantize_row: ") + ops::to_string(t) + " row of " + std::to_string(n) +
                                " elements");
  }
  switch (t) {
    case DType::F32: std::memcpy(row, x, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: detail::quantize_f16(x, static_cast<uint16_t*>(row), n); return;
    case DType::BF16: detail::quantize_bf16(x, static_cast<uint16_t*>(row), n); return;
    case DType::Q4_0: detail::quantize_q4_0(x, static_cast<BlockQ4_0*>(row), n); return;
    case DType::Q4_1: detail::quantize_q4_1(x, static_cast<BlockQ4_1*>(row), n); return;
    case DType::Q5_0: detail::quantize_q5_0(x, static_cast<BlockQ5_0*>(row), n); return;
    case DType::Q5_1: detail::quantize_q5_1(x, static_cast<BlockQ5_1*>(row), n); return;
    case DType::Q8_0: detail::quantize_q8_0(x, static_cast<BlockQ8_0*>(row), n); return;
    case DType::Q2_K: detail::quantize_q2_k(x, static_cast<BlockQ2_K*>(row), n); return;
    case DType::Q3_K: detail::quantize_q3_k(x, static_cast<BlockQ3_K*>(row), n); return;
    case DType::Q4_K: detail::quantize_q4_k(x, static_cast<BlockQ4_K*>(row), n); return;
    case DType::Q5_K: detail::quantize_q5_k(x, static_cast<BlockQ5_K*>(row), n); return;
    case DType::Q6_K: detail::quantize_q6_k(x, static_cast<BlockQ6_K*>(row), n); return;
    case DType::IQ4_NL: detail::quantize_iq4_nl(x, static_cast<BlockIQ4_NL*>(row), n); return;
    case DType::IQ4_XS: detail::quantize_iq4_xs(x, static_cast<BlockIQ4_XS*>(row), n); return;
    case DType::ActQ8:
    case DType::Any:
    case DType::I32: break;
  }
  throw std::invalid_argument(std::string("quantize_row: ") + ops::to_string(t) + " is not a weight type");
}

}  // namespace lumen::quant
