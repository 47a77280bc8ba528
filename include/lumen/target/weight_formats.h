// Which packed format a weight type runs in on an ISA: the one place that
// says it. The schedule names each matmul's kernels by it (program::KernelId's
// `weight`), the runtime packs each weight in it at load time, and codegen
// generates a kernel per format it answers.
#pragma once

#include <cstdint>

#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"
#include "lumen/target/packed_4bit.h"
#include "lumen/target/packed_float.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen {

// The packed layouts the generated kernels stream (packed_q8_0.h,
// packed_4bit.h: Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, IQ4_XS; packed_kquant.h: the k-quants'
// GEMV and batch kernels; packed_float.h: F16, BF16, F32).
inline constexpr ops::DType kPackedFormats[] = {ops::DType::Q8_0, ops::DType::Q4_0, ops::DType::Q5_0,
                                                ops::DType::Q4_1, ops::DType::Q5_1, ops::DType::IQ4_NL,
                                                ops::DType::IQ4_XS, ops::DType::Q2_K, ops::DType::Q3_K,
                                                ops::DType::Q4_K, ops::DType::Q5_K, ops::DType::Q6_K,
                                                ops::DType::F16, ops::DType::BF16, ops::DType::F32};

// Whether `format` is one of kPackedFormats.
constexpr bool is_packed_format(ops::DType format) {
  for (ops::DType f : kPackedFormats)
    if (f == format) return true;
  return false;
}

// Bytes of one 32-block of a 16-row group in packed `format` (0 for a type
// that is not a packed format).
constexpr int64_t packed_block_bytes(ops::DType format) {
  switch (format) {
    case ops::DType::Q8_0: return kPackedBlockBytes;
    case ops::DType::Q4_0: return kPackedQ4_0BlockBytes;
    case ops::DType::Q5_0: return kPackedQ5_0BlockBytes;
    case ops::DType::Q4_1: return kPackedQ4_1BlockBytes;
    case ops::DType::Q5_1: return kPackedQ5_1BlockBytes;
    case ops::DType::IQ4_NL: return kPackedIQ4_NLBlockBytes;
    case ops::DType::IQ4_XS: return kPackedIQ4_XSBlockBytes;  // the mean: its super-blocks hold 8
    case ops::DType::F16:
    case ops::DType::BF16:
    case ops::DType::F32: return packed_float_block_bytes(format);
    default: return 0;
  }
}

// Bytes of a rows x k matrix in packed `format`, rows padded up to the group
// (every format's groups are kPackRows rows). Throws std::invalid_argument for
// a type that is not a packed format or a k that is not a multiple of its
// block (32; 256 for the k-quants and IQ4_XS).
int64_t packed_bytes(ops::DType format, int64_t rows, int64_t k);

// Packs `rows` rows of GGUF blocks of type `format` (k elements each) at
// packed row group `first_group` of `out` in that packed format for `isa`
// (packed_q8_0.h, packed_4bit.h, packed_kquant.h); rows past `rows` up to
// the group are zero.
void pack_rows(ops::DType format, Isa isa, const void* src, int64_t rows, int64_t k, uint8_t* out,
               int64_t first_group);

// Packs gate and up (each `rows` rows of GGUF blocks of `format`) alternating
// per row group, as the SiluMul epilogue reads them: gate's group g at packed
// group 2g of `out`, up's at 2g + 1; 2 * packed_bytes(format, rows, k) bytes.
void pack_gate_up_rows(ops::DType format, Isa isa, const void* gate, const void* up, int64_t rows, int64_t k,
                       uint8_t* out);

// The packed format in which a matmul weight of type `weight` runs on `isa`:
// the type's own layout, with native kernels on every ISA (every weight type
// has one), else Q8_0 (the weight converted to Q8_0 once, at load time).
ops::DType packed_format(ops::DType weight, Isa isa);

// The type rule of a matmul's input: the activations its kernels read when
// its weights are packed in `format`. The float formats' kernels read the f32
// rows themselves (closer to an exact dot than ggml's fp16/bf16-rounded
// activations and no slower: docs/kernels.md "Float weights"); every other
// format reads act_q8 (a Quantize op in front of the matmul).
constexpr ops::DType matmul_input_dtype(ops::DType format) {
  return is_float_format(format) ? ops::DType::F32 : ops::DType::ActQ8;
}

// packed_format for a weight of a matmul whose input is `input`: a matmul
// with any layer's weights in a quantized format reads act_q8 (one input for
// every layer), and its float weights then run as Q8_0, converted at load.
ops::DType packed_format(ops::DType weight, Isa isa, ops::DType input);

}  // namespace lumen
