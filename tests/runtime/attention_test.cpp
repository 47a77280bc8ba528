// The attention kernels (blocked AVX-512 or AVX2, per-head AVX2, scalar;
// picked by CPU and head size) against the scalar twin of
// tests/support/attention_twin.h, over many shapes: causal, sliding windows
// of several widths, logit soft-capping, f16 and f32 caches. ctest also runs this binary with LUMEN_MAX_CPU_ISA=avx2.
// Then the element-wise ops Gemma-style programs use, and rope's frequency
// factors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/runtime/kernels.h"
#include "support/attention_twin.h"
#include "support/tolerances.h"

namespace lumen::runtime::kernels {
namespace {

struct Shape {
  int64_t head_dim, heads, n_tokens, first_n_keys, window;
  float softcap;
  bool f16;
};

// The twin (tests/support/attention_twin.h), one (token, head) at a time:
// token t sees keys [first_n_keys + t - window, first_n_keys + t).
std::vector<float> twin(const Shape& s, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, float scale) {
  std::vector<float> out(static_cast<size_t>(s.n_tokens * s.heads * s.head_dim));
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t g = 0; g < s.heads; ++g) {
      test_support::AttentionTwinInput a;
      a.q = q.data() + (t * s.heads + g) * s.head_dim;
      a.k = k.data();
      a.v = v.data();
      a.row_stride = a.head_dim = s.head_dim;
      a.end = s.first_n_keys + t;
      a.begin = s.window > 0 ? std::max<int64_t>(0, a.end - s.window) : 0;
      a.scale = scale;
      a.softcap = s.softcap;
      a.f16 = s.f16;
      const std::vector<float> head = test_support::attention_twin(a).out;
      std::copy(head.begin(), head.end(), out.begin() + (t * s.heads + g) * s.head_dim);
    }
  return out;
}

// Runs the block kernel on random q, K, V of shape s and compares it with the
// twin; false (with a gtest failure naming the shape) on the first mismatch.
bool matches_twin(const Shape& s, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t keys = s.first_n_keys + s.n_tokens - 1;
  std::vector<float> q(static_cast<size_t>(s.n_tokens * s.heads * s.head_dim)), k(static_cast<size_t>(keys * s.head_dim)),
      v(k.size());
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  to_f16(k.data(), k16.data(), static_cast<int64_t>(k.size()));
  to_f16(v.data(), v16.data(), static_cast<int64_t>(v.size()));
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  std::vector<float> out(q.size(), NAN);
  AttentionBlock b{};
  b.q = q.data();
  b.q_token_stride = s.heads * s.head_dim;
  b.k = s.f16 ? static_cast<const void*>(k16.data()) : k.data();
  b.v = s.f16 ? static_cast<const void*>(v16.data()) : v.data();
  b.row_stride = s.head_dim;
  b.n_tokens = s.n_tokens;
  b.n_heads = s.heads;
  b.first_n_keys = s.first_n_keys;
  b.head_dim = s.head_dim;
  b.scale = scale;
  b.out = out.data();
  b.out_token_stride = s.heads * s.head_dim;
  b.window = s.window;
  b.softcap = s.softcap;
  if (s.f16)
    attention_block_f16(b);
  else
    attention_block_f32(b);
  const std::vector<float> want = twin(s, q, k, v, scale);
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(out[i] - want[i]) <= tolerance::kAttentionBlockRelative * (1.0f + std::fabs(want[i])))) {
      ADD_FAILURE() << "got " << out[i] << " want " << want[i] << " at " << i << ": head_dim " << s.head_dim
                    << " heads " << s.heads << " tokens " << s.n_tokens << " first " << s.first_n_keys << " window "
                    << s.window << " softcap " << s.softcap << " f16 " << s.f16;
      return false;
    }
  return true;
}

// Head sizes that are multiples of 16 (AVX-512 blocked), of 8 only (AVX2
// blocked) and neither (per head); 7 heads leave partial row tiles; a
// first block with no earlier keys (first 0: its first token sees
// nothing and gets zeros).
TEST(AttentionKernels, MatchTheScalarTwinWithWindowsAndSoftCapping) {
  std::mt19937 rng(7);
  int cases = 0;
  for (int64_t head_dim : {8, 10, 16, 24, 40, 64, 72, 80, 128})
    for (int64_t heads : {1, 7})
      for (int64_t n_tokens : {1, 5, 17})
        for (int64_t first : {0, 9, 40})
          for (int64_t window : {0, 1, 9, 100})
            for (float softcap : {0.0f, 2.5f})
              for (bool f16 : {true, false}) {
                ASSERT_TRUE(matches_twin({head_dim, heads, n_tokens, first, window, softcap, f16}, rng));
                ++cases;
              }
  EXPECT_EQ(cases, 9 * 2 * 3 * 3 * 4 * 2 * 2);
}

