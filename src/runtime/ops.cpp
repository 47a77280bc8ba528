// Non-matmul numeric kernels (see ops.h): scalar versions that state the
// arithmetic, and AVX2/F16C versions of the attention inner loops, chosen
// once from cpu_features().
#include "lumen/runtime/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lumen/kernel_abi.h"
#include "lumen/numeric.h"

namespace lumen::runtime::ops {
namespace {

constexpr int64_t kMaxHeadDim = 1024;

bool use_avx2() {
  static const bool yes = (cpu_features() & (kCpuAvx2 | kCpuFma | kCpuF16c)) == (kCpuAvx2 | kCpuFma | kCpuF16c);
  return yes;
}

// ---------------------------------------------------------------- scalar
template <bool kF16>
float load(const void* base, int64_t i) {
  if constexpr (kF16)
    return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
  else
    return static_cast<const float*>(base)[i];
}

// Softmax over scores[0, n) in place: scale, max subtraction, sum in double
// and one multiplication by the reciprocal, as ggml's soft_max does.
template <bool kF16>
void softmax(float* scores, int64_t n, float scale) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] *= scale;
    max = std::fmax(max, scores[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    float e = std::exp(scores[j] - max);
    sum += static_cast<double>(e);
    scores[j] = e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) {
    float p = scores[j] * inv;
    scores[j] = kF16 ? round_to_f16(p) : p;
  }
}

template <bool kF16>
void attention_scalar(const AttentionHead& a) {
  float q[kMaxHeadDim];
  for (int64_t d = 0; d < a.head_dim; ++d) q[d] = kF16 ? round_to_f16(a.q[d]) : a.q[d];
  for (int64_t j = 0; j < a.n_keys; ++j) {
    float s = 0;
    for (int64_t d = 0; d < a.head_dim; ++d) s += q[d] * load<kF16>(a.k, j * a.row_stride + d);
    a.scores[j] = s;
  }
  softmax<kF16>(a.scores, a.n_keys, a.scale);
  for (int64_t d = 0; d < a.head_dim; ++d) a.out[d] = 0;
  for (int64_t j = 0; j < a.n_keys; ++j)
    for (int64_t d = 0; d < a.head_dim; ++d) a.out[d] += a.scores[j] * load<kF16>(a.v, j * a.row_stride + d);
}

// ------------------------------------------------------------------ AVX2
template <bool kF16>
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const void* base, int64_t i) {
  if constexpr (kF16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  else
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
}

__attribute__((target("avx2,fma,f16c"))) inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// exp(x) for 8 lanes with x <= 0: 2^n * poly(r), r = x - n*ln2 split in two
// parts, a degree-7 Taylor polynomial (|r| <= ln2/2: under 1e-8 relative
// truncation), 0 below -87.3 where expf underflows.
__attribute__((target("avx2,fma,f16c"))) inline __m256 exp_nonpositive(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // 2^n for n in [-126, 0] built from the exponent bits.
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_max_ps(n, _mm256_set1_ps(-126.0f))), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_and_ps(result, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

// softmax<kF16> with the scaling, max and final rounding vectorized (F16C
// rounds to nearest even, like the scalar conversion); same arithmetic.
template <bool kF16>
__attribute__((target("avx2,fma,f16c"))) void softmax_avx2(float* scores, int64_t n, float scale) {
  const __m256 vscale = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(scores + j), vscale);
    _mm256_storeu_ps(scores + j, v);
    vmax = _mm256_max_ps(vmax, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max = -INFINITY;
  for (float l : lanes) max = std::fmax(max, l);
  for (; j < n; ++j) {
    scores[j] *= scale;
    max = std::fmax(max, scores[j]);
  }
  const __m256 vmax_all = _mm256_set1_ps(max);
  for (j = 0; j + 8 <= n; j += 8)
    _mm256_storeu_ps(scores + j, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), vmax_all)));
  for (; j < n; ++j) scores[j] = std::exp(scores[j] - max);
  double sum = 0;
  for (j = 0; j < n; ++j) sum += static_cast<double>(scores[j]);
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(scores + j), vinv);
    if constexpr (kF16) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(scores + j, p);
  }
  for (; j < n; ++j) {
    float p = scores[j] * inv;
    scores[j] = kF16 ? round_to_f16(p) : p;
  }
}

// head_dim is a multiple of 8 here.
template <bool kF16>
__attribute__((target("avx2,fma,f16c"))) void attention_avx2(const AttentionHead& a) {
  alignas(32) float q[kMaxHeadDim];
  for (int64_t d = 0; d < a.head_dim; ++d) q[d] = kF16 ? round_to_f16(a.q[d]) : a.q[d];
  // Four keys at a time: independent FMA chains instead of one latency-bound chain.
  int64_t j = 0;
  for (; j + 4 <= a.n_keys; j += 4) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t d = 0; d < a.head_dim; d += 8) {
      const __m256 qv = _mm256_load_ps(q + d);
      for (int64_t u = 0; u < 4; ++u) acc[u] = _mm256_fmadd_ps(qv, load8<kF16>(a.k, (j + u) * a.row_stride + d), acc[u]);
    }
    for (int64_t u = 0; u < 4; ++u) a.scores[j + u] = hsum(acc[u]);
  }
  for (; j < a.n_keys; ++j) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t row = j * a.row_stride;
    int64_t d = 0;
    for (; d + 16 <= a.head_dim; d += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_load_ps(q + d), load8<kF16>(a.k, row + d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_load_ps(q + d + 8), load8<kF16>(a.k, row + d + 8), acc1);
    }
    if (d < a.head_dim) acc0 = _mm256_fmadd_ps(_mm256_load_ps(q + d), load8<kF16>(a.k, row + d), acc0);
    a.scores[j] = hsum(_mm256_add_ps(acc0, acc1));
  }
  softmax_avx2<kF16>(a.scores, a.n_keys, a.scale);
  // Output in blocks of 64 dims held in eight registers across all keys.
  for (int64_t d0 = 0; d0 < a.head_dim; d0 += 64) {
    const int64_t lanes = std::min<int64_t>(64, a.head_dim - d0) / 8;
    __m256 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
    if (lanes == 8) {
      for (int64_t j = 0; j < a.n_keys; ++j) {
        const __m256 p = _mm256_set1_ps(a.scores[j]);
        const int64_t row = j * a.row_stride + d0;
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(p, load8<kF16>(a.v, row + 8 * r), acc[r]);
      }
    } else {
      for (int64_t j = 0; j < a.n_keys; ++j) {
        const __m256 p = _mm256_set1_ps(a.scores[j]);
        const int64_t row = j * a.row_stride + d0;
        for (int64_t r = 0; r < lanes; ++r) acc[r] = _mm256_fmadd_ps(p, load8<kF16>(a.v, row + 8 * r), acc[r]);
      }
    }
    for (int64_t r = 0; r < lanes; ++r) _mm256_storeu_ps(a.out + d0 + 8 * r, acc[r]);
  }
}

