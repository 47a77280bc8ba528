// Scalar reference for one k-quant kernel call over the packed layouts: the
// oracle for the generated k-quant kernels, with their arithmetic (exact int
// sums per 32-block, or per 16 for Q6_K, Q3_K and Q2_K, then the fp32 stage in the order
// kquant_generator.cpp states).
#include <cmath>
#include <stdexcept>

#include "lumen/codegen/kquant_kernel.h"
#include "lumen/target/packed_kquant.h"

namespace lumen::codegen {
namespace {

using ops::DType;

float dot_row(DType t, const uint8_t* group, int64_t r, const ActBlock* x, int64_t k_blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k_blocks; ++b) {
    const int64_t sb = b / kKQuantSubBlocks, j = b % kKQuantSubBlocks;
    const float d = f16_to_f32(packed_kquant_d(group, t, r, sb));
    if (t == DType::Q2_K) {
      const float dmin = f16_to_f32(packed_kquant_dmin(group, t, r, sb));
      float xs[2];
      for (int64_t s = 0; s < 2; ++s) {
        int32_t isum = 0, sum = 0;
        for (int64_t i = 16 * s; i < 16 * s + 16; ++i) {
          isum += packed_kquant_q(t, group, r, 32 * b + i) * x[b].qs[i];
          sum += x[b].qs[i];
        }
        xs[s] = float(-sum) * x[b].d;
        acc = std::fma(float(isum), (float(packed_kquant_scale(t, group, r, sb, 2 * j + s)) * d) * x[b].d, acc);
      }
      for (int64_t s = 0; s < 2; ++s)
        acc = std::fma(float(packed_kquant_min(group, t, r, sb, 2 * j + s)) * dmin, xs[s], acc);
    } else if (!has_q6k_form(t)) {
      int32_t isum = 0;
      for (int64_t i = 0; i < 32; ++i) isum += packed_kquant_q(t, group, r, 32 * b + i) * x[b].qs[i];
      const float ds = d * float(packed_kquant_scale(t, group, r, sb, j));
      const float dm = f16_to_f32(packed_kquant_dmin(group, t, r, sb)) * float(packed_kquant_min(group, t, r, sb, j)) *
                       (1.0f / 128.0f);
      acc = std::fma(float(isum), ds * x[b].d, acc);
      acc = std::fma(dm, float(x[b].sum) * x[b].d, acc);
    } else {
      for (int64_t s = 0; s < 2; ++s) {
        int32_t isum = 0;
        for (int64_t i = 16 * s; i < 16 * s + 16; ++i) {
          isum += (packed_kquant_q(t, group, r, 32 * b + i) - kquant_q_offset(t)) * x[b].qs[i];
        }
        const float ds = float(packed_kquant_scale(t, group, r, sb, 2 * j + s)) * d;
        acc = std::fma(float(isum), ds * x[b].d, acc);
      }
    }
  }
  return acc;
}

}  // namespace

void reference_kquant_matmul(DType t, program::Epilogue epilogue, const MatMulArgs& a) {
  using program::Epilogue;
  if (!has_packed_kquant(t) || a.k_blocks % kKQuantSubBlocks != 0) {
    throw std::invalid_argument("reference_kquant_matmul: a Q2_K, Q3_K, Q4_K, Q5_K or Q6_K matrix with K a multiple of 256");
  }
  const int64_t group_bytes = a.k_blocks / kKQuantSubBlocks * packed_kquant_super_bytes(t);
  const bool bias = epilogue == Epilogue::Bias || epilogue == Epilogue::BiasResidual;
  const bool residual = epilogue == Epilogue::Residual || epilogue == Epilogue::BiasResidual;
  for (int64_t n = 0; n < a.n_tokens; ++n) {
    const ActBlock* x = a.x + n * a.x_stride;
    for (int64_t m = 0; m < a.m_rows; ++m) {
      const int64_t g = m / 16, r = m % 16;
      float v;
      if (epilogue == Epilogue::SiluMul) {
        const float gate = dot_row(t, a.w + (2 * g) * group_bytes, r, x, a.k_blocks);
        const float up = dot_row(t, a.w + (2 * g + 1) * group_bytes, r, x, a.k_blocks);
        v = gate / (1.0f + std::exp(-gate)) * up;
      } else {
        v = dot_row(t, a.w + g * group_bytes, r, x, a.k_blocks);
      }
      if (bias) v += a.bias[m];
      if (residual) v += a.residual[n * a.r_stride + m];
      a.y[n * a.y_stride + m] = v;
    }
  }
}

}  // namespace lumen::codegen
