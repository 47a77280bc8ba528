// The block layouts of ggml's weight types, as GGUF stores them (ggml's
// ggml-common.h is the definition; the sizes are the type list's,
// ops/op_list.h, and are checked against it below). Plain structs: every
// reader of a quantized tensor reads these.
#pragma once

#include <cstdint>

#include "lumen/common/numeric.h"
#include "lumen/ops/op_list.h"

namespace lumen::quant {

constexpr int kQK = 32;    // elements of a 32-wide block
constexpr int kQK_K = 256; // elements of a k-quant super-block
constexpr int kKScaleSize = 12;

struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
using BlockQ8_0 = lumen::BlockQ8_0;
struct BlockQ2_K { uint8_t scales[kQK_K / 16]; uint8_t qs[kQK_K / 4]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[kQK_K / 8]; uint8_t qs[kQK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[kKScaleSize]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[kKScaleSize]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[kQK_K / 64]; uint8_t qs[kQK_K / 2]; };

// IQ4_NL's and IQ4_XS's non-linear levels (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

template <class Block>
constexpr bool block_is(ops::DType t) {
  return static_cast<int>(sizeof(Block)) == ops::row(t).block_bytes;
}
static_assert(block_is<BlockQ4_0>(ops::DType::Q4_0) && block_is<BlockQ4_1>(ops::DType::Q4_1));
static_assert(block_is<BlockQ5_0>(ops::DType::Q5_0) && block_is<BlockQ5_1>(ops::DType::Q5_1));
static_assert(block_is<BlockQ8_0>(ops::DType::Q8_0));
static_assert(block_is<BlockQ2_K>(ops::DType::Q2_K) && block_is<BlockQ3_K>(ops::DType::Q3_K));
static_assert(block_is<BlockQ4_K>(ops::DType::Q4_K) && block_is<BlockQ5_K>(ops::DType::Q5_K));
static_assert(block_is<BlockQ6_K>(ops::DType::Q6_K));
static_assert(block_is<BlockIQ4_NL>(ops::DType::IQ4_NL) && block_is<BlockIQ4_XS>(ops::DType::IQ4_XS));
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace lumen::quant
