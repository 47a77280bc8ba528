// The runtime's vector ops (src/runtime/ops.cpp) against scalar twins written
// here from the arithmetic ops.h states, on random data over many sizes,
// odd ones included. Which path runs depends on the CPU: ctest runs this
// binary twice, as is (AVX-512 on an AVX-512 host) and with
// LUMEN_MAX_CPU_ISA=avx2 (the AVX2 paths); sizes that are not a multiple of
// the vector width take the library's own scalar path in both runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/runtime/kernels.h"
#include "lumen/target/isa.h"
#include "support/attention_twin.h"
#include "support/tolerances.h"

namespace lumen::runtime {
namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng, float std = 1.0f) {
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Which vector path the dispatch picks for a row of `n` (for messages).
std::string path_for(int64_t n) {
  const uint64_t f = cpu_features();
  if ((f & kCpuAvx512f) && n % 16 == 0) return "avx512";
  if ((f & kCpuAvx2) && n % 8 == 0) return "avx2";
  return "scalar";
}

// What this run covers: the best ISA of this host, or the one LUMEN_MAX_CPU_ISA
// caps it to (ctest's VectorOps.AsAvx2Machine). The dispatch picks its paths
// from cpu_features(), so the cap must leave nothing above that ISA, and the
// host must have every feature of the ISA under test (else the paths named in
// the messages below would not be the ones that ran).
TEST(VectorOps, RunsThePathsOfTheIsaUnderTest) {
  const uint64_t features = cpu_features();
  const Isa isa = best_isa(features);  // throws below AVX2+FMA+F16C, the floor of every vector path
  EXPECT_EQ(features & required_features(isa), required_features(isa)) << cpu_feature_names(features);
  const char* cap = std::getenv("LUMEN_MAX_CPU_ISA");
  if (cap != nullptr && *cap != '\0') {
    EXPECT_STREQ(to_string(isa), cap) << "the host lacks the ISA this run is for: " << cpu_feature_names(features);
    EXPECT_EQ(features & ~required_features(isa), 0u) << cpu_feature_names(features);
  }
  RecordProperty("cpu_features", cpu_feature_names(features));
}

// rms_norm: the sum of float squares in double, one float scale, two roundings.
TEST(VectorOps, RmsNormMatchesScalar) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 128, 896, 1000}) {
    const std::vector<float> x = random_vector(static_cast<size_t>(n), rng, 2.0f);
    const std::vector<float> w = random_vector(static_cast<size_t>(n), rng);
    std::vector<float> y(static_cast<size_t>(n));
    const float eps = 1e-6f;
    kernels::rms_norm(x.data(), w.data(), y.data(), n, eps);
    double sum = 0;
    for (float v : x) sum += static_cast<double>(v * v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const float want = (x[static_cast<size_t>(i)] * scale) * w[static_cast<size_t>(i)];
      EXPECT_NEAR(y[static_cast<size_t>(i)], want,
                  tolerance::kRmsNormUlps * tolerance::kFp32Ulp * std::fabs(want) + tolerance::kZeroFloor)
          << "n=" << n << " i=" << i;
    }
  }
}

// to_f16 (F16C) rounds exactly as the scalar conversion, specials included.
TEST(VectorOps, ToF16IsBitExact) {
  std::mt19937 rng(2);
  for (int64_t n : {1, 5, 8, 13, 64, 257}) {
    std::vector<float> x = random_vector(static_cast<size_t>(n), rng, 100.0f);
    if (n > 4) {
      x[0] = 65520.0f;          // rounds to infinity
      x[1] = 1e-7f;             // f16 subnormal
      x[2] = -0.0f;
      x[3] = std::ldexp(1.0f, -25) * 1.5f;  // a halfway case
    }
    std::vector<uint16_t> out(static_cast<size_t>(n));
    kernels::to_f16(x.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(out[static_cast<size_t>(i)], f32_to_f16(x[static_cast<size_t>(i)])) << "n=" << n << " i=" << i;
  }
}

// rope: each pair (NEOX: i, i + half; normal: 2i, 2i + 1) rotated by the
// angle pos * base^(-2i/d), built by repeated fp32 multiplication.
TEST(VectorOps, RopeRotatesThePairsOfEachMode) {
  std::mt19937 rng(3);
  for (int64_t head_dim : {2, 6, 32, 64, 80, 128}) {
    for (program::RopeMode mode : {program::RopeMode::Neox, program::RopeMode::Normal}) {
      const int64_t heads = 3, pos = 17;
      std::vector<float> cs(static_cast<size_t>(head_dim));
      kernels::rope_angles(pos, head_dim, 10000.0f, cs.data());
      const float theta_scale = std::pow(10000.0f, -2.0f / static_cast<float>(head_dim));
      float theta = static_cast<float>(pos);
      for (int64_t i = 0; i < head_dim / 2; ++i, theta *= theta_scale) {
        EXPECT_EQ(cs[static_cast<size_t>(2 * i)], std::cos(theta));
        EXPECT_EQ(cs[static_cast<size_t>(2 * i + 1)], std::sin(theta));
      }
      const std::vector<float> x = random_vector(static_cast<size_t>(heads * head_dim), rng);
      std::vector<float> y = x;
      kernels::rope(y.data(), heads, head_dim, cs.data(), mode);
      const int64_t half = head_dim / 2;
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const bool neox = mode == program::RopeMode::Neox;
          const size_t i0 = static_cast<size_t>(h * head_dim + (neox ? i : 2 * i));
          const size_t i1 = static_cast<size_t>(h * head_dim + (neox ? i + half : 2 * i + 1));
          const float c = cs[static_cast<size_t>(2 * i)], s = cs[static_cast<size_t>(2 * i + 1)];
          EXPECT_EQ(y[i0], x[i0] * c - x[i1] * s) << head_dim << " h=" << h << " i=" << i;
          EXPECT_EQ(y[i1], x[i0] * s + x[i1] * c) << head_dim << " h=" << h << " i=" << i;
        }
    }
  }
}

