// Non-matmul numeric kernels (see kernels.h): scalar versions that state the
// arithmetic, and AVX2/F16C versions of the attention inner loops, chosen
// once from cpu_features().
#include "lumen/runtime/kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "lumen/common/internal_error.h"
#include "lumen/common/numeric.h"
#include "lumen/target/act_quant.h"
#include "lumen/target/kernel_abi.h"

namespace lumen::runtime::kernels {
namespace {

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

// y = softmax(x * scale) over [0, n), as ggml's soft_max computes it: the
// scaled values' max subtracted, exponentials kept in f32 but summed in
// double, then one f32 reciprocal and a multiplication per element; with kF16
// the probabilities are rounded to f16 (for an f16 V cache). y may equal x.
// A scale of 1 changes no value: x * 1.0f == x exactly. With softcap > 0
// each scaled value becomes softcap * tanh(value / softcap) first.
template <bool kF16>
void softmax(const float* x, float* y, int64_t n, float scale, float softcap = 0) {
  float max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    y[j] = x[j] * scale;
    if (softcap > 0) y[j] = std::tanh(y[j] * (1.0f / softcap)) * softcap;
    max = std::fmax(max, y[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float e = std::exp(y[j] - max);
    sum += static_cast<double>(e);
    y[j] = e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) {
    const float p = y[j] * inv;
    y[j] = kF16 ? round_to_f16(p) : p;
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
  softmax<kF16>(a.scores, a.scores, a.n_keys, a.scale, a.softcap);
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
// Soft-capping, when asked, runs as a scalar pass (tanh): only Gemma-style
// programs use it.
template <bool kF16>
__attribute__((target("avx2,fma,f16c"))) void softmax_avx2(float* scores, int64_t n, float scale, float softcap = 0) {
  if (softcap > 0) {
    for (int64_t i = 0; i < n; ++i) scores[i] = std::tanh(scores[i] * scale * (1.0f / softcap)) * softcap;
    scale = 1.0f;  // x * 1.0f == x: the vector pass below only takes the max
  }
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
  // Double sum in four vector lanes plus a scalar tail: the order differs
  // from a serial sum only far below float resolution of 1/sum.
  __m256d vsum0 = _mm256_setzero_pd(), vsum1 = _mm256_setzero_pd();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = _mm256_loadu_ps(scores + j);
    vsum0 = _mm256_add_pd(vsum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    vsum1 = _mm256_add_pd(vsum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double partial[4];
  _mm256_store_pd(partial, _mm256_add_pd(vsum0, vsum1));
  double sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  for (; j < n; ++j) sum += static_cast<double>(scores[j]);
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
  softmax_avx2<kF16>(a.scores, a.n_keys, a.scale, a.softcap);
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

// Calls f(std::integral_constant<int64_t, rows>) for rows in [1, kMax]: the
// last row tile of a block gets a kernel of its own height instead of
// padding rows (a decode step has as many rows as query heads per kv head).
template <int64_t kMax, class F>
void with_tile_rows(int64_t rows, F&& f) {
  if constexpr (kMax > 1)
    if (rows < kMax) return with_tile_rows<kMax - 1>(rows, f);
  f(std::integral_constant<int64_t, kMax>{});
}

// Transposes the 8x8 block held in r[0..7] (rows) in place.
__attribute__((target("avx2,fma,f16c"))) inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// The operands of attention_block_tiled, converted once per block: q rows
// (rounded to f16 with kF16), K in panel_width-key panels stored transposed
// (panel[d][key], zero keys up to the panel bound; 8x8 blocks transposed in
// registers) and V as f32 rows, both from key_base on. head_dim and
// panel_width are multiples of 8.
template <bool kF16>
__attribute__((target("avx2,fma,f16c"))) void pack_attention_block(const AttentionBlock& b, int64_t key_base,
                                                                    int64_t n_keys, int64_t panel_width, float* qs,
                                                                    float* kt, float* vf) {
  const int64_t hd = b.head_dim, n_rows = b.n_tokens * b.n_heads;
  for (int64_t i = 0; i < n_rows; ++i)
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 x = _mm256_loadu_ps(b.q + (i / b.n_heads) * b.q_token_stride + (i % b.n_heads) * hd + d);
      if constexpr (kF16) x = _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      _mm256_storeu_ps(qs + i * hd + d, x);
    }
  const int64_t keys_pad = (n_keys + panel_width - 1) / panel_width * panel_width;
  const int64_t elem = kF16 ? 2 : 4;
  const void* k_base = static_cast<const uint8_t*>(b.k) + key_base * b.row_stride * elem;
  const void* v_base = static_cast<const uint8_t*>(b.v) + key_base * b.row_stride * elem;
  for (int64_t j0 = 0; j0 < keys_pad; j0 += 8) {
    float* panel = kt + (j0 / panel_width) * hd * panel_width + j0 % panel_width;
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 block[8];
      for (int64_t u = 0; u < 8; ++u)
        block[u] = j0 + u < n_keys ? load8<kF16>(k_base, (j0 + u) * b.row_stride + d) : _mm256_setzero_ps();
      transpose8x8(block);
      for (int64_t u = 0; u < 8; ++u) _mm256_storeu_ps(panel + (d + u) * panel_width, block[u]);
    }
  }
  for (int64_t j = 0; j < n_keys; ++j)
    for (int64_t d = 0; d < hd; d += 8) _mm256_storeu_ps(vf + j * hd + d, load8<kF16>(v_base, j * b.row_stride + d));
}

// The register tiles of attention_block_tiled for 16 ymm registers: up to
// kRows rows x kPanel keys of scores (kRows * kPanel / 8 accumulators,
// kPanel / 8 K vectors, one broadcast q) and up to kRows rows x kDims dims of
// output. The loops over a tile's registers are unrolled by pragma so GCC
// keeps the accumulator arrays in registers.
template <int64_t kRowsT, int64_t kPanelT, int64_t kDims>
struct Avx2BlockTilesT {
  static constexpr int64_t kRows = kRowsT, kPanel = kPanelT;

  // Both products are the same micro-GEMM: for kTileRows rows r and kVecs
  // vectors v, out[r][8v..] = sum over i < depth of a[r * a_stride + i] *
  // b[i * b_stride + 8v..] (scores: a = q, b = a K panel; output: a = the
  // probabilities, b = V rows).
  template <int64_t kTileRows, int64_t kVecs>
  __attribute__((target("avx2,fma,f16c"))) static void broadcast_fma_tile(const float* a, int64_t a_stride,
                                                                         const float* b, int64_t b_stride,
                                                                         int64_t depth, float* const* out) {
    __m256 acc[kTileRows][kVecs];
#pragma GCC unroll 16
    for (int64_t r = 0; r < kTileRows; ++r)
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int64_t i = 0; i < depth; ++i) {
      __m256 bv[kVecs];
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) bv[v] = _mm256_loadu_ps(b + i * b_stride + 8 * v);
#pragma GCC unroll 16
      for (int64_t r = 0; r < kTileRows; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r * a_stride + i);
#pragma GCC unroll 16
        for (int64_t v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
#pragma GCC unroll 16
    for (int64_t r = 0; r < kTileRows; ++r)
#pragma GCC unroll 16
      for (int64_t v = 0; v < kVecs; ++v) _mm256_storeu_ps(out[r] + 8 * v, acc[r][v]);
  }

  static void scores(int64_t rows, const float* q, const float* kt, int64_t hd, int64_t tile_keys, float* s,
                     int64_t s_stride) {
    with_tile_rows<kRows>(rows, [&](auto tile_rows) {
      constexpr int64_t kTileRows = decltype(tile_rows)::value;
      for (int64_t p0 = 0; p0 < tile_keys; p0 += kPanel) {
        float* out[kTileRows];
        for (int64_t r = 0; r < kTileRows; ++r) out[r] = s + r * s_stride + p0;
        broadcast_fma_tile<kTileRows, kPanel / 8>(q, hd, kt + p0 * hd, kPanel, hd, out);
      }
    });
  }

  static void outputs(int64_t rows, const float* p, int64_t p_stride, const float* vf, int64_t hd,
                      int64_t tile_keys, float* const* out) {
    with_tile_rows<kRows>(rows, [&](auto tile_rows) {
      constexpr int64_t kTileRows = decltype(tile_rows)::value;
      for (int64_t d0 = 0; d0 < hd; d0 += kDims) {
        float* dims[kTileRows];
        for (int64_t r = 0; r < kTileRows; ++r) dims[r] = out[r] + d0;
        if (hd - d0 >= kDims)
          broadcast_fma_tile<kTileRows, kDims / 8>(p, p_stride, vf + d0, hd, tile_keys, dims);
        else  // the last dims, a multiple of 8 narrower than kDims
          with_tile_rows<kDims / 8>((hd - d0) / 8, [&](auto lanes) {
            broadcast_fma_tile<kTileRows, decltype(lanes)::value>(p, p_stride, vf + d0, hd, tile_keys, dims);
          });
      }
    });
  }
};
// 6 x 16 for both products (12 accumulators each): measured fastest on Zen 5
// with LUMEN_MAX_CPU_ISA=avx2 against 4x16, 4x24, 3x32 score tiles and
// 4x24, 4x32, 6x8 output tiles (docs/performance.md).
using Avx2BlockTiles = Avx2BlockTilesT<6, 16, 16>;

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
  softmax_avx2<kF16>(a.scores, a.n_keys, a.scale, a.softcap);
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

// The register tiles of attention_block_tiled for AVX-512: up to 6 rows x 32
// keys of scores are 12 accumulators fed by broadcast q values; up to 6 rows x
// 64 dims of output are 24 accumulators.
struct Avx512BlockTiles {
  static constexpr int64_t kRows = 6, kPanel = 32;

  template <int64_t kTileRows>
  __attribute__((target("avx512f,avx2,fma,f16c"))) static void score_tile(const float* q, const float* kt, int64_t hd,
                                                                          int64_t tile_keys, float* s,
                                                                          int64_t s_stride) {
    for (int64_t p0 = 0; p0 < tile_keys; p0 += kPanel) {
      const float* panel = kt + p0 * hd;
      __m512 acc[kTileRows][2];
      for (int64_t r = 0; r < kTileRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (int64_t d = 0; d < hd; ++d) {
        const __m512 k0 = _mm512_loadu_ps(panel + d * kPanel), k1 = _mm512_loadu_ps(panel + d * kPanel + 16);
        for (int64_t r = 0; r < kTileRows; ++r) {
          const __m512 qv = _mm512_set1_ps(q[r * hd + d]);
          acc[r][0] = _mm512_fmadd_ps(qv, k0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(qv, k1, acc[r][1]);
        }
      }
      for (int64_t r = 0; r < kTileRows; ++r) {
        _mm512_storeu_ps(s + r * s_stride + p0, acc[r][0]);
        _mm512_storeu_ps(s + r * s_stride + p0 + 16, acc[r][1]);
      }
    }
  }

  static void scores(int64_t rows, const float* q, const float* kt, int64_t hd, int64_t tile_keys, float* s,
                     int64_t s_stride) {
    with_tile_rows<kRows>(rows, [&](auto tile_rows) { score_tile<decltype(tile_rows)::value>(q, kt, hd, tile_keys, s, s_stride); });
  }

  template <int64_t kTileRows>
  __attribute__((target("avx512f,avx2,fma,f16c"))) static void output_tile(const float* p, int64_t p_stride,
                                                                           const float* vf, int64_t hd,
                                                                           int64_t tile_keys, float* const* out) {
    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
      const int64_t lanes = std::min<int64_t>(64, hd - d0) / 16;
      __m512 acc[kTileRows][4];
      for (int64_t r = 0; r < kTileRows; ++r)
        for (int64_t l = 0; l < 4; ++l) acc[r][l] = _mm512_setzero_ps();
      if (lanes == 4) {
        for (int64_t k = 0; k < tile_keys; ++k) {
          const float* v = vf + k * hd + d0;
          const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16), v2 = _mm512_loadu_ps(v + 32),
                       v3 = _mm512_loadu_ps(v + 48);
          for (int64_t r = 0; r < kTileRows; ++r) {
            const __m512 pv = _mm512_set1_ps(p[r * p_stride + k]);
            acc[r][0] = _mm512_fmadd_ps(pv, v0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(pv, v1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(pv, v2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(pv, v3, acc[r][3]);
          }
        }
      } else {
        for (int64_t k = 0; k < tile_keys; ++k) {
          const float* v = vf + k * hd + d0;
          for (int64_t r = 0; r < kTileRows; ++r) {
            const __m512 pv = _mm512_set1_ps(p[r * p_stride + k]);
            for (int64_t l = 0; l < lanes; ++l) acc[r][l] = _mm512_fmadd_ps(pv, _mm512_loadu_ps(v + 16 * l), acc[r][l]);
          }
        }
      }
      for (int64_t r = 0; r < kTileRows; ++r)
        for (int64_t l = 0; l < lanes; ++l) _mm512_storeu_ps(out[r] + d0 + 16 * l, acc[r][l]);
    }
  }

  static void outputs(int64_t rows, const float* p, int64_t p_stride, const float* vf, int64_t hd,
                      int64_t tile_keys, float* const* out) {
    with_tile_rows<kRows>(rows, [&](auto tile_rows) { output_tile<decltype(tile_rows)::value>(p, p_stride, vf, hd, tile_keys, out); });
  }
};

#pragma GCC diagnostic pop

// attention_block as two small GEMMs with the register tiles of Tiles
// (Avx512BlockTiles, Avx2BlockTiles). Rows are the (token, head) queries,
// token-major. K is converted once into Tiles::kPanel-key panels stored
// transposed (panel[d][key]), V once into f32 rows (pack_attention_block).
// Tiles stop at the last key their rows can see (causal bound);
// probabilities past a row's own bound are zero, so the shared tile bound does
// not change its sums. With a sliding window, keys are counted from the first
// one the block's first token sees (key_base); probabilities before each
// row's own first key are zero. A row that sees no key gets zeros. The last
// row tile of a block is as high as the rows left (no padding rows).
template <class Tiles, bool kF16>
void attention_block_tiled(const AttentionBlock& b) {
  constexpr int64_t kRows = Tiles::kRows, kPanel = Tiles::kPanel;
  const int64_t hd = b.head_dim, heads = b.n_heads;
  const int64_t n_rows = b.n_tokens * heads;
  const int64_t key_base = b.window > 0 ? std::max<int64_t>(0, b.first_n_keys - b.window) : 0;
  const int64_t n_keys = std::max<int64_t>(0, b.first_n_keys + b.n_tokens - 1 - key_base);  // what the last token sees
  const int64_t keys_pad = (n_keys + kPanel - 1) / kPanel * kPanel;
  thread_local std::vector<float> qs, kt, vf, s;
  qs.resize(static_cast<size_t>(n_rows * hd));
  kt.resize(static_cast<size_t>(keys_pad * hd));
  vf.resize(static_cast<size_t>(n_keys * hd));
  s.resize(static_cast<size_t>(n_rows * keys_pad));
  pack_attention_block<kF16>(b, key_base, n_keys, kPanel, qs.data(), kt.data(), vf.data());
  // Keys [first_key_of_row, keys_of_row) of a row, counted from key_base.
  auto keys_of_row = [&](int64_t row) { return b.first_n_keys + row / heads - key_base; };
  auto first_key_of_row = [&](int64_t row) {
    return b.window > 0 ? std::max<int64_t>(0, b.first_n_keys + row / heads - b.window) - key_base : 0;
  };
  auto tile_rows = [&](int64_t r0) { return std::min(kRows, n_rows - r0); };
  auto tile_keys = [&](int64_t r0) { return keys_of_row(r0 + tile_rows(r0) - 1); };

  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows)
    Tiles::scores(tile_rows(r0), qs.data() + r0 * hd, kt.data(), hd, tile_keys(r0), s.data() + r0 * keys_pad,
                  keys_pad);
  // Probabilities; zero outside each row's keys.
  for (int64_t i = 0; i < n_rows; ++i) {
    float* scores = s.data() + i * keys_pad;
    const int64_t nk = keys_of_row(i), k0 = first_key_of_row(i);
    if (nk > k0) softmax_avx2<kF16>(scores + k0, nk - k0, b.scale, b.softcap);
    std::fill(scores, scores + k0, 0.0f);
    std::fill(scores + nk, scores + keys_pad, 0.0f);
  }
  // Output = P V.
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    float* out[kRows];
    for (int64_t r = 0; r < tile_rows(r0); ++r) {
      const int64_t i = r0 + r;
      out[r] = b.out + (i / heads) * b.out_token_stride + (i % heads) * hd;
    }
    Tiles::outputs(tile_rows(r0), s.data() + r0 * keys_pad, keys_pad, vf.data(), hd, tile_keys(r0), out);
  }
}

bool use_avx512() {
  static const bool yes = use_avx2() && (cpu_features() & kCpuAvx512f) != 0;
  return yes;
}

}  // namespace

namespace {
// rms_norm with the same float squares and products; the double sum runs in
// eight lanes (order differs only far below float resolution).
__attribute__((target("avx2,fma,f16c"))) void rms_norm_avx2(const float* x, const float* w, float* y, int64_t n,
                                                             float eps) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  alignas(32) double partial[4];
  _mm256_store_pd(partial, _mm256_add_pd(acc0, acc1));
  double sum = (partial[0] + partial[1]) + (partial[2] + partial[3]);
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 vscale = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vscale), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) {
    float normed = x[i] * scale;
    y[i] = normed * w[i];
  }
}
}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (use_avx2()) {
    rms_norm_avx2(x, w, y, n, eps);
    return;
  }
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

void rope_angles(int64_t pos, int64_t n_dims, float base, float* cos_sin, const float* freq_factors) {
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_dims / 2; ++i) {
    const float angle = freq_factors != nullptr ? theta / freq_factors[i] : theta;
    cos_sin[2 * i] = std::cos(angle);
    cos_sin[2 * i + 1] = std::sin(angle);
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

namespace {
// Per-query fallback for CPUs or head sizes the blocked kernel does not cover.
void attention_block_by_head(const AttentionBlock& b, bool f16) {
  thread_local std::vector<float> scores;
  scores.resize(static_cast<size_t>(b.first_n_keys + b.n_tokens));
  const int64_t elem = f16 ? 2 : 4;
  for (int64_t t = 0; t < b.n_tokens; ++t)
    for (int64_t g = 0; g < b.n_heads; ++g) {
      const int64_t end = b.first_n_keys + t;
      const int64_t first = b.window > 0 ? std::max<int64_t>(0, end - b.window) : 0;
      AttentionHead a{};
      a.q = b.q + t * b.q_token_stride + g * b.head_dim;
      a.k = static_cast<const uint8_t*>(b.k) + first * b.row_stride * elem;
      a.v = static_cast<const uint8_t*>(b.v) + first * b.row_stride * elem;
      a.row_stride = b.row_stride;
      a.n_keys = end - first;
      a.head_dim = b.head_dim;
      a.scale = b.scale;
      a.softcap = b.softcap;
      a.scores = scores.data();
      a.out = b.out + t * b.out_token_stride + g * b.head_dim;
      if (f16)
        attention_head_f16(a);
      else
        attention_head_f32(a);
    }
}
}  // namespace

void attention_block_f16(const AttentionBlock& b) {
  if (use_avx512() && b.head_dim % 16 == 0 && b.head_dim <= kMaxHeadDim)
    attention_block_tiled<Avx512BlockTiles, true>(b);
  else if (use_avx2() && b.head_dim % 8 == 0 && b.head_dim <= kMaxHeadDim)
    attention_block_tiled<Avx2BlockTiles, true>(b);
  else
    attention_block_by_head(b, true);
}

void attention_block_f32(const AttentionBlock& b) {
  if (use_avx512() && b.head_dim % 16 == 0 && b.head_dim <= kMaxHeadDim)
    attention_block_tiled<Avx512BlockTiles, false>(b);
  else if (use_avx2() && b.head_dim % 8 == 0 && b.head_dim <= kMaxHeadDim)
    attention_block_tiled<Avx2BlockTiles, false>(b);
  else
    attention_block_by_head(b, false);
}

namespace {
// ---------------------------------------------------------- Q8_0 cache
// The scores of keys [0, n_keys) (rows row_blocks blocks apart) against one
// quantized query of nb blocks, as ggml's x86 vec_dot_q8_0_q8_0: lane l of a
// block is the sum of the products of its elements 4l..4l+3, fused with
// d_k * d_q into lane accumulator l; the 8 lanes are then added as its
// hsum_float_8 does.
inline float add_lanes(const float* lane) {
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

void q8_0_scores_scalar(const BlockQ8_0* k, int64_t row_blocks, int64_t n_keys, const ActBlock* q, int64_t nb,
                        float* scores) {
  for (int64_t j = 0; j < n_keys; ++j) {
    const BlockQ8_0* key = k + j * row_blocks;
    float lane[8] = {};
    for (int64_t blk = 0; blk < nb; ++blk) {
      const float d = f16_to_f32(key[blk].d) * q[blk].d;
      for (int l = 0; l < 8; ++l) {
        int32_t sum = 0;
        for (int i = 4 * l; i < 4 * l + 4; ++i) sum += int32_t{key[blk].qs[i]} * int32_t{q[blk].qs[i]};
        lane[l] = std::fma(d, static_cast<float>(sum), lane[l]);
      }
    }
    scores[j] = add_lanes(lane);
  }
}

__attribute__((target("avx2,fma,f16c"))) inline __m256 q8_0_dot_lanes(const BlockQ8_0* key, const ActBlock* q,
                                                                      int64_t nb) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < nb; ++blk) {
    const __m256i kq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(key[blk].qs));
    const __m256i qq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[blk].qs));
    // |k| * sign(q, k) in u8 x s8 pairs: |products| <= 127 * 127, so the i16 pair sums cannot saturate.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(kq, kq), _mm256_sign_epi8(qq, kq));
    const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(key[blk].d) * q[blk].d), sums, acc);
  }
  return acc;
}

