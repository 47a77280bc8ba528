// Scalar reference for one kernel call over the packed weight format: the
// oracle for the generated kernels. Same arithmetic: exact int32 block dot
// products, then acc = fma(float(sum), w_scale * x_scale, acc) block by block.
#include <cmath>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kernel_support.h"

namespace lumen::codegen {
namespace {

float dot_row(Isa isa, const uint8_t* group, int64_t r, const ActBlock* x, int64_t k_blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k_blocks; ++b) {
    int32_t sum = 0;
    for (int64_t i = 0; i < kQ8Block; ++i) {
      sum += int32_t(packed_weight(isa, group, k_blocks, r, b * kQ8Block + i)) * x[b].qs[i];
    }
    const float scale = f16_to_f32(packed_scale(group, k_blocks, r, b)) * x[b].d;
    acc = std::fma(float(sum), scale, acc);
  }
  return acc;
}

}  // namespace

void reference_matmul(Isa isa, program::Epilogue epilogue, const MatMulArgs& a) {
  using program::Epilogue;
  const int64_t group_bytes = a.k_blocks * kPackedBlockBytes;
  const bool bias = epilogue == Epilogue::Bias || epilogue == Epilogue::BiasResidual;
  const bool residual = epilogue == Epilogue::Residual || epilogue == Epilogue::BiasResidual;
  for (int64_t n = 0; n < a.n_tokens; ++n) {
    const ActBlock* x = a.x + n * a.x_stride;
    for (int64_t m = 0; m < a.m_rows; ++m) {
      const int64_t g = m / kPackRows, r = m % kPackRows;
      float v;
      if (epilogue == Epilogue::SiluMul) {
        const float gate = dot_row(isa, a.w + (2 * g) * group_bytes, r, x, a.k_blocks);
        const float up = dot_row(isa, a.w + (2 * g + 1) * group_bytes, r, x, a.k_blocks);
        v = gate / (1.0f + std::exp(-gate)) * up;
      } else {
        v = dot_row(isa, a.w + g * group_bytes, r, x, a.k_blocks);
      }
      if (bias) v += a.bias[m];
      if (residual) v += a.residual[n * a.r_stride + m];
      a.y[n * a.y_stride + m] = v;
    }
  }
}

}  // namespace lumen::codegen