// Long contexts: many K panels per tile, windows that start far from key 0;
// head_dim 64 takes the AVX-512 tiles where the CPU has them, 40 the AVX2 ones.
TEST(AttentionKernels, MatchTheScalarTwinOverLongContexts) {
  std::mt19937 rng(11);
  for (int64_t head_dim : {40, 64})
    for (int64_t first : {400})
      for (int64_t window : {0, 256})
        for (bool f16 : {true, false})
          ASSERT_TRUE(matches_twin({head_dim, 7, 16, first, window, 0.0f, f16}, rng));
}

// A window covering every key changes nothing: the same bits as no window.
TEST(AttentionKernels, AWindowWiderThanTheContextIsNoWindow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t hd = 64, heads = 2, n = 7, first = 20, keys = first + n - 1;
  std::vector<float> q(static_cast<size_t>(n * heads * hd)), k(static_cast<size_t>(keys * hd)), v(k.size());
  for (auto* vec : {&q, &k, &v})
    for (float& x : *vec) x = normal(rng);
  std::vector<float> a(q.size()), b(q.size());
  AttentionBlock blk{q.data(), heads * hd, k.data(), v.data(), hd, n, heads, first, hd, 0.125f, a.data(), heads * hd};
  attention_block_f32(blk);
  blk.out = b.data();
  blk.window = keys;
  attention_block_f32(blk);
  EXPECT_EQ(a, b);
}

TEST(ElementwiseOps, GeluScaleAndSoftcapFollowGgml) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.37f) x.push_back(v);
  for (float v : {-10.0f, 10.0f, 0.0f, 1e-3f, -1e-3f}) x.push_back(v);
  std::vector<float> y(x.size());
  gelu(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    float want;
    if (v <= -10.0f) {
      want = 0.0f;
    } else if (v >= 10.0f) {
      want = v;
    } else {
      const double h = round_to_f16(v);
      want = round_to_f16(static_cast<float>(0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * h * (1 + 0.044715 * h * h)))));
    }
    // Both round to f16 last; float vs double before that may flip it by one f16 ulp.
    EXPECT_NEAR(y[i], want, tolerance::kF16Ulp * (1 + std::fabs(want))) << "x " << v;
  }
  std::vector<float> s(x.size());
  scale(x.data(), s.data(), static_cast<int64_t>(x.size()), 3.5f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(s[i], x[i] * 3.5f);
  softcap(x.data(), s.data(), static_cast<int64_t>(x.size()), 5.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(s[i], std::tanh(x[i] * 0.2f) * 5.0f);
    EXPECT_LE(std::fabs(s[i]), 5.0f);  // tanh is within [-1, 1] in float too
  }
}

// Llama 3's rope_freqs divide each pair's angle; factors of 1 change nothing.
TEST(Rope, FrequencyFactorsDivideEachPairsAngle) {
  const int64_t dims = 16;
  std::vector<float> plain(dims), ones_cs(dims), scaled(dims), ones(dims / 2, 1.0f), factors(dims / 2);
  for (int64_t i = 0; i < dims / 2; ++i) factors[static_cast<size_t>(i)] = 1.0f + static_cast<float>(i);
  rope_angles(37, dims, 500000.0f, plain.data());
  rope_angles(37, dims, 500000.0f, ones_cs.data(), ones.data());
  rope_angles(37, dims, 500000.0f, scaled.data(), factors.data());
  EXPECT_EQ(plain, ones_cs);
  const float theta_scale = std::pow(500000.0f, -2.0f / static_cast<float>(dims));
  float theta = 37.0f;
  for (int64_t i = 0; i < dims / 2; ++i) {
    const float angle = theta / factors[static_cast<size_t>(i)];
    EXPECT_EQ(scaled[static_cast<size_t>(2 * i)], std::cos(angle));
    EXPECT_EQ(scaled[static_cast<size_t>(2 * i + 1)], std::sin(angle));
    theta *= theta_scale;
  }
}

}  // namespace
}  // namespace lumen::runtime::kernels
