// Weight packing: every weight and scale lands where the kernels read it,
// padding rows are zero, and the size matches packed_bytes().
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "lumen/target/weight_formats.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen {
namespace {

std::vector<BlockQ8_0> random_rows(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<BlockQ8_0> w(rows * k / 32);
  for (auto& b : w) {
    b.d = f32_to_f16(0.001f * float(1 + rng() % 100));
    for (auto& q : b.qs) q = int8_t(int(rng() % 256) - 128);
  }
  return w;
}

TEST(WeightPack, SizesArePaddedToTheRowGroup) {
  for (Isa isa : kAllIsas) {
    EXPECT_EQ(pack_row_group(isa), 16);
    EXPECT_EQ(packed_bytes(isa, 16, 64), 2 * kPackedBlockBytes);
    EXPECT_EQ(packed_bytes(isa, 17, 64), 4 * kPackedBlockBytes);
    EXPECT_EQ(packed_bytes(isa, 896, 896), 896 * 896 / 32 * 34);  // no memory overhead
  }
  EXPECT_THROW(packed_bytes(Isa::Avx2, 16, 33), std::invalid_argument);
}

TEST(WeightPack, EveryWeightAndScaleRoundTrips) {
  const int64_t rows = 37, k = 96, kb = k / 32;
  const auto src = random_rows(rows, k, 1);
  for (Isa isa : kAllIsas) {
    std::vector<uint8_t> packed(packed_bytes(isa, rows, k) + kb * kPackedBlockBytes, 0xCD);
    pack_q8_0(isa, src.data(), rows, k, packed.data(), 1);  // at group 1: group 0 untouched
    for (int64_t i = 0; i < kb * kPackedBlockBytes; ++i) ASSERT_EQ(packed[i], 0xCD);
    for (int64_t row = 0; row < 48; ++row) {
      const uint8_t* group = packed.data() + (1 + row / 16) * kb * kPackedBlockBytes;
      for (int64_t b = 0; b < kb; ++b) {
        const uint16_t d = packed_scale(group, kb, row % 16, b);
        EXPECT_EQ(d, row < rows ? src[row * kb + b].d : 0) << to_string(isa) << " row " << row;
        for (int64_t i = 0; i < 32; ++i) {
          const int8_t w = packed_weight(isa, group, kb, row % 16, b * 32 + i);
          ASSERT_EQ(w, row < rows ? src[row * kb + b].qs[i] : 0) << to_string(isa) << " row " << row;
        }
      }
    }
  }
}

TEST(WeightPack, GateUpAlternateGroups) {
  const int64_t rows = 20, k = 64, kb = 2;
  const auto gate = random_rows(rows, k, 2), up = random_rows(rows, k, 3);
  std::vector<uint8_t> packed(2 * packed_bytes(Isa::Avx512Vnni, rows, k));
  pack_gate_up_rows(ops::DType::Q8_0, Isa::Avx512Vnni, gate.data(), up.data(), rows, k, packed.data());
  const int64_t gb = kb * kPackedBlockBytes;
  EXPECT_EQ(packed_weight(Isa::Avx512Vnni, packed.data() + 0 * gb, kb, 3, 5), gate[3 * kb].qs[5]);
  EXPECT_EQ(packed_weight(Isa::Avx512Vnni, packed.data() + 1 * gb, kb, 3, 5), up[3 * kb].qs[5]);
  EXPECT_EQ(packed_weight(Isa::Avx512Vnni, packed.data() + 2 * gb, kb, 2, 40), gate[18 * kb + 1].qs[8]);
  EXPECT_EQ(packed_weight(Isa::Avx512Vnni, packed.data() + 3 * gb, kb, 2, 40), up[18 * kb + 1].qs[8]);
}

TEST(WeightPack, RejectsBadShapes) {
  std::vector<BlockQ8_0> src(1);
  std::vector<uint8_t> out(kPackedBlockBytes);
  EXPECT_THROW(pack_q8_0(Isa::Avx2, src.data(), 1, 31, out.data(), 0), std::invalid_argument);
  EXPECT_THROW(pack_q8_0(Isa::Avx2, src.data(), -1, 32, out.data(), 0), std::invalid_argument);
}

}  // namespace
}  // namespace lumen
