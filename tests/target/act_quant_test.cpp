// Activation quantization: the scalar and AVX2 versions agree bit-exactly
// with a plain transcription of ggml's x86 quantize_row_q8_0.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "lumen/target/act_quant.h"
#include "lumen/target/isa.h"

namespace lumen {
namespace {

// ggml AVX2 branch written plainly: d = amax/127 as fp16, id = 127/amax,
// q = round half to even (default rounding mode) of x * id.
std::vector<ActBlock> plain_reference(const std::vector<float>& x) {
  std::vector<ActBlock> out(x.size() / 32);
  for (size_t b = 0; b < out.size(); ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    out[b].d = round_to_f16(amax / 127.0f);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].qs[i] = int8_t(std::lrint(x[b * 32 + i] * id));
      sum += out[b].qs[i];
    }
    out[b].sum = -128 * sum;
  }
  return out;
}

void expect_same(const std::vector<ActBlock>& want, const std::vector<ActBlock>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t b = 0; b < want.size(); ++b) {
    ASSERT_EQ(std::bit_cast<uint32_t>(want[b].d), std::bit_cast<uint32_t>(got[b].d)) << what << " block " << b;
    ASSERT_EQ(want[b].sum, got[b].sum) << what << " block " << b;
    for (int i = 0; i < 32; ++i) ASSERT_EQ(want[b].qs[i], got[b].qs[i]) << what << " block " << b << " i " << i;
  }
}

std::vector<float> test_input() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x;
  // Random blocks of varied magnitude.
  for (int b = 0; b < 200; ++b) {
    const float scale = std::ldexp(1.0f, int(rng() % 40) - 20);
    for (int i = 0; i < 32; ++i) x.push_back(normal(rng) * scale);
  }
  // amax = 127 makes id = 1: exact .5 ties, which round to even.
  for (int i = 0; i < 32; ++i) x.push_back(i == 0 ? 127.0f : float(i) - 15.5f);
  // An all-zero block: d = 0, q = 0.
  for (int i = 0; i < 32; ++i) x.push_back(0.0f);
  // A tiny block whose d underflows in fp16.
  for (int i = 0; i < 32; ++i) x.push_back(1e-9f * float(i - 16));
  return x;
}

TEST(ActQuant, ScalarMatchesPlainGgmlTranscription) {
  const std::vector<float> x = test_input();
  std::vector<ActBlock> got(x.size() / 32);
  quantize_act_scalar(x.data(), got.data(), int64_t(x.size()));
  expect_same(plain_reference(x), got, "scalar");
}

TEST(ActQuant, Avx2MatchesScalar) {
  const uint64_t need = kCpuAvx2 | kCpuF16c;
  if ((cpu_features() & need) != need) GTEST_SKIP() << "no AVX2+F16C";
  const std::vector<float> x = test_input();
  std::vector<ActBlock> got(x.size() / 32), dispatched(x.size() / 32);
  quantize_act_avx2(x.data(), got.data(), int64_t(x.size()));
  expect_same(plain_reference(x), got, "avx2");
  quantize_act(x.data(), dispatched.data(), int64_t(x.size()));
  expect_same(plain_reference(x), dispatched, "quantize_act");
}

TEST(ActQuant, TiesRoundToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  ActBlock blk;
  quantize_act_scalar(x.data(), &blk, 32);
  EXPECT_EQ(blk.qs[0], 127);
  EXPECT_EQ(blk.qs[1], 2);
  EXPECT_EQ(blk.qs[2], -4);
  EXPECT_EQ(blk.qs[3], 0);
  EXPECT_EQ(blk.d, 1.0f);
  EXPECT_EQ(blk.sum, -128 * (127 + 2 - 4));
}

}  // namespace
}  // namespace lumen
