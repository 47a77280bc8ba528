// Kernel shapes: a GEMM runs its id's register tile, which must fit the ISA
// (the schedule picks one that does); a GEMV's and a batch kernel's are the
// generator's per ISA. A kernel id that is not valid or does not fit is an
// internal error, not a kernel.
#include <gtest/gtest.h>

#include <string>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/float_kernel.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/codegen/kquant_kernel.h"
#include "lumen/common/internal_error.h"
#include "lumen/target/weight_formats.h"

namespace lumen::codegen {
namespace {

using program::Epilogue;
using program::KernelId;

TEST(KernelShape, AGemmRunsItsIdsTile) {
  const KernelShape zmm = kernel_shape(Isa::Avx512Vnni, KernelId::gemm(Epilogue::Bias, 48, 4));
  EXPECT_EQ(zmm.groups, 3);
  EXPECT_EQ(zmm.tokens, 4);
  EXPECT_FALSE(zmm.fp32_acc_in_memory);  // 12 accumulator pairs of 14
  const KernelShape silu = kernel_shape(Isa::Avx512, KernelId::gemm(Epilogue::SiluMul, 32, 3));
  EXPECT_EQ(silu.groups, 2);  // gate and up of 2 groups x 3 tokens = 12 accumulator pairs
  EXPECT_EQ(silu.tokens, 3);
  EXPECT_FALSE(silu.fp32_acc_in_memory);
  // The ymm ISAs keep a GEMM's fp32 accumulators in memory when the pairs do
  // not fit: AVX2 has 11 int accumulators beside its temporaries, not 5 pairs.
  const KernelShape avx2 = kernel_shape(Isa::Avx2, KernelId::gemm(Epilogue::None, 16, 4));
  EXPECT_EQ(avx2.groups, 1);
  EXPECT_EQ(avx2.tokens, 4);
  EXPECT_TRUE(avx2.fp32_acc_in_memory);
  EXPECT_FALSE(kernel_shape(Isa::Avx2, KernelId::gemm(Epilogue::None, 16, 2)).fp32_acc_in_memory);
  const KernelShape vnni_ymm = kernel_shape(Isa::AvxVnni, KernelId::gemm(Epilogue::None, 32, 3));
  EXPECT_EQ(vnni_ymm.groups, 2);
  EXPECT_EQ(vnni_ymm.tokens, 3);
  EXPECT_TRUE(vnni_ymm.fp32_acc_in_memory);
}

TEST(KernelShape, GemvAndBatchShapesArePerIsa) {
  EXPECT_FALSE(kernel_shape(Isa::Avx2, KernelId::gemv(Epilogue::None)).fp32_acc_in_memory);
  EXPECT_EQ(kernel_shape(Isa::Avx512Vnni, KernelId::gemv(Epilogue::None)).groups, 4);
  EXPECT_EQ(kernel_shape(Isa::AvxVnni, KernelId::gemv(Epilogue::None)).groups, 3);  // 6 pairs, 2 halves
  EXPECT_EQ(kernel_shape(Isa::AvxVnni, KernelId::gemv(Epilogue::SiluMul)).groups, 1);
  // Batch kernels: every token of the batch on each weight block, the GEMV's
  // prefetch, the fp32 accumulators in memory.
  const KernelShape batch = kernel_shape(Isa::Avx512Vnni, KernelId::batch(Epilogue::Bias));
  EXPECT_EQ(batch.groups, 2);
  EXPECT_EQ(batch.tokens, 8);
  EXPECT_TRUE(batch.fp32_acc_in_memory);
  EXPECT_GT(batch.prefetch_bytes, 0);
  EXPECT_EQ(kernel_shape(Isa::Avx512Vnni, KernelId::batch(Epilogue::SiluMul)).groups, 1);
  EXPECT_EQ(kernel_shape(Isa::Avx2, KernelId::batch(Epilogue::None)).tokens, 5);
  EXPECT_EQ(kernel_shape(Isa::Avx2, KernelId::batch(Epilogue::SiluMul)).tokens, 2);
  EXPECT_EQ(kernel_shape(Isa::AvxVnni, KernelId::batch(Epilogue::None)).groups, 2);
  EXPECT_EQ(kernel_shape(Isa::AvxVnni, KernelId::batch(Epilogue::None)).tokens, 3);
}

void expect_internal_error(Isa isa, const KernelId& kernel, const std::string& why) {
  try {
    (void)generate_matmul_kernel(isa, kernel);
    ADD_FAILURE() << "generated " << to_string(kernel) << " for " << to_string(isa);
  } catch (const InternalError& e) {
    const std::string want = "internal error: kernel " + to_string(kernel) + ": " + why + " (";  // then file:line
    EXPECT_EQ(std::string(e.what()).rfind(want, 0), 0u) << e.what();
  }
}

// A tuning changes speed, never results: for every packed format, epilogue
// and ISA, a GEMV or batch kernel tuned for a CPU has the generic shape but
// for its software prefetch (none, ahead, or the next tile's blocks) and its
// row groups per tile, as the tuning says. (Each row's sum is the same
// whatever the tile: the kernel tests run every tuning's kernels bitwise.)
TEST(KernelShape, TuningsDifferOnlyInTheWeightPrefetchAndGemvGroups) {
  for (CpuTune tune : kCpuTunes) {
    EXPECT_EQ(parse_cpu_tune(to_string(tune)), tune);
    EXPECT_NE(cpu_tune_names().find(to_string(tune)), std::string::npos);
  }
  EXPECT_FALSE(parse_cpu_tune("znver4").has_value());
  // The measured rules (cpu_tune.h): generic prefetches ahead everywhere;
  // zen4 has no GEMV prefetch and none in the zmm Q8_0 batch kernels; zen5
  // prefetches the next tile in the 4- and 5-bit GEMVs, the ymm Q8_0 GEMV and
  // every 32-wide batch kernel, none in the zmm Q8_0 GEMV, ahead elsewhere.
  using enum WeightPrefetch;
  const struct {
    bool batch;
    CpuTune tune;
    Isa isa;
    ops::DType format;
    WeightPrefetch want;
  } rules[] = {
      {false, CpuTune::Generic, Isa::Avx512Vnni, ops::DType::Q8_0, BlocksAhead},
      {false, CpuTune::Generic, Isa::Avx2, ops::DType::Q5_0, BlocksAhead},
      {false, CpuTune::Zen4, Isa::Avx2, ops::DType::Q8_0, None},
      {false, CpuTune::Zen4, Isa::Avx512Vnni, ops::DType::Q4_K, None},
      {false, CpuTune::Zen4, Isa::Avx512Vnni, ops::DType::F16, None},
      {false, CpuTune::Zen5, Isa::Avx512Vnni, ops::DType::Q5_0, NextTile},
      {false, CpuTune::Zen5, Isa::Avx2, ops::DType::IQ4_XS, NextTile},
      {false, CpuTune::Zen5, Isa::Avx512Vnni, ops::DType::Q8_0, None},
      {false, CpuTune::Zen5, Isa::Avx2, ops::DType::Q8_0, NextTile},
      {false, CpuTune::Zen5, Isa::Avx2, ops::DType::F16, BlocksAhead},
      {false, CpuTune::Zen5, Isa::Avx512Vnni, ops::DType::Q6_K, BlocksAhead},
      {true, CpuTune::Generic, Isa::Avx512Vnni, ops::DType::Q8_0, BlocksAhead},
      {true, CpuTune::Zen4, Isa::Avx512Vnni, ops::DType::Q8_0, None},
      {true, CpuTune::Zen4, Isa::Avx2, ops::DType::Q8_0, BlocksAhead},
      {true, CpuTune::Zen4, Isa::Avx512Vnni, ops::DType::Q4_0, BlocksAhead},
      {true, CpuTune::Zen5, Isa::Avx512Vnni, ops::DType::Q8_0, NextTile},
      {true, CpuTune::Zen5, Isa::Avx2, ops::DType::Q5_0, NextTile},
      {true, CpuTune::Zen5, Isa::Avx512Vnni, ops::DType::Q4_K, BlocksAhead},
  };
  for (const auto& r : rules) {
    SCOPED_TRACE(std::string(r.batch ? "batch " : "gemv ") + to_string(r.tune) + " " + to_string(r.isa) + " " +
                 ops::id_name(r.format));
    EXPECT_EQ(r.batch ? batch_prefetch(r.tune, r.isa, r.format) : gemv_prefetch(r.tune, r.isa, r.format), r.want);
  }
  // GEMV and batch tiles: zen5 streams one packed group (a gate/up pair one
  // after the other), the others as many side by side as the registers allow.
  EXPECT_FALSE(one_stream(CpuTune::Generic));
  EXPECT_FALSE(one_stream(CpuTune::Zen4));
  EXPECT_TRUE(one_stream(CpuTune::Zen5));
  // A tuned 32-wide GEMV or batch kernel: its prefetch fields and its groups
  // as the rules say, and with them set back the generic kernel's code.
  auto check_tuned = [](Isa isa, const KernelId& id, CpuTune tune, WeightPrefetch prefetch) {
    const KernelShape generic = kernel_shape(isa, id), tuned = kernel_shape(isa, id, tune);
    EXPECT_GT(generic.prefetch_bytes, 0);
    EXPECT_FALSE(generic.prefetch_next_tile);
    EXPECT_EQ(tuned.prefetch_bytes, prefetch == WeightPrefetch::BlocksAhead ? generic.prefetch_bytes : 0);
    EXPECT_EQ(tuned.prefetch_next_tile, prefetch == WeightPrefetch::NextTile);
    const bool streams_one = !is_float_kernel(id) && one_stream(tune);  // the float kernels keep their tiles
    EXPECT_EQ(tuned.groups, streams_one ? 1 : generic.groups);
    EXPECT_EQ(tuned.sequential_groups, streams_one && id.epilogue == Epilogue::SiluMul);
    EXPECT_FALSE(generic.sequential_groups);
    // A batch tile of fewer groups may hold more tokens.
    if (tuned.groups == generic.groups) {
      EXPECT_EQ(tuned.tokens, generic.tokens);
    }
    EXPECT_GE(tuned.tokens, generic.tokens);
    KernelShape same = tuned;
    same.tokens = generic.tokens;
    same.prefetch_bytes = generic.prefetch_bytes;
    same.prefetch_next_tile = false;
    same.groups = generic.groups;
    same.sequential_groups = false;
    EXPECT_EQ(generate_matmul_kernel(isa, id, same), generate_matmul_kernel(isa, id, generic));
  };
  for (Isa isa : kAllIsas) {
    for (ops::DType format : kPackedFormats) {
      for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::SiluMul}) {
        const KernelId gemv = KernelId::gemv(e, format), batch = KernelId::batch(e, format);
        SCOPED_TRACE(to_string(gemv) + " " + to_string(isa));
        for (CpuTune tune : kCpuTunes) {
          const WeightPrefetch prefetch = gemv_prefetch(tune, isa, format);
          if (is_kquant_kernel(gemv)) {
            const KQuantShape generic = kquant_kernel_shape(isa, gemv), tuned = kquant_kernel_shape(isa, gemv, tune);
            EXPECT_GT(generic.prefetch_bytes, 0);
            EXPECT_NE(prefetch, WeightPrefetch::NextTile);
            EXPECT_EQ(tuned.prefetch_bytes, prefetch == WeightPrefetch::None ? 0 : generic.prefetch_bytes);
            EXPECT_EQ(tuned.groups, one_stream(tune) ? 1 : generic.groups);
            EXPECT_EQ(tuned.tokens, generic.tokens);
            EXPECT_EQ(kquant_kernel_shape(isa, batch, tune).prefetch_bytes, kquant_kernel_shape(isa, batch).prefetch_bytes);
            continue;
          }
          check_tuned(isa, gemv, tune, prefetch);
          check_tuned(isa, batch, tune, batch_prefetch(tune, isa, format));
        }
      }
    }
  }
}

