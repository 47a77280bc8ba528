// quant::dequantize_row: the values of a row of every weight type, exactly as
// ggml's dequantize_row_* (ggml-quants.c) and its fp16/bf16 widening compute
// them. The float expressions keep ggml's order of operations (d * sc first,
// then times the quant; no fused multiply-add), so the results are bitwise
// ggml's; every kernel and the Q8_0 fallback are checked against these.
#include <cstring>

#include "lumen/common/internal_error.h"
#include "lumen/quant/quant.h"

namespace lumen::quant {
namespace {

using ops::DType;

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block:
// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins),
// sub-blocks 4-7 as a low nibble in bytes 8-11 plus the top 2 bits of
// bytes 0-3 (scales) and 4-7 (mins).
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Low nibbles are the first half of a 32-block, high nibbles the second.
void q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = float(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The fifth bit of element j is bit j of qh (little-endian u32).
uint32_t high_bits(const uint8_t qh[4]) {
  uint32_t v;
  std::memcpy(&v, qh, sizeof v);
  return v;
}

void q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t qh = high_bits(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = int((qh >> j) << 4) & 0x10, h1 = int(qh >> (j + 12)) & 0x10;
      y[j] = float(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + kQK / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    const uint32_t qh = high_bits(x[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = int((qh >> j) << 4) & 0x10, h1 = int(qh >> (j + 12)) & 0x10;
      y[j] = float((x[i].qs[j] & 0x0F) | h0) * d + m;
      y[j + kQK / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

// 16 sub-blocks of 16; scale byte = 4-bit scale | 4-bit min << 4; each qs
// byte holds 2-bit quants of four 32-element runs (shifts 0, 2, 4, 6).
void q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32)
      for (int shift = 0; shift < 8; shift += 2)
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * float(sc & 0xF), ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * half] >> shift) & 3) - ml;
        }
  }
}

// 16 sub-blocks of 16 with 6-bit scales (stored - 32): low nibbles in bytes
// 0-7, the top 2 bits in bytes 8-11; a quant is 2 low bits minus 4 unless its
// hmask bit is set.
void q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d_all = f16_to_f32(x[i].d);
    const uint8_t* s = x[i].scales;
    int8_t scales[16];
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
      const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      scales[j] = int8_t(low | (high << 4));
    }
    const uint8_t* q = x[i].qs;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32)
      for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1))
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * float(scales[is++] - 32);
          for (int l = 0; l < 16; ++l) {
            const int k = l + 16 * half;
            *y++ = dl * float(((q[k] >> shift) & 3) - ((x[i].hmask[k] & m) ? 0 : 4));
          }
        }
  }
}

void q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int is = 0; is < 8; is += 2, ql += 32, u1 = uint8_t(u1 << 2), u2 = uint8_t(u2 << 2)) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, sc, m);
      const float d1 = d * float(sc), m1 = dmin * float(m);
      scale_min_k4(is + 1, x[i].scales, sc, m);
      const float d2 = d * float(sc), m2 = dmin * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// Two halves of 128: ql's low nibbles give elements 0-63, its high nibbles
// 64-127; qh adds 2 bits to each (4 per byte); 8-bit signed scales per 16.
void q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
  }
}

void iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = d * float(kIq4nlValues[x[i].qs[j] & 0xF]);
      y[j + kQK / 2] = d * float(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

// 8 sub-blocks of 32 with 6-bit scales (stored - 32): 4 low bits in
// scales_l (two per byte), 2 high bits in scales_h.
void iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < kQK_K / 32; ++ib, y += 32, qs += 16) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * float(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIq4nlValues[qs[j] & 0xF]);
        y[j + 16] = dl * float(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

template <class Block>
const Block* blocks(const void* row) {
  return static_cast<const Block*>(row);
}

}  // namespace

void dequantize_row(DType t, const void* row, float* y, int64_t n) {
  const ops::DTypeRow& r = ops::row(t);
  LUMEN_ASSERT(r.weight && n % r.block_elems == 0,
               std::string("dequantize_row: ") + r.name + " with " + std::to_string(n) + " elements");
  const int64_t nb = n / r.block_elems;
  switch (t) {
    case DType::F32: std::memcpy(y, row, size_t(n) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
      return;
    case DType::Q8_0: return q8_0(blocks<BlockQ8_0>(row), y, nb);
    case DType::Q4_0: return q4_0(blocks<BlockQ4_0>(row), y, nb);
    case DType::Q4_1: return q4_1(blocks<BlockQ4_1>(row), y, nb);
    case DType::Q5_0: return q5_0(blocks<BlockQ5_0>(row), y, nb);
    case DType::Q5_1: return q5_1(blocks<BlockQ5_1>(row), y, nb);
    case DType::Q2_K: return q2_k(blocks<BlockQ2_K>(row), y, nb);
    case DType::Q3_K: return q3_k(blocks<BlockQ3_K>(row), y, nb);
    case DType::Q4_K: return q4_k(blocks<BlockQ4_K>(row), y, nb);
    case DType::Q5_K: return q5_k(blocks<BlockQ5_K>(row), y, nb);
    case DType::Q6_K: return q6_k(blocks<BlockQ6_K>(row), y, nb);
    case DType::IQ4_NL: return iq4_nl(blocks<BlockIQ4_NL>(row), y, nb);
    case DType::IQ4_XS: return iq4_xs(blocks<BlockIQ4_XS>(row), y, nb);
    case DType::ActQ8:
    case DType::Any:
    case DType::I32: break;
  }
  LUMEN_INTERNAL_ERROR("dequantize_row: not a weight type");
}

}  // namespace lumen::quant
