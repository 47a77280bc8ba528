// The standalone Softmax op (see ops.h): one row at a time with ggml's
// soft_max arithmetic, so that results match llama.cpp's.
#include <cmath>

#include "lumen/runtime/ops.h"

namespace lumen::runtime::ops {

void softmax_row(const float* x, float* y, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  // ggml keeps the exponentials in f32 but adds them up in double.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(x[i] - max);
    sum += static_cast<double>(e);
    y[i] = e;
  }
  // One reciprocal, rounded to f32, then a multiplication per element.
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

}  // namespace lumen::runtime::ops
