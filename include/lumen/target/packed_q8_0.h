// The packed Q8_0 weight layout the matmul kernels stream. Weights are
// repacked once at load time (by the runtime) into row groups whose layout
// the generated kernels (codegen) assume: this header is the one place that
// says what it is.
#pragma once

#include <cstdint>

#include "lumen/common/numeric.h"
#include "lumen/target/isa.h"

namespace lumen {

// Every ISA uses row groups of 16 rows. Group g of a matrix with k_blocks
// 32-blocks starts at byte g * k_blocks * kPackedBlockBytes; inside it,
// block b holds 16 fp16 scales (row r at 2r) then 512 bytes of quants where
// byte 32 + 64*j + 4*r + i is weight k = 32b + 4j + i of row r: one 64-byte
// load gives 4 consecutive k of all 16 rows, one dword per row.
// Avx512Vnni and AvxVnni store w ^ 0x80 (= w + 128 as u8, for vpdpbusd); the others
// store w as is. Same 34 bytes per 32 weights as GGUF.
constexpr int64_t kPackRows = 16;
constexpr int64_t kPackedScaleBytes = 2 * kPackRows;
constexpr int64_t kPackedBlockBytes = kPackedScaleBytes + kPackRows * kQ8Block;  // 544

int64_t pack_row_group(Isa isa);                        // rows per group
int64_t packed_bytes(Isa isa, int64_t rows, int64_t k); // rows padded up to the group
// Packs `rows` rows of Q8_0 (k elements each) starting at packed row group
// `first_group` of `out`. Rows past `rows` up to the group are zero.
void pack_q8_0(Isa isa, const BlockQ8_0* src, int64_t rows, int64_t k, uint8_t* out,
               int64_t first_group);

// Value of weight (row r, k) of one packed group (reference decoding).
int8_t packed_weight(Isa isa, const uint8_t* group, int64_t k_blocks, int64_t r, int64_t k);
uint16_t packed_scale(const uint8_t* group, int64_t k_blocks, int64_t r, int64_t block);

}  // namespace lumen
