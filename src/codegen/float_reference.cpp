// Scalar reference for one float-weight kernel call: the oracle for the
// generated float kernels, with their arithmetic (fp32 FMAs, k in order).
#include <cmath>
#include <stdexcept>

#include "lumen/codegen/float_kernel.h"
#include "lumen/target/packed_float.h"

namespace lumen::codegen {
namespace {

float dot_row(ops::DType format, const uint8_t* group, int64_t r, const float* x, int64_t k) {
  float acc = 0.0f;
  for (int64_t c = 0; c < k; ++c) acc = std::fma(packed_float_weight(format, group, r, c), x[c], acc);
  return acc;
}

}  // namespace

void reference_float_matmul(ops::DType format, program::Epilogue epilogue, const MatMulArgs& a) {
  using program::Epilogue;
  if (!is_float_format(format)) throw std::invalid_argument("reference_float_matmul: an F16, BF16 or F32 matrix");
  const int64_t k = a.k_blocks * kQ8Block, group_bytes = k * kPackRows * float_element_bytes(format);
  const bool bias = epilogue == Epilogue::Bias || epilogue == Epilogue::BiasResidual;
  const bool residual = epilogue == Epilogue::Residual || epilogue == Epilogue::BiasResidual;
  for (int64_t n = 0; n < a.n_tokens; ++n) {
    const float* x = a.x_f32 + n * a.x_stride;
    for (int64_t m = 0; m < a.m_rows; ++m) {
      const int64_t g = m / kPackRows, r = m % kPackRows;
      float v;
      if (epilogue == Epilogue::SiluMul) {
        const float gate = dot_row(format, a.w + (2 * g) * group_bytes, r, x, k);
        const float up = dot_row(format, a.w + (2 * g + 1) * group_bytes, r, x, k);
        v = gate / (1.0f + std::exp(-gate)) * up;
      } else {
        v = dot_row(format, a.w + g * group_bytes, r, x, k);
      }
      if (bias) v += a.bias[m];
      if (residual) v += a.residual[n * a.r_stride + m];
      a.y[n * a.y_stride + m] = v;
    }
  }
}

}  // namespace lumen::codegen