TEST(KernelShape, InvalidKernelIdsAreInternalErrors) {
  expect_internal_error(Isa::Avx2, KernelId::gemm(Epilogue::None, 15, 4),
                        "tile_m must be a multiple of 16 in [16, 1024]");
  expect_internal_error(Isa::Avx2, KernelId::gemm(Epilogue::None, 16, 0), "tile_n must be in [1, 64]");
  expect_internal_error(Isa::Avx2, KernelId{program::KernelKind::Gemv, Epilogue::Bias, 48, 4},
                        "a gemv kernel has no tile of its own");
}

TEST(KernelShape, TilesBeyondTheIsasRegistersAreInternalErrors) {
  // Not clamped to another kernel under the same name: the schedule must
  // have picked a tile the target holds.
  expect_internal_error(Isa::Avx2, KernelId::gemm(Epilogue::None, 48, 4),
                        "the tile does not fit the registers of avx2");
  expect_internal_error(Isa::Avx512Vnni, KernelId::gemm(Epilogue::SiluMul, 48, 4),
                        "the tile does not fit the registers of avx512-vnni");
  expect_internal_error(Isa::AvxVnni, KernelId::gemm(Epilogue::None, 16, 4),
                        "the tile does not fit the registers of avx-vnni");  // 4 broadcast tokens
  expect_internal_error(Isa::Avx512, KernelId::gemm(Epilogue::None, 64, 8),
                        "the tile does not fit the registers of avx512");
  EXPECT_TRUE(program::fits(KernelId::gemm(Epilogue::None, 48, 4), Isa::Avx512));
}

