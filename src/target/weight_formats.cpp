// packed_format: the types with a packed layout of their own (kPackedFormats:
// every weight type) run in it on every ISA; the float types in a matmul that
// reads act_q8 run as packed Q8_0.
#include "lumen/target/weight_formats.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "lumen/target/packed_kquant.h"

namespace lumen {

ops::DType packed_format(ops::DType weight, Isa) { return is_packed_format(weight) ? weight : ops::DType::Q8_0; }

ops::DType packed_format(ops::DType weight, Isa isa, ops::DType input) {
  const ops::DType format = packed_format(weight, isa);
  return is_float_format(format) && input != ops::DType::F32 ? ops::DType::Q8_0 : format;
}

int64_t packed_bytes(ops::DType format, int64_t rows, int64_t k) {
  if (has_packed_kquant(format)) return packed_kquant_bytes(format, rows, k);
  const int64_t block = is_float_format(format) ? kQ8Block : ops::row(format).block_elems;
  if (rows < 0 || k < 0 || k % block != 0 || !is_packed_format(format)) {
    throw std::invalid_argument("packed_bytes: a packed format, k a non-negative multiple of its block (32, or 256 for the k-quants and IQ4_XS)");
  }
  return (rows + kPackRows - 1) / kPackRows * (k / kQ8Block) * packed_block_bytes(format);
}

void pack_rows(ops::DType format, Isa isa, const void* src, int64_t rows, int64_t k, uint8_t* out,
               int64_t first_group) {
  switch (format) {
    case ops::DType::Q8_0:
      return pack_q8_0(isa, static_cast<const BlockQ8_0*>(src), rows, k, out, first_group);
    default:
      if (is_packed_4bit(format)) return pack_4bit(format, src, rows, k, out, first_group);
      if (is_float_format(format)) return pack_float(format, src, rows, k, out, first_group);
      if (has_packed_kquant(format)) return pack_kquant(format, src, rows, k, out, first_group);
      throw std::invalid_argument(std::string("pack_rows: ") + ops::id_name(format) + " is not a packed format");
  }
}

void pack_gate_up_rows(ops::DType format, Isa isa, const void* gate, const void* up, int64_t rows, int64_t k,
                       uint8_t* out) {
  const int64_t row_bytes = ops::row_bytes(format, k);
  for (int64_t g = 0; g * kPackRows < rows; ++g) {
    const int64_t n = std::min(kPackRows, rows - g * kPackRows), offset = g * kPackRows * row_bytes;
    pack_rows(format, isa, static_cast<const uint8_t*>(gate) + offset, n, k, out, 2 * g);
    pack_rows(format, isa, static_cast<const uint8_t*>(up) + offset, n, k, out, 2 * g + 1);
  }
}

}  // namespace lumen