// q8_0_scores_scalar with the lanes of eight keys added together after a
// transpose (the same additions in the same order).
__attribute__((target("avx2,fma,f16c"))) void q8_0_scores_avx2(const BlockQ8_0* k, int64_t row_blocks,
                                                                int64_t n_keys, const ActBlock* q, int64_t nb,
                                                                float* scores) {
  int64_t j = 0;
  for (; j + 8 <= n_keys; j += 8) {
    __m256 lanes[8];
    for (int64_t u = 0; u < 8; ++u) lanes[u] = q8_0_dot_lanes(k + (j + u) * row_blocks, q, nb);
    transpose8x8(lanes);
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(lanes[0], lanes[4]), _mm256_add_ps(lanes[2], lanes[6])),
                                     _mm256_add_ps(_mm256_add_ps(lanes[1], lanes[5]), _mm256_add_ps(lanes[3], lanes[7])));
    _mm256_storeu_ps(scores + j, sum);
  }
  for (; j < n_keys; ++j) {
    alignas(32) float lane[8];
    _mm256_store_ps(lane, q8_0_dot_lanes(k + j * row_blocks, q, nb));
    scores[j] = add_lanes(lane);
  }
}

// out = fma(v_j, vs_j, out * ms_j) for keys j in order (vf: their V rows, hd
// apart), out held in kVecs registers (hd = 8 * kVecs); ms_j = 1 leaves out
// exact, so this is the flash-attention loop's rescale-then-accumulate.
template <int kVecs>
__attribute__((target("avx2,fma,f16c"))) void accumulate_v_avx2(const float* ms, const float* vs, int64_t n_keys,
                                                                 const float* vf, float* out) {
  __m256 acc[kVecs];
#pragma GCC unroll 16
  for (int r = 0; r < kVecs; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n_keys; ++j) {
    const __m256 m = _mm256_set1_ps(ms[j]), p = _mm256_set1_ps(vs[j]);
    const float* v = vf + j * 8 * kVecs;
#pragma GCC unroll 16
    for (int r = 0; r < kVecs; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8 * r), p, _mm256_mul_ps(acc[r], m));
  }