TEST(KernelShape, ShapesBeyondTheRegisterFileAreInternalErrors) {
  KernelShape too_big;
  too_big.groups = 4;
  too_big.tokens = 8;
  EXPECT_THROW((void)generate_matmul_kernel(Isa::Avx2, KernelId::gemm(Epilogue::None, 64, 8), too_big),
               InternalError);
  KernelShape seven_pairs;
  seven_pairs.groups = 1;
  seven_pairs.tokens = 4;  // 2 halves x 4 tokens = 8 > 6
  EXPECT_THROW((void)generate_matmul_kernel(Isa::AvxVnni, KernelId::gemm(Epilogue::None, 16, 4), seven_pairs),
               InternalError);
  KernelShape twelve_ints;
  twelve_ints.groups = 3;
  twelve_ints.tokens = 2;  // 12 int accumulators > 11 beside the AVX2 temporaries
  twelve_ints.fp32_acc_in_memory = true;
  EXPECT_THROW((void)generate_matmul_kernel(Isa::Avx2, KernelId::gemm(Epilogue::None, 48, 2), twelve_ints),
               InternalError);
  KernelShape zmm_in_memory;
  zmm_in_memory.groups = 4;
  zmm_in_memory.tokens = 7;  // 28 int accumulators > 26 beside the AVX-512 temporaries
  zmm_in_memory.fp32_acc_in_memory = true;
  EXPECT_THROW((void)generate_matmul_kernel(Isa::Avx512, KernelId::gemm(Epilogue::None, 64, 7), zmm_in_memory),
               InternalError);
}

}  // namespace
}  // namespace lumen::codegen
