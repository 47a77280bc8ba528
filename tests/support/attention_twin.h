// The scalar twin of the runtime's attention kernels (ops::attention_head_*,
// ops::attention_block_*): the arithmetic src/runtime/ops.h promises, for one
// query head, written plainly. The vector-op and attention-kernel tests compare
// the kernels with it. With a Q8_0 cache (kernels::attention_block_q8_0) the
// twin is llama.cpp's CPU flash attention (attention_twin_q8_0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lumen/common/numeric.h"

namespace lumen::test_support {

// One query head against the keys [begin, end) of a cache whose rows are
// row_stride floats apart (f32 values; an f16 cache is modelled by rounding).
struct AttentionTwinInput {
  const float* q = nullptr;  // head_dim values
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0, head_dim = 0;
  int64_t begin = 0, end = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores become tanh(s / softcap) * softcap
  bool f16 = false;      // q, K, V and the probabilities rounded to f16, as for an f16 cache
};

struct AttentionTwinOutput {
  std::vector<float> out;        // head_dim values
  std::vector<double> magnitude;  // per element, sum_j |p_j v_jd|: the scale of its rounding error
};

// Float dot products, the scaled (and soft-capped) scores' softmax with the
// exponentials summed in double, probabilities times V summed in float, keys in order.
inline AttentionTwinOutput attention_twin(const AttentionTwinInput& a) {
  auto rd = [&](float x) { return a.f16 ? round_to_f16(x) : x; };
  std::vector<float> p;
  float max = -INFINITY;
  for (int64_t j = a.begin; j < a.end; ++j) {
    float dot = 0;
    for (int64_t d = 0; d < a.head_dim; ++d) dot += rd(a.q[d]) * rd(a.k[j * a.row_stride + d]);
    float x = dot * a.scale;
    if (a.softcap > 0) x = std::tanh(x * (1.0f / a.softcap)) * a.softcap;
    p.push_back(x);
    max = std::max(max, x);
  }
  double sum = 0;
  for (float& x : p) sum += (x = std::exp(x - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (float& x : p) x = rd(x * inv);
  AttentionTwinOutput o{std::vector<float>(static_cast<size_t>(a.head_dim), 0.0f),
                        std::vector<double>(static_cast<size_t>(a.head_dim), 0.0)};
  for (int64_t j = a.begin; j < a.end; ++j)
    for (int64_t d = 0; d < a.head_dim; ++d) {
      const float term = p[static_cast<size_t>(j - a.begin)] * rd(a.v[j * a.row_stride + d]);
      o.out[static_cast<size_t>(d)] += term;
      o.magnitude[static_cast<size_t>(d)] += std::fabs(term);
    }
  return o;
}

// ggml's x86 quantize_row_q8_0 (ggml-cpu-quants.c) for one block of 32:
// d = amax/127 stored as f16, q = round_half_even(x * (127/amax)).
inline BlockQ8_0 ggml_x86_quantize_q8_0(const float* x) {
  float amax = 0;
  for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[i]));
  BlockQ8_0 b{};
  b.d = f32_to_f16(amax / 127.0f);
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  for (int i = 0; i < kQ8Block; ++i) b.qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return b;
}

inline std::vector<BlockQ8_0> ggml_x86_quantize_row_q8_0(const float* x, int64_t n) {
  std::vector<BlockQ8_0> out;
  for (int64_t i = 0; i < n; i += kQ8Block) out.push_back(ggml_x86_quantize_q8_0(x + i));
  return out;
}

// ggml's AVX2 vec_dot_q8_0_q8_0 over nb blocks (x: the key, y: the query):
// eight lane accumulators acc[l] += (d_x * d_y) * (sum of products 4l..4l+3),
// fused, then hsum_float_8's pairwise order.
inline float ggml_vec_dot_q8_0_q8_0(const BlockQ8_0* x, const BlockQ8_0* y, int64_t nb) {
  float acc[8] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(x[b].d) * f16_to_f32(y[b].d);
    for (int l = 0; l < 8; ++l) {
      int sum = 0;
      for (int i = 0; i < 4; ++i) sum += x[b].qs[4 * l + i] * y[b].qs[4 * l + i];
      acc[l] = std::fma(d, static_cast<float>(sum), acc[l]);
    }
  }
  const float h0 = acc[4] + acc[0], h1 = acc[5] + acc[1], h2 = acc[6] + acc[2], h3 = acc[7] + acc[3];
  return (h0 + h2) + (h1 + h3);
}

// One query head (head_dim f32 values) against keys [begin, end) of a Q8_0
// cache whose rows are row_blocks blocks apart.
struct AttentionTwinQ8Input {
  const float* q = nullptr;
  const BlockQ8_0* k = nullptr;
  const BlockQ8_0* v = nullptr;
  int64_t row_blocks = 0, head_dim = 0;
  int64_t begin = 0, end = 0;
  float scale = 1.0f;
  float softcap = 0.0f;
};

// llama.cpp's ggml_compute_forward_flash_attn_ext_f16 for one query row: the
// query quantized as K's vec_dot type, each score its vec_dot times scale
// (soft-capped as scale/softcap, then softcap * tanh), the keys walked in order
// with an online softmax, V dequantized and accumulated by fused multiply-add,
// S = S*ms + vs in two roundings (as its compiled loop), then times 1/S.
inline std::vector<float> attention_twin_q8_0(const AttentionTwinQ8Input& a) {
  const std::vector<BlockQ8_0> q = ggml_x86_quantize_row_q8_0(a.q, a.head_dim);
  std::vector<float> acc(static_cast<size_t>(a.head_dim), 0.0f), v(static_cast<size_t>(a.head_dim));
  const float scale = a.softcap > 0 ? a.scale / a.softcap : a.scale;
  float max = -INFINITY, sum = 0;
  for (int64_t j = a.begin; j < a.end; ++j) {
    float s = ggml_vec_dot_q8_0_q8_0(a.k + j * a.row_blocks, q.data(), a.head_dim / kQ8Block) * scale;
    if (a.softcap > 0) s = a.softcap * std::tanh(s);
    float ms = 1, vs = 1;
    if (s > max) {
      const float old = max;
      max = s;
      ms = std::exp(old - max);
      for (float& x : acc) x *= ms;
    } else {
      vs = std::exp(s - max);
    }
    dequantize_row_q8_0(a.v + j * a.row_blocks, v.data(), v.size());
    for (size_t d = 0; d < v.size(); ++d) acc[d] = std::fma(v[d], vs, acc[d]);
    const float scaled = sum * ms;
    sum = scaled + vs;
  }
  if (a.end > a.begin)
    for (float& x : acc) x *= 1.0f / sum;
  return acc;
}

}  // namespace lumen::test_support