#pragma GCC unroll 16
  for (int r = 0; r < kVecs; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

// The same for any head size (a multiple of 8), out in memory.
__attribute__((target("avx2,fma,f16c"))) void accumulate_v_avx2_any(const float* ms, const float* vs, int64_t n_keys,
                                                                     const float* vf, int64_t hd, float* out) {
  std::fill(out, out + hd, 0.0f);
  for (int64_t j = 0; j < n_keys; ++j) {
    const __m256 m = _mm256_set1_ps(ms[j]), p = _mm256_set1_ps(vs[j]);
    for (int64_t d = 0; d < hd; d += 8)
      _mm256_storeu_ps(out + d, _mm256_fmadd_ps(_mm256_loadu_ps(vf + j * hd + d), p,
                                                _mm256_mul_ps(_mm256_loadu_ps(out + d), m)));
  }
}

// The online softmax and P·V of one row over its keys (scores: the raw dot
// products; vf: the keys' dequantized V rows, head_dim apart), as llama.cpp's
// flash attention runs them. The running maximum and sum need only the
// scores, so the weights come first: key j rescales what was accumulated by
// ms_j (expf(old max - s) at a new maximum, else 1) and adds its V row times
// vs_j (1 at a new maximum, else expf(s - max)); then the accumulation.
template <bool kAvx2>
void q8_0_online_softmax(const float* scores, int64_t n_keys, const float* vf, int64_t hd, float scale, float softcap,
                         float* out) {
  if (n_keys == 0) {
    std::fill(out, out + hd, 0.0f);
    return;
  }
  thread_local std::vector<float> ms, vs;
  ms.resize(static_cast<size_t>(n_keys));
  vs.resize(static_cast<size_t>(n_keys));
  if (softcap > 0) scale /= softcap;
  float max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    float s = scores[j] * scale;
    if (softcap > 0) s = softcap * std::tanh(s);
    float m = 1.0f, v = 1.0f;
    if (s > max) {
      m = std::exp(max - s);
      max = s;
    } else {
      v = std::exp(s - max);
    }
    ms[static_cast<size_t>(j)] = m;
    vs[static_cast<size_t>(j)] = v;
    // Two roundings, as ggml's S = S*ms + vs compiles.
    const float scaled = sum * m;
    sum = scaled + v;
  }
  if constexpr (kAvx2) {
    switch (hd) {
      case 32: accumulate_v_avx2<4>(ms.data(), vs.data(), n_keys, vf, out); break;
      case 64: accumulate_v_avx2<8>(ms.data(), vs.data(), n_keys, vf, out); break;
      case 96: accumulate_v_avx2<12>(ms.data(), vs.data(), n_keys, vf, out); break;
      case 128: accumulate_v_avx2<16>(ms.data(), vs.data(), n_keys, vf, out); break;
      default: accumulate_v_avx2_any(ms.data(), vs.data(), n_keys, vf, hd, out); break;
    }
  } else {
    std::fill(out, out + hd, 0.0f);
    for (int64_t j = 0; j < n_keys; ++j)
      for (int64_t d = 0; d < hd; ++d) out[d] = std::fma(vf[j * hd + d], vs[static_cast<size_t>(j)], out[d] * ms[static_cast<size_t>(j)]);
  }
  const float inv = 1.0f / sum;
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

template <bool kAvx2>
void attention_block_q8_0_impl(const AttentionBlock& b) {
  const int64_t hd = b.head_dim, heads = b.n_heads, nb = hd / kQ8Block, row_blocks = b.row_stride / kQ8Block;
  const int64_t n_rows = b.n_tokens * heads;
  const int64_t key_base = b.window > 0 ? std::max<int64_t>(0, b.first_n_keys - b.window) : 0;
  const int64_t n_keys = std::max<int64_t>(0, b.first_n_keys + b.n_tokens - 1 - key_base);  // what the last token sees
  const auto* k = static_cast<const BlockQ8_0*>(b.k) + key_base * row_blocks;
  const auto* v = static_cast<const BlockQ8_0*>(b.v) + key_base * row_blocks;
  // V rows dequantized once for every row of the block (exact: q * d).
  thread_local std::vector<float> vf, scores;
  thread_local std::vector<ActBlock> q;
  vf.resize(static_cast<size_t>(n_keys * hd));
  scores.resize(static_cast<size_t>(n_keys));
  q.resize(static_cast<size_t>(nb));
  for (int64_t j = 0; j < n_keys; ++j) dequantize_row_q8_0(v + j * row_blocks, vf.data() + j * hd, static_cast<size_t>(hd));
  for (int64_t i = 0; i < n_rows; ++i) {
    const int64_t t = i / heads, g = i % heads;
    const int64_t end = b.first_n_keys + t - key_base;  // keys [first, end) of this row, from key_base
    const int64_t first = b.window > 0 ? std::max<int64_t>(0, b.first_n_keys + t - b.window) - key_base : 0;
    const int64_t row_keys = std::max<int64_t>(0, end - first);
    quantize_act(b.q + t * b.q_token_stride + g * hd, q.data(), hd);
    if constexpr (kAvx2)
      q8_0_scores_avx2(k + first * row_blocks, row_blocks, row_keys, q.data(), nb, scores.data());
    else
      q8_0_scores_scalar(k + first * row_blocks, row_blocks, row_keys, q.data(), nb, scores.data());
    q8_0_online_softmax<kAvx2>(scores.data(), row_keys, vf.data() + first * hd, hd, b.scale, b.softcap,
                               b.out + t * b.out_token_stride + g * hd);
  }
}
}  // namespace

