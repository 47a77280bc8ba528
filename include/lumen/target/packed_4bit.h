// The packed layouts of the 32-wide 4-bit types the generated kernels stream
// (Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL) and of IQ4_XS: what they are, the
// load-time repack from GGUF's blocks, and the exact conversion of
// Q4_0/Q5_0/IQ4_NL blocks to Q8_0 (the prefill GEMM's format and the
// fallback's). Same 16-row groups as packed_q8_0.h, and no more bytes than
// GGUF's: 18 (Q4_0, IQ4_NL), 20 (Q4_1), 22 (Q5_0) and 24 (Q5_1) bytes per 32
// weights; IQ4_XS 138 per 256 against GGUF's 136 (+1.5%: its 6-bit scales as
// bytes).
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

// IQ4_XS: super-blocks of 8 32-blocks (256 k). Super-block s of group g (at
// s * kPackedIQ4_XSSuperBytes) holds, for its 16 rows:
//   [0, 32)      16 fp16 d (row r at 2r);
//   [32, 160)    per 32-block b of the super-block, 16 int8 scales ls - 32
//                (row r at 32 + 16b + r);
//   [160, 2208)  per 32-block b, at 160 + 256b, its nibbles as the 32-wide
//                types' [32, 288) above.
// The weight is d * (ls - 32) * kIq4nlValues[q]. packed_block_bytes is the
// mean per 32-block (276), so group strides follow the 32-wide formula.
constexpr int64_t kIQ4_XSBlocks = 8;
constexpr int64_t kPackedIQ4_XSScaleOffset = kPackedScaleBytes;                                       // 32
constexpr int64_t kPackedIQ4_XSNibbleOffset = kPackedIQ4_XSScaleOffset + kIQ4_XSBlocks * kPackRows;  // 160
constexpr int64_t kPackedIQ4_XSSuperBytes = kPackedIQ4_XSNibbleOffset + kIQ4_XSBlocks * kPackRows * kQ8Block / 2;
constexpr int64_t kPackedIQ4_XSBlockBytes = kPackedIQ4_XSSuperBytes / kIQ4_XSBlocks;  // 276
static_assert(kPackedIQ4_XSSuperBytes == 2208 && kPackedIQ4_XSBlockBytes * kIQ4_XSBlocks == kPackedIQ4_XSSuperBytes);

// 32-blocks per super-block of a format's packed layout (IQ4_XS 8, else 1),
// and where 32-block b of a super-block keeps its nibbles.
constexpr int64_t packed_super_blocks(ops::DType format) { return format == ops::DType::IQ4_XS ? kIQ4_XSBlocks : 1; }
constexpr int64_t packed_nibble_offset(ops::DType format, int64_t b) {
  return format == ops::DType::IQ4_XS ? kPackedIQ4_XSNibbleOffset + b * kPackRows * kQ8Block / 2 : kPackedNibbleOffset;
}

// Whether `format` is one of this header's layouts.
constexpr bool is_packed_4bit(ops::DType format) {
  return format == ops::DType::Q4_0 || format == ops::DType::Q5_0 || format == ops::DType::Q4_1 ||
         format == ops::DType::Q5_1 || format == ops::DType::IQ4_NL || format == ops::DType::IQ4_XS;
}
// Whether its q indexes kIq4nlValues (IQ4_NL, IQ4_XS).
constexpr bool has_iq4_levels(ops::DType format) {
  return format == ops::DType::IQ4_NL || format == ops::DType::IQ4_XS;
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
// elements each, a multiple of 256 for IQ4_XS) at packed row group `first_group` of `out`; rows past `rows`
// up to the group are zero (scale 0, min 0).
void pack_4bit(ops::DType format, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group);
inline void pack_q4_0(const quant::BlockQ4_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_4bit(ops::DType::Q4_0, src, rows, k, out, first_group);
}
inline void pack_q5_0(const quant::BlockQ5_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_4bit(ops::DType::Q5_0, src, rows, k, out, first_group);
}

// Unsigned quant (q, 0..31), fp16 scale (IQ4_XS: its super-block's d), min
// (Q4_1, Q5_1; else 0) and IQ4_XS's ls - 32 (else 1) of weight (row r, k) or
// 32-block `block` of one packed group.
int packed_q(ops::DType format, const uint8_t* group, int64_t r, int64_t k);
uint16_t packed_4bit_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block);
uint16_t packed_4bit_min(ops::DType format, const uint8_t* group, int64_t r, int64_t block);
int packed_4bit_block_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block);

// Converts `groups` packed groups of `format` (Q4_0, Q5_0 or IQ4_NL; k_blocks
// blocks each) into the packed Q8_0 layout of `isa` (exactly: the int8 quant
// is q - offset or IQ4_NL's level, the scale is d): what a prefill task runs the Q8_0 GEMM on.
// Q4_0's and IQ4_NL's level lookup is a `vpshufb` when the CPU has AVX2; the
// scalar version is the reference (and Q5_0's path), with the same bytes.
void convert_packed_to_q8_0(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
                            uint8_t* out);
void convert_packed_to_q8_0_scalar(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
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
