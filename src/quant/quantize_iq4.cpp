// ggml's non-linear 4-bit quantizers as quantize_iq4_nl and quantize_iq4_xs
// run them without an importance matrix (what llama-quantize writes): the
// shared quantize_row_iq4_nl_impl with ntry = 7 and weights x². Note that
// quantize_iq4_nl (ntry 7) differs from ggml's quantize_row_iq4_nl_ref
// (ntry -1); llama-quantize goes through the former.
#include <cmath>
#include <cstring>

#include "quantize_internal.h"

namespace lumen::quant::detail {

namespace {

constexpr int kNtry = 7;

// The index of the level of kIq4nlValues nearest to x (the lower on ties).
int best_index(float x) {
  const int8_t* val = kIq4nlValues;
  if (x <= val[0]) return 0;
  if (x >= val[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < val[mav]) mu = mav;
    else ml = mav;
  }
  return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// The scale of one 32-element block: start from max/-127 (the most negative
// level takes the largest magnitude), fit by weighted least squares, then try
// 2·ntry+1 inverse scales around it. Fills L with the first fit's levels
// (IQ4_XS redoes them against its stored scales). 0 for a block of zeros
// (L then untouched).
float block_scale(const float* xb, const float* weight, uint8_t* L) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0;
  float d = -max / kIq4nlValues[0];
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float al = id * xb[j];
    const int l = best_index(al);
    L[j] = static_cast<uint8_t>(l);
    const float q = kIq4nlValues[l];
    const float w = weight[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    id = static_cast<float>(itry + kIq4nlValues[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float al = id * xb[j];
      const float q = kIq4nlValues[best_index(al)];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void square(const float* xb, float* weight) {
  for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
}

// Quants of 32 elements, two to a byte: element j low, j + 16 high.
void pack_nibbles(const uint8_t* L, uint8_t* q4) {
  for (int j = 0; j < 16; ++j) q4[j] = static_cast<uint8_t>(L[j] | (L[16 + j] << 4));
}

}  // namespace

// One block of 32 with an fp16 scale; the levels are redone against the
// float scale (not its fp16 rounding), as ggml does.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  uint8_t L[32];
  float weight[32];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    square(x, weight);
    const float scale = block_scale(x, weight, L);
    y[i].d = fp16(scale);
    const float id = scale != 0.0f ? 1 / scale : 0;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index(id * x[j]));
    pack_nibbles(L, y[i].qs);
  }
}

// Eight blocks of 32 with 6-bit signed scales against one fp16 d = -max/32.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  constexpr int kBlocks = kQK_K / 32;
  uint8_t L[kQK_K];
  float weight[32];
  float scales[kBlocks];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < kBlocks; ++ib) {
      square(x + ib * 32, weight);
      scales[ib] = block_scale(x + ib * 32, weight, L + ib * 32);
      const float abs_d = std::fabs(scales[ib]);
      if (abs_d > amax_scale) {
        amax_scale = abs_d;
        max_scale = scales[ib];
      }
    }
    y[i].scales_h = 0;
    // -max_scale/32 is -0.0 for an all-zero super-block: ggml stores that sign.
    const float d = -max_scale / 32;
    y[i].d = fp16(d);
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int ib = 0; ib < kBlocks; ++ib) {
      int l = nearest_int(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * l;
      const float idl = dl != 0.0f ? 1 / dl : 0.f;
      for (int j = 0; j < 32; ++j) L[ib * 32 + j] = static_cast<uint8_t>(best_index(idl * x[ib * 32 + j]));
      l += 32;
      const auto l_l = static_cast<uint8_t>(l & 0xf);
      const auto l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) y[i].scales_l[ib / 2] = l_l;
      else y[i].scales_l[ib / 2] = static_cast<uint8_t>(y[i].scales_l[ib / 2] | (l_l << 4));
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | (l_h << 2 * (ib % 8)));
    }
    for (int b = 0; b < kBlocks; ++b) pack_nibbles(L + 32 * b, y[i].qs + 16 * b);
  }
}

}  // namespace lumen::quant::detail
