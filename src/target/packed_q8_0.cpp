// Load-time repack of Q8_0 weight rows into the 16-row groups the generated
// kernels stream (layout in include/lumen/target/packed_q8_0.h). Same
// 34 bytes per 32 weights as GGUF: the repack costs no memory.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "lumen/target/packed_q8_0.h"

namespace lumen {

int8_t packed_weight(Isa isa, const uint8_t* group, int64_t k_blocks, int64_t r, int64_t k) {
  (void)k_blocks;
  const int64_t b = k / kQ8Block, kk = k % kQ8Block;
  const uint8_t byte = group[b * kPackedBlockBytes + kPackedScaleBytes + (kk / 4) * 64 + r * 4 + kk % 4];
  return int8_t(is_vnni_isa(isa) ? byte ^ 0x80 : byte);
}

uint16_t packed_scale(const uint8_t* group, int64_t k_blocks, int64_t r, int64_t block) {
  (void)k_blocks;
  uint16_t d;
  std::memcpy(&d, group + block * kPackedBlockBytes + 2 * r, 2);
  return d;
}

int64_t pack_row_group(Isa) { return kPackRows; }

int64_t packed_bytes(Isa, int64_t rows, int64_t k) {
  if (rows < 0 || k < 0 || k % kQ8Block != 0) {
    throw std::invalid_argument("packed_bytes: k must be a non-negative multiple of 32");
  }
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  return groups * (k / kQ8Block) * kPackedBlockBytes;
}

void pack_q8_0(Isa isa, const BlockQ8_0* src, int64_t rows, int64_t k, uint8_t* out,
               int64_t first_group) {
  if (rows < 0 || k <= 0 || k % kQ8Block != 0 || first_group < 0) {
    throw std::invalid_argument("pack_q8_0: rows >= 0, k a positive multiple of 32, first_group >= 0");
  }
  const int64_t k_blocks = k / kQ8Block;
  const uint8_t flip = is_vnni_isa(isa) ? 0x80 : 0x00;
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + (first_group + g) * k_blocks * kPackedBlockBytes;
    for (int64_t b = 0; b < k_blocks; ++b) {
      uint8_t* blk = group + b * kPackedBlockBytes;
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        uint8_t* quads = blk + kPackedScaleBytes + r * 4;
        if (row >= rows) {  // padding rows: weight 0 and scale 0
          std::memset(blk + 2 * r, 0, 2);
          for (int64_t j = 0; j < kQ8Block / 4; ++j) std::memset(quads + j * 64, flip, 4);
          continue;
        }
        const BlockQ8_0& q = src[row * k_blocks + b];
        std::memcpy(blk + 2 * r, &q.d, 2);
        for (int64_t j = 0; j < kQ8Block / 4; ++j) {
          for (int64_t i = 0; i < 4; ++i) quads[j * 64 + i] = uint8_t(q.qs[4 * j + i]) ^ flip;
        }
      }
    }
  }
}

}  // namespace lumen