TEST(VectorOps, SiluMatchesItsDefinition) {
  for (float x : {-100.0f, -10.0f, -1.5f, -1e-3f, 0.0f, 1e-3f, 0.7f, 3.0f, 50.0f})
    EXPECT_NEAR(kernels::silu(x), x / (1.0 + std::exp(-static_cast<double>(x))),
                tolerance::kSiluUlps * tolerance::kFp32Ulp * std::fabs(x) + tolerance::kZeroFloor)
        << x;
}

// A KV cache of n_keys rows (row_stride floats or halves apart) and a query.
struct AttentionCase {
  int64_t head_dim, n_keys, row_stride;
  std::vector<float> q, k32, v32;
  std::vector<uint16_t> k16, v16;
};

AttentionCase make_case(int64_t head_dim, int64_t n_keys, std::mt19937& rng) {
  AttentionCase c;
  c.head_dim = head_dim;
  c.n_keys = n_keys;
  c.row_stride = head_dim * 2 + 3;  // rows of a wider cache, not aligned
  c.q = random_vector(static_cast<size_t>(head_dim), rng);
  c.k32 = random_vector(static_cast<size_t>(n_keys * c.row_stride), rng);
  c.v32 = random_vector(static_cast<size_t>(n_keys * c.row_stride), rng);
  for (float v : c.k32) c.k16.push_back(f32_to_f16(v));
  for (float v : c.v32) c.v16.push_back(f32_to_f16(v));
  return c;
}

// The scalar twin (tests/support/attention_twin.h) of attention_head_* on c.
test_support::AttentionTwinOutput scalar_attention(const AttentionCase& c, bool f16, float scale) {
  test_support::AttentionTwinInput a;
  a.q = c.q.data();
  a.k = c.k32.data();  // k16 holds these values rounded, as the twin rounds them for f16
  a.v = c.v32.data();
  a.row_stride = c.row_stride;
  a.head_dim = c.head_dim;
  a.end = c.n_keys;
  a.scale = scale;
  a.f16 = f16;
  return test_support::attention_twin(a);
}

// The vector exp and reordered dot products move a probability by a few fp32
// ulps; with an f16 cache that can flip its f16 rounding (one f16 ulp, 2^-11).
double attention_bound(bool f16, double magnitude) {
  return (f16 ? tolerance::kF16Ulp : tolerance::kFp32ReorderRelative) * magnitude + tolerance::kAttentionOutputAbsolute;
}

