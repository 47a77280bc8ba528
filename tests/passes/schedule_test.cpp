// The schedule's prefill kernels: for each target, the tile of the most
// register reuse within 48 x 4 that the target's registers hold, recorded in
// the KernelId (so its name is the kernel that runs).
#include <gtest/gtest.h>

#include <string>

#include "lumen/passes/passes.h"
#include "lumen/target/packed_q8_0.h"

namespace {

using lumen::Isa;
using lumen::program::Epilogue;
using lumen::program::KernelId;

TEST(Schedule, PrefillTilesPerTarget) {
  const struct {
    Isa isa;
    Epilogue epilogue;
    const char* kernel;
  } cases[] = {
      {Isa::Avx512Vnni, Epilogue::Bias, "gemm.bias.m48n4"},
      {Isa::Avx512Vnni, Epilogue::SiluMul, "gemm.silu_mul.m32n3"},  // gate and up: 12 accumulators
      {Isa::Avx512, Epilogue::Residual, "gemm.residual.m48n4"},
      {Isa::Avx512, Epilogue::SiluMul, "gemm.silu_mul.m32n3"},
      {Isa::AvxVnni, Epilogue::None, "gemm.none.m32n3"},  // 3 broadcast tokens at most
      {Isa::AvxVnni, Epilogue::SiluMul, "gemm.silu_mul.m16n3"},
      {Isa::Avx2, Epilogue::BiasResidual, "gemm.bias_residual.m16n4"},  // 4 tokens per weight load, not m32n2
      {Isa::Avx2, Epilogue::SiluMul, "gemm.silu_mul.m16n2"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(to_string(lumen::passes::prefill_kernel(c.isa, c.epilogue)), c.kernel) << to_string(c.isa);
}

TEST(Schedule, PrefillTilesFitAndNoLargerOneDoes) {
  for (Isa isa : lumen::kAllIsas) {
    for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual, Epilogue::SiluMul}) {
      const KernelId picked = lumen::passes::prefill_kernel(isa, e);
      std::string why;
      EXPECT_TRUE(lumen::program::fits(picked, isa, &why)) << to_string(picked) << ": " << why;
      for (int64_t tile_m = lumen::kPackRows; tile_m <= 48; tile_m += lumen::kPackRows) {
        for (int64_t tile_n = 1; tile_n <= 4; ++tile_n) {
          if (!lumen::program::fits(KernelId::gemm(e, tile_m, tile_n), isa)) continue;
          EXPECT_LE(tile_m * tile_n, picked.tile_m * picked.tile_n)
              << to_string(isa) << ": m" << tile_m << "n" << tile_n << " beats " << to_string(picked);
        }
      }
    }
  }
}

}  // namespace