void attention_block_q8_0(const AttentionBlock& b) {
  LUMEN_ASSERT(b.head_dim % kQ8Block == 0 && b.row_stride % kQ8Block == 0, "q8_0 attention needs whole blocks");
  if (use_avx2())
    attention_block_q8_0_impl<true>(b);
  else
    attention_block_q8_0_impl<false>(b);
}

void to_q8_0(const float* x, BlockQ8_0* out, int64_t n) {
  thread_local std::vector<ActBlock> blocks;
  blocks.resize(static_cast<size_t>(n / kQ8Block));
  quantize_act(x, blocks.data(), n);
  for (size_t i = 0; i < blocks.size(); ++i) {
    out[i].d = f32_to_f16(blocks[i].d);  // already an f16 value: exact
    std::memcpy(out[i].qs, blocks[i].qs, sizeof(out[i].qs));
  }
}

namespace {
__attribute__((target("avx2,fma,f16c"))) void to_f16_f16c(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}
}  // namespace

void to_f16(const float* x, uint16_t* out, int64_t n) {
  // F16C rounds to nearest even, like f32_to_f16.
  if (use_avx2()) {
    to_f16_f16c(x, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

namespace {
__attribute__((target("avx2,fma,f16c"))) void scale_avx2(const float* x, float* y, int64_t n, float s) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) y[i] = x[i] * s;
}
}  // namespace

void scale(const float* x, float* y, int64_t n, float s) {
  if (use_avx2()) {
    scale_avx2(x, y, n, s);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void gelu(const float* x, float* y, int64_t n) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kCoef = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) {
      y[i] = 0.0f;
    } else if (v >= 10.0f) {
      y[i] = v;
    } else {
      const float h = round_to_f16(v);
      y[i] = round_to_f16(0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoef * h * h))));
    }
  }
}

void softcap(const float* x, float* y, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i] * inv) * cap;
}

void softmax_row(const float* x, float* y, int64_t n) { softmax<false>(x, y, n, 1.0f); }

const RowKernel* row_kernel(ops::OpId op) {
  static const RowKernel kScale{scale, true, false};
  static const RowKernel kGelu{[](const float* x, float* y, int64_t n, float) { gelu(x, y, n); }, false, false};
  static const RowKernel kSoftcap{softcap, true, true};
  switch (op) {
    case ops::OpId::Scale: return &kScale;
    case ops::OpId::Gelu: return &kGelu;
    case ops::OpId::Softcap: return &kSoftcap;
    default: return nullptr;
  }
}

}  // namespace lumen::runtime::kernels
