// The packed k-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) weight layouts the k-quant kernels stream.
// Weights are repacked once at load time into 16-row groups; this header is
// the one place that says what the layouts are. Unlike packed Q8_0 they are
// the same for every ISA (the quants are unsigned, so vpdpbusd and
// vpmaddubsw read them as they are).
//
// A group of a matrix with K columns holds K/256 super-blocks of
// packed_kquant_super_bytes(t) bytes each, in k order. In both layouts a
// "quant vector" is 64 bytes: row r's dword at 4r, whose byte i holds weight
// k0 + i in its low nibble and k0 + 4 + i in its high nibble, so one load gives
// 8 consecutive k of all 16 rows (rows 0-7 in the first 32 bytes).
//
// Q4_K super-block (16 x 148 bytes, GGUF: 16 x 144):
//   [0, 32) d and [32, 64) dmin, fp16, row r at 2r;
//   then 8 sub-blocks (one per 32-block j) of 288 bytes at 64 + 288j:
//     [0, 16) the 6-bit scale of row r at r, [16, 32) the 6-bit min,
//     [32, 288) 4 quant vectors, vector v at 32 + 64v for k0 = 32j + 8v.
// Q5_K super-block (16 x 180 bytes, GGUF: 16 x 176): as Q4_K, with sub-blocks
//   of 352 bytes: after the 4 quant vectors (the low 4 bits of q), at 288, one
//   64-byte vector of the fifth bits: row r's dword at 4r, byte i holding at
//   bit 2v the fifth bit of k = 32j + 8v + i and at bit 2v + 1 that of 32j + 8v + 4 + i.
// Q6_K super-block (16 x 210 bytes, as GGUF):
//   [0, 32) d, fp16;
//   then 8 sub-blocks of 416 bytes at 32 + 416j:
//     [0, 32) the int8 scales of the two 16-blocks, 16-block s of row r at 16s + r,
//     [32, 288) the low 4 bits of q as 4 quant vectors (as Q4_K),
//     [288, 416) the high 2 bits: two 64-byte vectors u (k 32j + 16u + 0..15),
//       row r's dword at 4r, byte i holding bits 2p..2p+1 = high bits of
//       k = 32j + 16u + 4p + i.
// Q3_K super-block (16 x 114 bytes, GGUF: 16 x 110; q = q3 0..7, the value
//   q - 4, Q6_K's form with its scales widened to one int8 sc6 - 32 each):
//   [0, 32) d, fp16;
//   then 8 sub-blocks of 224 bytes at 32 + 224j:
//     [0, 32) the int8 scales of the two 16-blocks, as Q6_K,
//     [32, 160) the low 2 bits of q: two 64-byte vectors u laid out as Q6_K's high bits,
//     [160, 224) the third bit: one 64-byte vector, row r's dword at 4r, byte i
//       holding at bit e that of k = 32j + 4e + i.
// Q2_K super-block (16 x 84 bytes, as GGUF; q 0..3, the value d * sc * q - dmin * m
//   with a 4-bit sc and m per 16-block):
//   [0, 32) d and [32, 64) dmin, fp16, row r at 2r;
//   then 8 sub-blocks of 160 bytes at 64 + 160j:
//     [0, 32) GGUF's scale byte (sc | m << 4) of the two 16-blocks, 16-block s of row r at 16s + r,
//     [32, 160) q: two 64-byte vectors laid out as Q3_K's low bits.
// Padding rows (past the matrix, up to the group) are all zero.
//
// The expanded layout (the k-quant GEMM's, made per prefill task from the
// packed one by expand_kquant; the same for every ISA): a group of K columns
// holds K/32 blocks of expanded_kquant_block_bytes(t), in k order. Block b (k0 = 32b):
//   [0, 512) 8 vectors of u8 q (Q2_K 0..3, Q4_K, Q4_1 0..15, Q5_K, Q5_1 0..31,
//     Q6_K 0..63, Q3_K q + 28, which makes it a Q6_K block), vector e holding q
//     of row r, k = k0 + 4e + i at byte 4r + i;
//   [512, 640) two vectors of 16 fp32 factors, row r at 4r, each computed as
//     the GEMV computes it: Q4_K, Q5_K float(d) * float(sc), then
//     (float(dmin) * float(m)) * (1/128); Q6_K, Q3_K float(sc_s) * float(d) for the
//     16-blocks s = 0, 1; Q4_1, Q5_1 (packed_4bit.h, d * q + m: Q4_K's two
//     terms with one scale per 32) float(d), then float(m) * (-1/128);
//   Q2_K has four factor vectors, [512, 768): float(d) * float(sc_s), then
//     float(dmin) * float(m_s), s = 0, 1 (a min per 16-block: ActBlock's sum
//     per 32 cannot carry it, so the kernels sum each 16-block's x).
#pragma once

