// The packed layouts of the 32-wide 4-bit types the generated kernels stream
// (Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL): what they are, the load-time repack from
// GGUF's blocks, and the exact conversion of Q4_0/Q5_0/IQ4_NL blocks to Q8_0
// (the prefill GEMM's format and the fallback's). Same 16-row groups as
// packed_q8_0.h, and no more bytes than GGUF's: 18 (Q4_0, IQ4_NL), 20 (Q4_1),
// 22 (Q5_0) and 24 (Q5_1) bytes per 32 weights.
#pragma once

#include <cstdint>

#include "lumen/common/numeric.h"
#include "lumen/ops/op_list.h"
#include "lumen/quant/blocks.h"
#include "lumen/target/packed_q8_0.h"

namespace lumen {

// Block b of group g (a group has k_blocks blocks, packed_block_bytes(format)
// each, weight_formats.h) holds, for its 16 rows:
//   [0, 32)    16 fp16 scales d (row r at 2r), as Q8_0's;
//   [32, 288)  4-bit quants q (unsigned, 0..15), four 64-byte vectors: byte
//              32 + 64*v + 4*r + i holds k = 8v + i in its low nibble and
//              k = 8v + 4 + i in its high one; so vector v's low nibbles are
//              4-k step j = 2v (one dword per row), its high nibbles step 2v+1;
//   Q5_0, Q5_1 only, [288, 352): the fifth bits, one qword per 4-k step j:
//              bit 4*r + i is that of k = 4j + i of row r (a kmovq mask for
//              the step's 64 weight bytes; dword h for the 8-row ymm half h);
//   Q4_1, Q5_1 only, the last 32 bytes: 16 fp16 mins m (row r at 2r).
// The weight is d * (q - 8) (Q4_0), d * ((q | fifth << 4) - 16) (Q5_0),
// d * q + m (Q4_1), d * (q | fifth << 4) + m (Q5_1) or d * kIq4nlValues[q]
// (IQ4_NL): the same on every ISA (the kernels take Q4_0's and Q5_0's offset
// and the mins' sums from ActBlock::sum, and look IQ4_NL's level up).
constexpr int64_t kPackedNibbleOffset = kPackedScaleBytes;                          // 32
constexpr int64_t kPackedHighBitOffset = kPackedNibbleOffset + kPackRows * kQ8Block / 2;  // 288
constexpr int64_t kPackedQ4_0BlockBytes = kPackedHighBitOffset;                    // 288 = 16 x 18
constexpr int64_t kPackedQ5_0BlockBytes = kPackedHighBitOffset + kPackRows * kQ8Block / 8;  // 352 = 16 x 22
constexpr int64_t kPackedIQ4_NLBlockBytes = kPackedQ4_0BlockBytes;                 // 288 = 16 x 18
constexpr int64_t kPackedQ4_1BlockBytes = kPackedQ4_0BlockBytes + kPackedScaleBytes;  // 320 = 16 x 20
constexpr int64_t kPackedQ5_1BlockBytes = kPackedQ5_0BlockBytes + kPackedScaleBytes;  // 384 = 16 x 24
static_assert(kPackedQ4_0BlockBytes == kPackRows * 18 && kPackedQ5_0BlockBytes == kPackRows * 22);
static_assert(kPackedQ4_1BlockBytes == kPackRows * 20 && kPackedQ5_1BlockBytes == kPackRows * 24);

// Whether `format` is one of this header's layouts.
constexpr bool is_packed_4bit(ops::DType format) {
  return format == ops::DType::Q4_0 || format == ops::DType::Q5_0 || format == ops::DType::Q4_1 ||
         format == ops::DType::Q5_1 || format == ops::DType::IQ4_NL;
}
// Whether its blocks carry fifth bits (Q5_0, Q5_1) and fp16 mins (Q4_1, Q5_1).
constexpr bool has_fifth_bits(ops::DType format) {
  return format == ops::DType::Q5_0 || format == ops::DType::Q5_1;
}
constexpr bool has_mins(ops::DType format) { return format == ops::DType::Q4_1 || format == ops::DType::Q5_1; }
// The offset of the quants: weight = d * (q - offset) (0 for the types with
// a min and for IQ4_NL, whose q indexes kIq4nlValues).
constexpr int q_offset(ops::DType format) {
  return format == ops::DType::Q5_0 ? 16 : format == ops::DType::Q4_0 ? 8 : 0;
}

// Packs `rows` rows of GGUF blocks of `format` (one of is_packed_4bit; k
// elements each) at packed row group `first_group` of `out`; rows past `rows`
// up to the group are zero (scale 0, min 0).
void pack_4bit(ops::DType format, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group);
inline void pack_q4_0(const quant::BlockQ4_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_4bit(ops::DType::Q4_0, src, rows, k, out, first_group);
}
inline void pack_q5_0(const quant::BlockQ5_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_4bit(ops::DType::Q5_0, src, rows, k, out, first_group);
}

// Unsigned quant (q, 0..31), scale and min (Q4_1, Q5_1) of weight (row r, k)
// of one packed group.
int packed_q(ops::DType format, const uint8_t* group, int64_t r, int64_t k);
uint16_t packed_4bit_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block);
uint16_t packed_4bit_min(ops::DType format, const uint8_t* group, int64_t r, int64_t block);

// Converts `groups` packed groups of `format` (Q4_0, Q5_0 or IQ4_NL; k_blocks
// blocks each) into the packed Q8_0 layout of `isa` (exactly: the int8 quant
// is q - offset or IQ4_NL's level, the scale is d): what a prefill task runs the Q8_0 GEMM on.
void convert_packed_to_q8_0(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
                            uint8_t* out);

// Converts one row of GGUF blocks of `type` (Q4_0, Q5_0 or IQ4_NL; k elements)
// to Q8_0 blocks exactly (q - 8, (q | h << 4) - 16 or the IQ4_NL level, and the
// same d): the Q8_0 fallback for these types needs no requantization.
void convert_row_to_q8_0(ops::DType type, const void* src, BlockQ8_0* out, int64_t k);
// Whether convert_row_to_q8_0 converts `type`.
constexpr bool converts_exactly_to_q8_0(ops::DType type) {
  return type == ops::DType::Q4_0 || type == ops::DType::Q5_0 || type == ops::DType::IQ4_NL;
}

}  // namespace lumen
