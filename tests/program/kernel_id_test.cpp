// Kernel ids: to_string() is the only printer and parse_kernel_id() the only
// parser of the text form; every valid id round-trips, anything else is
// refused with a reason.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/target/packed_kquant.h"
#include "lumen/target/weight_formats.h"

namespace lumen::program {
namespace {

constexpr Epilogue kEpilogues[] = {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual,
                                   Epilogue::SiluMul};

TEST(KernelId, PrintsTheTextForm) {
  EXPECT_EQ(to_string(KernelId::gemv(Epilogue::Bias)), "gemv.bias");
  EXPECT_EQ(to_string(KernelId::gemm(Epilogue::SiluMul, 16, 4)), "gemm.silu_mul.m16n4");
  EXPECT_EQ(to_string(KernelId::gemm(Epilogue::BiasResidual, 48, 4)), "gemm.bias_residual.m48n4");
  EXPECT_EQ(kernel_symbol(KernelId::gemm(Epilogue::Bias, 48, 4)), "lumen_gemm_bias_m48n4");
  EXPECT_EQ(kernel_symbol(KernelId::gemv(Epilogue::None)), "lumen_gemv_none");
  EXPECT_EQ(to_string(KernelId::batch(Epilogue::SiluMul)), "batch.silu_mul");
  EXPECT_EQ(kernel_symbol(KernelId::batch(Epilogue::Bias)), "lumen_batch_bias");
}

TEST(KernelId, EveryValidIdRoundTrips) {
  for (Epilogue e : kEpilogues) {
    for (const KernelId& k : {KernelId::gemv(e), KernelId::batch(e), KernelId::gemm(e, 16, 1), KernelId::gemm(e, 32, 6),
                              KernelId::gemm(e, 1024, 64)}) {
      ASSERT_TRUE(is_valid(k)) << to_string(k);
      const std::optional<KernelId> back = parse_kernel_id(to_string(k));
      ASSERT_TRUE(back.has_value()) << to_string(k);
      EXPECT_EQ(*back, k) << to_string(k);
    }
    for (DType w : kPackedFormats) {
      std::vector<KernelId> kernels = {KernelId::gemv(e, w), KernelId::batch(e, w)};
      if (has_expanded_kquant(w) || is_float_format(w)) kernels.push_back(KernelId::gemm(e, 32, 7, w));  // their GEMMs
      for (const KernelId& k : kernels) {
        const std::optional<KernelId> back = parse_kernel_id(to_string(k));
        ASSERT_TRUE(back.has_value()) << to_string(k);
        EXPECT_EQ(*back, k) << to_string(k);
      }
    }
  }
}

TEST(KernelId, SpellsTheWeightFormatOnlyWhenNotQ8_0) {
  EXPECT_EQ(to_string(KernelId::gemv(Epilogue::Bias, DType::Q8_0)), "gemv.bias");
  EXPECT_EQ(to_string(KernelId{KernelKind::Gemv, Epilogue::Bias, KernelId::kGemvTileM, KernelId::kGemvTileN,
                               DType::Q5_0}),
            "gemv.q5_0.bias");
  EXPECT_EQ(kernel_symbol(KernelId{KernelKind::Batch, Epilogue::SiluMul, KernelId::kBatchTileM,
                                   KernelId::kBatchMaxTokens, DType::Q4_0}),
            "lumen_batch_q4_0_silu_mul");
  std::string why;
  // Every weight type has a packed format; i32 is not a weight type.
  EXPECT_FALSE(is_valid(KernelId::gemv(Epilogue::None, DType::I32), &why));
  EXPECT_EQ(why, "the weight is not a packed format");
}

TEST(KernelId, RefusesAnythingElseWithAReason) {
  for (const char* bad : {"", "gemv", "gemv.", "gemv.gelu", "gemm.none", "gemm.none.m16", "gemm.none.m15n4",
                          "gemm.none.m16n0", "gemm.none.m16n65", "gemm.none.m1040n4", "gemm.none.m16nx",
                          "gemm.none.mn4", "gemm.none.m16n4x", "gemm.none.m016n4", "gemm.none.m-16n4",
                          "gemv.none.m16n4", "conv.none", "GEMV.none", "batch", "batch.", "batch.gelu",
                          "batch.none.m32n8", "batchx.none", "gemv.q8_0.bias", "gemv.i32.none",
                          "gemv.q5_0", "gemv.none.q5_0", "gemm.q5_0.none.m16n4", "gemm.iq4_xs.none.m16n4", "gemm.q6_k.none.m15n4"}) {
    std::string why;
    EXPECT_FALSE(parse_kernel_id(bad, &why).has_value()) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  std::string why;
  EXPECT_FALSE(is_valid(KernelId{KernelKind::Gemv, Epilogue::None, 48, 4}, &why));
  EXPECT_EQ(why, "a gemv kernel has no tile of its own");
  EXPECT_FALSE(is_valid(KernelId{KernelKind::Batch, Epilogue::None, 16, 8}, &why));
  EXPECT_EQ(why, "a batch kernel has no tile of its own");
}

TEST(KernelId, OrdersForUseAsAKey) {
  const KernelId a = KernelId::gemm(Epilogue::None, 48, 4), b = KernelId::gemm(Epilogue::None, 48, 5);
  EXPECT_TRUE(a < b || b < a);
  EXPECT_FALSE(a < a);
  EXPECT_NE(KernelId::gemv(Epilogue::None), KernelId::gemv(Epilogue::Bias));
}

}  // namespace
}  // namespace lumen::program
