// Load-time repack of F16, BF16 and F32 weight rows into the 16-row groups
// the float kernels stream (layout in include/lumen/target/packed_float.h).
#include "lumen/target/packed_float.h"

#include <bit>
#include <cstring>
#include <stdexcept>

#include "lumen/common/numeric.h"

namespace lumen {

void pack_float(ops::DType format, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  if (!is_float_format(format) || rows < 0 || k <= 0 || k % kQ8Block != 0 || first_group < 0) {
    throw std::invalid_argument("pack_float: an F16, BF16 or F32 matrix, rows >= 0, k a positive multiple of 32");
  }
  const int64_t e = float_element_bytes(format), group_bytes = k * kPackRows * e;
  const auto* in = static_cast<const uint8_t*>(src);
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + (first_group + g) * group_bytes;
    for (int64_t r = 0; r < kPackRows; ++r) {
      const int64_t row = g * kPackRows + r;
      if (row >= rows) {
        for (int64_t c = 0; c < k; ++c) std::memset(group + (c * kPackRows + r) * e, 0, size_t(e));
        continue;
      }
      const uint8_t* src_row = in + row * k * e;
      for (int64_t c = 0; c < k; ++c) std::memcpy(group + (c * kPackRows + r) * e, src_row + c * e, size_t(e));
    }
  }
}

float packed_float_weight(ops::DType format, const uint8_t* group, int64_t r, int64_t c) {
  const int64_t e = float_element_bytes(format);
  const uint8_t* p = group + (c * kPackRows + r) * e;
  if (format == ops::DType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return format == ops::DType::F16 ? f16_to_f32(h) : std::bit_cast<float>(uint32_t(h) << 16);
}

}  // namespace lumen
