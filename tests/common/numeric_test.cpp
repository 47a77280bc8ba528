#include "lumen/common/numeric.h"
#include "support/tolerances.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace lumen {
namespace {

// Every half value converts to float and back to itself (NaNs to the canonical NaN).
TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_f16(f), 0x7E00);
    } else {
      EXPECT_EQ(f32_to_f16(f), h) << std::hex << h;
    }
  }
}

// Halfway cases round to even, as F16C does.
TEST(Fp16, RoundsHalfToEven) {
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): even is 1.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
  // 1 + 3*2^-11 lies halfway between 1+2^-10 and 1+2^-9: even is 1+2^-9.
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // rounds up to infinity
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // halfway to the smallest subnormal: even is 0
  EXPECT_EQ(f32_to_f16(0x1.8p-24f), 0x0002);
}

TEST(Q8_0, QuantizeMatchesGgmlReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(32 * 5);
  for (auto& v : x) v = dist(rng);
  std::vector<BlockQ8_0> q(5);
  quantize_row_q8_0_ref(x.data(), q.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row_q8_0(q.data(), y.data(), y.size());
  for (size_t b = 0; b < 5; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    EXPECT_EQ(q[b].d, f32_to_f16(d));
    for (int j = 0; j < 32; ++j) {
      EXPECT_EQ(q[b].qs[j], int8_t(std::roundf(x[b * 32 + j] * (1.0f / d))));
      EXPECT_NEAR(y[b * 32 + j], x[b * 32 + j], d * tolerance::kQ8HalfStep);
    }
  }
  // An all-zero block has scale 0 and zero quants.
  std::vector<float> z(32, 0.0f);
  BlockQ8_0 zb;
  quantize_row_q8_0_ref(z.data(), &zb, 32);
  EXPECT_EQ(zb.d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(zb.qs[j], 0);
}

}  // namespace
}  // namespace lumen
