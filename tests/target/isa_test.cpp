// The ISA tiers: names, the features each needs, and which one a CPU's
// features choose (AVX-VNNI where AVX-512 is absent but AVX-VNNI is there).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "lumen/target/isa.h"

namespace lumen {
namespace {

constexpr uint64_t kAvx2Set = kCpuAvx2 | kCpuFma | kCpuF16c;
constexpr uint64_t kAvx512Set = kAvx2Set | kCpuAvx512f | kCpuAvx512bw | kCpuAvx512vl;

TEST(Isa, NamesAreDistinctAndStable) {
  EXPECT_STREQ(to_string(Isa::Avx512Vnni), "avx512-vnni");
  EXPECT_STREQ(to_string(Isa::Avx512), "avx512");
  EXPECT_STREQ(to_string(Isa::AvxVnni), "avx-vnni");
  EXPECT_STREQ(to_string(Isa::Avx2), "avx2");
}

TEST(Isa, AvxVnniNeedsAvx2AndAvxVnniOnly) {
  EXPECT_EQ(required_features(Isa::AvxVnni), kAvx2Set | kCpuAvxVnni);
  EXPECT_EQ(required_features(Isa::AvxVnni) & kCpuAvx512f, 0u);
  EXPECT_TRUE(is_ymm_isa(Isa::AvxVnni));
  EXPECT_TRUE(is_vnni_isa(Isa::AvxVnni));
  EXPECT_FALSE(is_ymm_isa(Isa::Avx512Vnni));
  EXPECT_FALSE(is_vnni_isa(Isa::Avx2));
}

TEST(Isa, BestIsaPicksAvxVnniWhereAvx512IsAbsent) {
  EXPECT_EQ(best_isa(kAvx2Set | kCpuAvxVnni), Isa::AvxVnni);           // Intel client (Alder Lake on)
  EXPECT_EQ(best_isa(kAvx2Set), Isa::Avx2);                            // Zen 3
  EXPECT_EQ(best_isa(kAvx512Set | kCpuAvx512vnni | kCpuAvxVnni), Isa::Avx512Vnni);  // Zen 5
  EXPECT_EQ(best_isa(kAvx512Set | kCpuAvxVnni), Isa::Avx512);
  EXPECT_THROW(best_isa(kCpuAvxVnni | kCpuAvx2), std::runtime_error);  // no FMA/F16C
}

TEST(Isa, FeatureNamesIncludeAvxVnni) {
  EXPECT_EQ(cpu_feature_names(kCpuAvx2 | kCpuAvxVnni), "avx2 avx_vnni");
}

}  // namespace
}  // namespace lumen