// ---------------------------------------------------------------- AVX-512
// GCC 12's avx512fintrin.h builds some intrinsics from _mm512_undefined_*()
// and then warns about it (-Wmaybe-uninitialized) when they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <bool kF16>
__attribute__((target("avx512f,avx2,fma,f16c"))) inline __m512 load16(const void* base, int64_t i) {
  if constexpr (kF16)
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
  else
    return _mm512_loadu_ps(static_cast<const float*>(base) + i);
}

// attention_avx2 with 16-lane vectors; head_dim is a multiple of 16 here.
template <bool kF16>
__attribute__((target("avx512f,avx2,fma,f16c"))) void attention_avx512(const AttentionHead& a) {
  alignas(64) float q[kMaxHeadDim];
  for (int64_t d = 0; d < a.head_dim; ++d) q[d] = kF16 ? round_to_f16(a.q[d]) : a.q[d];
  int64_t j = 0;
  for (; j + 4 <= a.n_keys; j += 4) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t d = 0; d < a.head_dim; d += 16) {
      const __m512 qv = _mm512_load_ps(q + d);
      for (int64_t u = 0; u < 4; ++u)
        acc[u] = _mm512_fmadd_ps(qv, load16<kF16>(a.k, (j + u) * a.row_stride + d), acc[u]);
    }
    for (int64_t u = 0; u < 4; ++u) a.scores[j + u] = _mm512_reduce_add_ps(acc[u]);
  }
  for (; j < a.n_keys; ++j) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < a.head_dim; d += 16)
      acc = _mm512_fmadd_ps(_mm512_load_ps(q + d), load16<kF16>(a.k, j * a.row_stride + d), acc);
    a.scores[j] = _mm512_reduce_add_ps(acc);
  }
  softmax_avx2<kF16>(a.scores, a.n_keys, a.scale);
  // Output in blocks of 128 dims held in eight registers across all keys.
  for (int64_t d0 = 0; d0 < a.head_dim; d0 += 128) {
    const int64_t lanes = std::min<int64_t>(128, a.head_dim - d0) / 16;
    __m512 acc[8];
    for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k = 0; k < a.n_keys; ++k) {
      const __m512 p = _mm512_set1_ps(a.scores[k]);
      const int64_t row = k * a.row_stride + d0;
      for (int64_t r = 0; r < lanes; ++r) acc[r] = _mm512_fmadd_ps(p, load16<kF16>(a.v, row + 16 * r), acc[r]);
    }
    for (int64_t r = 0; r < lanes; ++r) _mm512_storeu_ps(a.out + d0 + 16 * r, acc[r]);
  }
}

#pragma GCC diagnostic pop

bool use_avx512() {
  static const bool yes = use_avx2() && (cpu_features() & kCpuAvx512f) != 0;
  return yes;
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  // Two roundings, as ggml's rms_norm followed by a separate mul.
  for (int64_t i = 0; i < n; ++i) {
    float normed = x[i] * scale;
    y[i] = normed * w[i];
  }
}

void rope_angles(int64_t pos, int64_t n_dims, float base, float* cos_sin) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_dims / 2; ++i) {
    cos_sin[2 * i] = std::cos(theta);
    cos_sin[2 * i + 1] = std::sin(theta);
    theta *= theta_scale;
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, program::RopeMode mode) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // NEOX rotates (i, i + half); Normal rotates adjacent pairs (2i, 2i + 1).
      const int64_t i0 = mode == program::RopeMode::Neox ? i : 2 * i;
      const int64_t i1 = mode == program::RopeMode::Neox ? i + half : 2 * i + 1;
      const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const float x0 = head[i0], x1 = head[i1];
      head[i0] = x0 * c - x1 * s;
      head[i1] = x0 * s + x1 * c;
    }
  }
}

void attention_head_f16(const AttentionHead& a) {
  if (use_avx512() && a.head_dim % 16 == 0)
    attention_avx512<true>(a);
  else if (use_avx2() && a.head_dim % 8 == 0)
    attention_avx2<true>(a);
  else
    attention_scalar<true>(a);
}

void attention_head_f32(const AttentionHead& a) {
  if (use_avx512() && a.head_dim % 16 == 0)
    attention_avx512<false>(a);
  else if (use_avx2() && a.head_dim % 8 == 0)
    attention_avx2<false>(a);
  else
    attention_scalar<false>(a);
}

void to_f16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace lumen::runtime::ops
