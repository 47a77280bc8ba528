// Kernel names: every name kernel_name() can produce parses back; anything
// else is rejected with std::invalid_argument. Tiles clamp to the registers.
#include <gtest/gtest.h>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kernel_support.h"

namespace lumen::codegen {
namespace {

using program::Epilogue;

TEST(KernelName, RoundTrips) {
  for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual,
                     Epilogue::SiluMul}) {
    for (bool prefill : {false, true}) {
      KernelSpec spec{prefill, e, prefill ? 32 : 16, prefill ? 6 : 1};
      const std::string name = format_kernel_name(spec);
      const KernelSpec back = parse_kernel_name(name);
      EXPECT_EQ(back.prefill, prefill) << name;
      EXPECT_EQ(back.epilogue, e) << name;
      EXPECT_EQ(back.tile_m, spec.tile_m) << name;
      EXPECT_EQ(back.tile_n, spec.tile_n) << name;
    }
  }
  EXPECT_EQ(format_kernel_name(parse_kernel_name("gemm.bias_residual.m16n4")), "gemm.bias_residual.m16n4");
}

TEST(KernelName, ParsesProgramKernelNames) {
  for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual,
                     Epilogue::SiluMul}) {
    EXPECT_EQ(format_kernel_name(parse_kernel_name(program::kernel_name(false, e, 16, 1))),
              program::kernel_name(false, e, 16, 1));
    EXPECT_EQ(format_kernel_name(parse_kernel_name(program::kernel_name(true, e, 32, 6))),
              program::kernel_name(true, e, 32, 6));
    EXPECT_EQ(parse_kernel_name(program::kernel_name(true, e, 16, 8)).epilogue, e);
  }
}

TEST(KernelName, RejectsUnknownNames) {
  for (const char* bad : {"", "gemv", "gemv.", "gemv.gelu", "gemm.none", "gemm.none.m16", "gemm.none.m15n4",
                          "gemm.none.m16n0", "gemm.none.m16nx", "gemm.none.mn4", "gemm.none.m16n4x",
                          "gemv.none.m16n4", "conv.none"}) {
    EXPECT_THROW(parse_kernel_name(bad), std::invalid_argument) << bad;
    EXPECT_THROW(generate_matmul_kernel(Isa::Avx2, bad), std::invalid_argument) << bad;
  }
}

TEST(KernelName, TilesClampToTheRegisterFile) {
  const KernelShape big = kernel_shape(Isa::Avx512Vnni, parse_kernel_name("gemm.none.m64n8"));
  EXPECT_LE(big.groups * big.tokens, 14);
  const KernelShape avx2 = kernel_shape(Isa::Avx2, parse_kernel_name("gemm.silu_mul.m32n4"));
  EXPECT_EQ(avx2.groups, 1);
  EXPECT_LE(2 * 2 * avx2.tokens, 5);
  const KernelShape avx2_default = kernel_shape(Isa::Avx2, parse_kernel_name("gemm.none.m48n4"));
  EXPECT_EQ(avx2_default.groups, 1);  // weights reused across 2 tokens, not 2 groups x 1 token
  EXPECT_EQ(avx2_default.tokens, 2);
  const KernelShape silu = kernel_shape(Isa::Avx512Vnni, parse_kernel_name("gemm.silu_mul.m48n4"));
  EXPECT_EQ(silu.groups, 2);  // gate and up of 2 groups x 3 tokens = 12 accumulators
  EXPECT_EQ(silu.tokens, 3);
  const KernelShape asked = kernel_shape(Isa::Avx512Vnni, parse_kernel_name("gemm.none.m32n4"));
  EXPECT_EQ(asked.groups, 2);
  EXPECT_EQ(asked.tokens, 4);
}

}  // namespace
}  // namespace lumen::codegen
