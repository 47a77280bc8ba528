// The scalar twin of the runtime's attention kernels (ops::attention_head_*,
// ops::attention_block_*): the arithmetic src/runtime/ops.h promises, for one
// query head, written plainly. The vector-op and attention-kernel tests compare
// the kernels with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lumen/common/numeric.h"

namespace lumen::test_support {

// One query head against the keys [begin, end) of a cache whose rows are
// row_stride floats apart (f32 values; an f16 cache is modelled by rounding).
struct AttentionTwinInput {
  const float* q = nullptr;  // head_dim values
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t row_stride = 0, head_dim = 0;
  int64_t begin = 0, end = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores become tanh(s / softcap) * softcap
  bool f16 = false;      // q, K, V and the probabilities rounded to f16, as for an f16 cache
};

struct AttentionTwinOutput {
  std::vector<float> out;        // head_dim values
  std::vector<double> magnitude;  // per element, sum_j |p_j v_jd|: the scale of its rounding error
};

// Float dot products, the scaled (and soft-capped) scores' softmax with the
// exponentials summed in double, probabilities times V summed in float, keys in order.
inline AttentionTwinOutput attention_twin(const AttentionTwinInput& a) {
  auto rd = [&](float x) { return a.f16 ? round_to_f16(x) : x; };
  std::vector<float> p;
  float max = -INFINITY;
  for (int64_t j = a.begin; j < a.end; ++j) {
    float dot = 0;
    for (int64_t d = 0; d < a.head_dim; ++d) dot += rd(a.q[d]) * rd(a.k[j * a.row_stride + d]);
    float x = dot * a.scale;
    if (a.softcap > 0) x = std::tanh(x * (1.0f / a.softcap)) * a.softcap;
    p.push_back(x);
    max = std::max(max, x);
  }
  double sum = 0;
  for (float& x : p) sum += (x = std::exp(x - max));
  const float inv = static_cast<float>(1.0 / sum);
  for (float& x : p) x = rd(x * inv);
  AttentionTwinOutput o{std::vector<float>(static_cast<size_t>(a.head_dim), 0.0f),
                        std::vector<double>(static_cast<size_t>(a.head_dim), 0.0)};
  for (int64_t j = a.begin; j < a.end; ++j)
    for (int64_t d = 0; d < a.head_dim; ++d) {
      const float term = p[static_cast<size_t>(j - a.begin)] * rd(a.v[j * a.row_stride + d]);
      o.out[static_cast<size_t>(d)] += term;
      o.magnitude[static_cast<size_t>(d)] += std::fabs(term);
    }
  return o;
}

}  // namespace lumen::test_support
