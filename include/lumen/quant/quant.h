// Converting rows of weights between floats and the list's weight types
// (ops/op_list.h), as ggml does: the scalar reference every kernel, the
// binding and `lumen-gguf quantize` rest on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lumen/ops/op_list.h"
#include "lumen/quant/blocks.h"

namespace lumen::quant {

// Whether t is a weight type of the list (row(t).weight) that these
// functions convert: every one of them.
bool is_weight_type(ops::DType t);

// y[0..n) = the values of a row of type t (n a multiple of the type's block).
// Exactly ggml's dequantize_row_* (and its fp16/bf16 widening).
void dequantize_row(ops::DType t, const void* row, float* y, int64_t n);

// The blocks of x[0..n) in type t, byte for byte what ggml's reference
// quantizer writes for it without an importance matrix (what llama-quantize
// writes), n a multiple of the type's block.
void quantize_row(ops::DType t, const float* x, void* row, int64_t n);

// The first problem in a row of type t, or nullopt: a scale (d, dmin, m) that
// is NaN or infinite. "block 7: scale d is NaN".
std::optional<std::string> check_row(ops::DType t, const void* row, int64_t n);

}  // namespace lumen::quant
