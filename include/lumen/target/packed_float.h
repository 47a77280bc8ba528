// The packed float weight layouts (F16, BF16, F32) the float matmul kernels
// stream (src/codegen/float_generator.cpp): the one place that says what
// they are. Same bytes per weight as GGUF: the repack costs no memory.
#pragma once

#include <cstdint>

#include "lumen/ops/op_list.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen {

// Row groups of kPackRows rows, group-contiguous: group g of a matrix with k
// columns starts at byte g * k * kPackRows * e (e = 2 for F16 and BF16, 4 for
// F32); inside it, weight (row r, column c) is element c * kPackRows + r, so
// one load at column c gives the 16 rows' values (F16: 32 bytes for
// vcvtph2ps; BF16: 32 bytes, widened by a 16-bit shift; F32: 64 bytes).
// Rows past the matrix up to the group are +0.

// Whether `format` is F16, BF16 or F32: the float formats, whose kernels
// read f32 activations (no quantize op: weight_formats.h matmul_input_dtype).
constexpr bool is_float_format(ops::DType format) {
  return format == ops::DType::F16 || format == ops::DType::BF16 || format == ops::DType::F32;
}
// Bytes of one element of float format `format` (2 or 4).
constexpr int64_t float_element_bytes(ops::DType format) { return format == ops::DType::F32 ? 4 : 2; }
// Bytes of 32 columns of one packed 16-row group.
constexpr int64_t packed_float_block_bytes(ops::DType format) {
  return kPackRows * kQ8Block * float_element_bytes(format);
}

// Packs `rows` GGUF rows of float type `format` (k elements each, k a
// positive multiple of 32) at packed row group `first_group` of `out`.
// Throws std::invalid_argument for anything else.
void pack_float(ops::DType format, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group);

// Value of weight (row r, column c) of one packed group (reference decoding).
float packed_float_weight(ops::DType format, const uint8_t* group, int64_t r, int64_t c);

}  // namespace lumen