#include <cstdint>

#include "lumen/ops/op_list.h"

namespace lumen {

inline constexpr int64_t kKQuantSuperK = 256;
inline constexpr int64_t kKQuantSubBlocks = 8;  // 32-blocks per super-block
inline constexpr int64_t kQ4KHeaderBytes = 64, kQ4KSubBytes = 288;
inline constexpr int64_t kQ5KSubBytes = 352;
inline constexpr int64_t kQ6KHeaderBytes = 32, kQ6KSubBytes = 416;
inline constexpr int64_t kKQuantHighBits = 288;  // offset of the high bits (Q5_K, Q6_K) in a sub-block
inline constexpr int64_t kQ3KSubBytes = 224, kQ3KThirdBits = 160;  // Q3_K: its sub-block, its third bits there

inline constexpr int64_t kQ2KSubBytes = 160;
inline constexpr int64_t kKQuantTwoBits = 32;  // Q2_K, Q3_K: offset of the 2-bit q vectors in a sub-block

inline constexpr int64_t kExpandedKQuantFactors = 512;
inline constexpr int64_t expanded_kquant_block_bytes(ops::DType t) { return t == ops::DType::Q2_K ? 768 : 640; }

// Whether t has Q6_K's form d * sc * (q - offset), an int8 scale per
// 16-block and no min: Q6_K, Q3_K.
inline constexpr bool has_q6k_form(ops::DType t) { return t == ops::DType::Q6_K || t == ops::DType::Q3_K; }
// Int accumulators per row and token a k-quant kernel keeps for a 32-block:
// one, or for Q6_K, Q3_K and Q2_K one per 16-block (each has its own scale).
inline constexpr int64_t kquant_int_accumulators(ops::DType t) {
  return has_q6k_form(t) || t == ops::DType::Q2_K ? 2 : 1;
}
// The offset of a per-16 type's q (value q - offset).
inline constexpr int kquant_q_offset(ops::DType t) { return t == ops::DType::Q3_K ? 4 : 32; }

// Whether t has a packed k-quant layout (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
bool has_packed_kquant(ops::DType t);
// Whether the prefill GEMM of packed format t reads the expanded layout
// (the k-quant GEMM, gemm.<t>.*): the k-quants, and Q4_1 and Q5_1, whose
// min keeps them from an exact Q8_0 form.
bool has_expanded_kquant(ops::DType t);
// Bytes of one super-block of one 16-row group: 1344 (Q2_K), 1824 (Q3_K), 2368 (Q4_K), 2880 (Q5_K), 3360 (Q6_K).
int64_t packed_kquant_super_bytes(ops::DType t);
int64_t packed_kquant_header_bytes(ops::DType t);
int64_t packed_kquant_sub_bytes(ops::DType t);
// Bytes of `rows` x k packed (rows padded up to the group). Throws
// std::invalid_argument unless k is a positive multiple of 256.
int64_t packed_kquant_bytes(ops::DType t, int64_t rows, int64_t k);
// Packs `rows` rows of GGUF blocks of type t (k elements each) at packed row
// group `first_group` of `out`.
void pack_kquant(ops::DType t, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group);

// Expands `groups` consecutive packed groups of type t (has_expanded_kquant;
// K = 32 * k_blocks, k_blocks % 8 == 0 for the k-quants) at `src` into the
// expanded layout at `dst` (groups * k_blocks * expanded_kquant_block_bytes(t) bytes).
void expand_kquant(ops::DType t, const uint8_t* src, int64_t groups, int64_t k_blocks, uint8_t* dst);

// Reference decoding of one packed group (the scalar oracle reads these).
// q of weight (r, k): Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 (the value is q - 32),
// Q3_K 0..7 (the value is q - 4), Q2_K 0..3.
int packed_kquant_q(ops::DType t, const uint8_t* group, int64_t r, int64_t k);
// fp16 bits of d or (Q2_K, Q4_K, Q5_K) dmin of row r in super-block sb.
uint16_t packed_kquant_d(const uint8_t* group, ops::DType t, int64_t r, int64_t sb);
uint16_t packed_kquant_dmin(const uint8_t* group, ops::DType t, int64_t r, int64_t sb);
// Q4_K, Q5_K: the 6-bit scale / min of 32-block j (0..7) of super-block sb;
// Q6_K, Q3_K: packed_kquant_scale gives the int8 scale of 16-block s (0..15);
// Q2_K: the 4-bit scale / min of 16-block s (0..15).
int packed_kquant_scale(ops::DType t, const uint8_t* group, int64_t r, int64_t sb, int64_t sub);
int packed_kquant_min(const uint8_t* group, ops::DType t, int64_t r, int64_t sb, int64_t j);

}  // namespace lumen
