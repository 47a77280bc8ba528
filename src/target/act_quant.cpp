// Activation quantization to ActBlocks, bit-exact with ggml's x86
// quantize_row_q8_0 (AVX2 branch): d = amax/127 stored as fp16, id = 127/amax,
// q = round_half_even(x * id). Scalar and AVX2+F16C versions, same results.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "lumen/target/act_quant.h"
#include "lumen/target/isa.h"

namespace lumen {
namespace {

// The kernels want -128 * sum(q) to start their u8 x s8 accumulators (see act_quant.h).
int32_t sum_correction(const int8_t* qs) {
  int32_t sum = 0;
  for (int i = 0; i < kQ8Block; ++i) sum += qs[i];
  return -128 * sum;
}

}  // namespace

void quantize_act_scalar(const float* x, ActBlock* out, int64_t k) {
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    ActBlock& blk = out[b];
    blk.d = round_to_f16(d);
    for (int i = 0; i < kQ8Block; ++i) {
      const float v = std::nearbyint(xb[i] * id);
      // cvtps2dq turns NaN and out-of-range values into INT_MIN, which the
      // saturating packs turn into -128.
      int q = -128;
      if (std::fabs(v) < 2147483648.0f) q = int(std::fmax(-128.0f, std::fmin(127.0f, v)));
      blk.qs[i] = int8_t(q);
    }
    blk.sum = sum_correction(blk.qs);
  }
}

__attribute__((target("avx2,fma,f16c"))) void quantize_act_avx2(const float* x, ActBlock* out,
                                                                   int64_t k) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    const float* xb = x + b * kQ8Block;
    __m256 v0 = _mm256_loadu_ps(xb);
    __m256 v1 = _mm256_loadu_ps(xb + 8);
    __m256 v2 = _mm256_loadu_ps(xb + 16);
    __m256 v3 = _mm256_loadu_ps(xb + 24);
    __m256 amax = _mm256_andnot_ps(sign_bit, v0);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v1));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v2));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_scalar = _mm_cvtss_f32(m4);
    const float d = max_scalar / 127.0f;
    const float id = max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f;
    ActBlock& blk = out[b];
    blk.d = _cvtsh_ss(_cvtss_sh(d, 0));
    const __m256 mul = _mm256_set1_ps(id);
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_ROUND_NEAREST));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_ROUND_NEAREST));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_ROUND_NEAREST));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_ROUND_NEAREST));
    // Saturating packs interleave 128-bit lanes; the permutation restores order.
    __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    q = _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk.qs), q);
    // Sum of the 32 int8: widen to 16-bit pairs, then to 32-bit lanes.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    blk.sum = -128 * _mm_cvtsi128_si32(s);
  }
}

void quantize_act(const float* x, ActBlock* out, int64_t k) {
  const uint64_t need = kCpuAvx2 | kCpuF16c;
  static const bool use_avx2 = (cpu_features() & need) == need;
  if (use_avx2) {
    quantize_act_avx2(x, out, k);
  } else {
    quantize_act_scalar(x, out, k);
  }
}

}  // namespace lumen