TEST(VectorOps, AttentionHeadMatchesScalar) {
  std::mt19937 rng(4);
  for (bool f16 : {true, false})
    for (int64_t head_dim : {4, 12, 16, 24, 32, 64, 80, 128})
      for (int64_t n_keys : {1, 2, 7, 16, 33, 100}) {
        const AttentionCase c = make_case(head_dim, n_keys, rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> scores(static_cast<size_t>(n_keys)), out(static_cast<size_t>(head_dim), -1.0f);
        kernels::AttentionHead a{};
        a.q = c.q.data();
        a.k = f16 ? static_cast<const void*>(c.k16.data()) : c.k32.data();
        a.v = f16 ? static_cast<const void*>(c.v16.data()) : c.v32.data();
        a.row_stride = c.row_stride;
        a.n_keys = n_keys;
        a.head_dim = head_dim;
        a.scale = scale;
        a.scores = scores.data();
        a.out = out.data();
        if (f16)
          kernels::attention_head_f16(a);
        else
          kernels::attention_head_f32(a);
        const auto [want, magnitude] = scalar_attention(c, f16, scale);
        for (int64_t d = 0; d < head_dim; ++d)
          ASSERT_NEAR(out[static_cast<size_t>(d)], want[static_cast<size_t>(d)],
                      attention_bound(f16, magnitude[static_cast<size_t>(d)]))
              << path_for(head_dim) << (f16 ? " f16" : " f32") << " head_dim=" << head_dim << " n_keys=" << n_keys
              << " d=" << d;
      }
}

// attention_block_*: several tokens and query heads sharing a kv head, token
// t seeing first_n_keys + t keys, each equal to attention_head_* on its own.
TEST(VectorOps, AttentionBlockMatchesPerHead) {
  std::mt19937 rng(5);
  for (bool f16 : {true, false})
    for (int64_t head_dim : {12, 16, 32, 64, 128})
      for (int64_t n_tokens : {1, 3, 9}) {
        const int64_t n_heads = 3, first = 5;
        const AttentionCase c = make_case(head_dim, first + n_tokens, rng);
        const std::vector<float> q = random_vector(static_cast<size_t>(n_tokens * n_heads * head_dim), rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        std::vector<float> out(q.size(), -1.0f);
        kernels::AttentionBlock b{};
        b.q = q.data();
        b.q_token_stride = n_heads * head_dim;
        b.k = f16 ? static_cast<const void*>(c.k16.data()) : c.k32.data();
        b.v = f16 ? static_cast<const void*>(c.v16.data()) : c.v32.data();
        b.row_stride = c.row_stride;
        b.n_tokens = n_tokens;
        b.n_heads = n_heads;
        b.first_n_keys = first;
        b.head_dim = head_dim;
        b.scale = scale;
        b.out = out.data();
        b.out_token_stride = n_heads * head_dim;
        if (f16)
          kernels::attention_block_f16(b);
        else
          kernels::attention_block_f32(b);
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t g = 0; g < n_heads; ++g) {
            AttentionCase one = c;
            one.n_keys = first + t;
            one.q.assign(q.begin() + (t * n_heads + g) * head_dim, q.begin() + (t * n_heads + g + 1) * head_dim);
            const auto [want, magnitude] = scalar_attention(one, f16, scale);
            for (int64_t d = 0; d < head_dim; ++d)
              ASSERT_NEAR(out[static_cast<size_t>((t * n_heads + g) * head_dim + d)], want[static_cast<size_t>(d)],
                          attention_bound(f16, magnitude[static_cast<size_t>(d)]))
                  << path_for(head_dim) << (f16 ? " f16" : " f32") << " head_dim=" << head_dim << " t=" << t
                  << " g=" << g << " d=" << d;
          }
      }
}

// The attention softmax's vector exp (exp_nonpositive) over its whole range,
// seen through a two-key attention: p = 1 / (1 + exp(-delta)).
TEST(VectorOps, AttentionExpOverItsRange) {
  for (float delta : {0.0f, 0.5f, 1.0f, 5.0f, 20.0f, 60.0f, 86.0f, 88.0f, 100.0f}) {
    const int64_t head_dim = 16;
    AttentionCase c;
    c.head_dim = head_dim;
    c.n_keys = 2;
    c.row_stride = head_dim;
    c.q.assign(static_cast<size_t>(head_dim), 0.0f);
    c.q[0] = 1.0f;
    c.k32.assign(static_cast<size_t>(2 * head_dim), 0.0f);
    c.k32[0] = delta;  // score of key 0 is delta, of key 1 zero
    c.v32.assign(static_cast<size_t>(2 * head_dim), 0.0f);
    c.v32[static_cast<size_t>(head_dim)] = 1.0f;  // out[0] = p(key 1) = exp(-delta) / (1 + exp(-delta))
    std::vector<float> scores(2), out(static_cast<size_t>(head_dim));
    kernels::AttentionHead a{c.q.data(), c.k32.data(), c.v32.data(), head_dim, 2, head_dim, 1.0f, scores.data(), out.data()};
    kernels::attention_head_f32(a);
    const double want = std::exp(-static_cast<double>(delta)) / (1.0 + std::exp(-static_cast<double>(delta)));
    // Below expf's range (about -87.3) the exponential is zero, as in ggml.
    EXPECT_NEAR(out[0], want, want * tolerance::kVectorExpRelative + tolerance::kF32DenormalAbsolute) << path_for(head_dim) << " delta=" << delta;
  }
}

}  // namespace
}  // namespace lumen::runtime
