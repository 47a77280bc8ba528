// Kernel shapes: the generator clamps every asked tile to the register file
// of its ISA; a kernel id that is not valid is an internal error, not a
// kernel.
#include <gtest/gtest.h>

#include <string>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/common/internal_error.h"

namespace lumen::codegen {
namespace {

using program::Epilogue;
using program::KernelId;

TEST(KernelShape, TilesClampToTheRegisterFile) {
  const KernelShape big = kernel_shape(Isa::Avx512Vnni, KernelId::gemm(Epilogue::None, 64, 8));
  EXPECT_LE(big.groups * big.tokens, 14);
  // AVX2 keeps the fp32 accumulators of a GEMM tile in memory: 11 int
  // accumulators instead of 5 pairs.
  const KernelShape avx2 = kernel_shape(Isa::Avx2, KernelId::gemm(Epilogue::SiluMul, 32, 4));
  EXPECT_EQ(avx2.groups, 1);
  EXPECT_EQ(avx2.tokens, 2);  // gate and up, 2 halves each, 2 tokens: 8 int accumulators
  EXPECT_TRUE(avx2.fp32_acc_in_memory);
  const KernelShape avx2_default = kernel_shape(Isa::Avx2, KernelId::gemm(Epilogue::None, 48, 4));
  EXPECT_EQ(avx2_default.groups, 1);  // weights reused across 4 tokens, not 2 groups x 2 tokens
  EXPECT_EQ(avx2_default.tokens, 4);
  EXPECT_TRUE(avx2_default.fp32_acc_in_memory);
  EXPECT_FALSE(kernel_shape(Isa::Avx2, KernelId::gemv(Epilogue::None)).fp32_acc_in_memory);
  const KernelShape silu = kernel_shape(Isa::Avx512Vnni, KernelId::gemm(Epilogue::SiluMul, 48, 4));
  EXPECT_EQ(silu.groups, 2);  // gate and up of 2 groups x 3 tokens = 12 accumulators
  EXPECT_EQ(silu.tokens, 3);
  // AVX-VNNI: 12 int accumulators with the fp32 ones in memory, at most 3
  // broadcast tokens: m48n4 runs as m32n3; the GEMV streams 3 groups.
  const KernelShape vnni_ymm = kernel_shape(Isa::AvxVnni, KernelId::gemm(Epilogue::None, 48, 4));
  EXPECT_EQ(vnni_ymm.groups, 2);
  EXPECT_EQ(vnni_ymm.tokens, 3);
  EXPECT_TRUE(vnni_ymm.fp32_acc_in_memory);
  EXPECT_EQ(kernel_shape(Isa::AvxVnni, KernelId::gemv(Epilogue::None)).groups, 3);
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
  const KernelShape asked = kernel_shape(Isa::Avx512Vnni, KernelId::gemm(Epilogue::None, 32, 4));
  EXPECT_EQ(asked.groups, 2);
  EXPECT_EQ(asked.tokens, 4);
}

TEST(KernelShape, InvalidKernelIdsAreInternalErrors) {
  for (const KernelId& bad : {KernelId::gemm(Epilogue::None, 15, 4), KernelId::gemm(Epilogue::None, 16, 0),
                              KernelId{program::KernelKind::Gemv, Epilogue::Bias, 48, 4}}) {
    try {
      (void)generate_matmul_kernel(Isa::Avx2, bad);
      ADD_FAILURE() << "generated " << to_string(bad);
    } catch (const InternalError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("internal error: kernel ", 0), 0u) << e.what();
    }
  }
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
