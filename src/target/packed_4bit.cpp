// Load-time repack of Q4_0 / Q5_0 rows into the 16-row groups the generated
// kernels stream, and their exact conversions to Q8_0 (layouts in
// include/lumen/target/packed_4bit.h and packed_q8_0.h).
#include "lumen/target/packed_4bit.h"

#include <cstring>
#include <stdexcept>

#include "lumen/target/weight_formats.h"

namespace lumen {
namespace {

// The unsigned 5-bit (Q5_0) or 4-bit quant of element e of a GGUF block.
int block_q(const quant::BlockQ4_0& b, int e) { return e < 16 ? b.qs[e] & 0x0F : b.qs[e - 16] >> 4; }
int block_q(const quant::BlockQ5_0& b, int e) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  const int low = e < 16 ? b.qs[e] & 0x0F : b.qs[e - 16] >> 4;
  return low | int((qh >> e) & 1) << 4;
}

template <class Block>
void pack_rows(ops::DType format, const Block* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  if (rows < 0 || k <= 0 || k % kQ8Block != 0 || first_group < 0) {
    throw std::invalid_argument(std::string("pack_") + ops::to_string(format) +
                                ": rows >= 0, k a positive multiple of 32, first_group >= 0");
  }
  const int64_t k_blocks = k / kQ8Block, block_bytes = packed_block_bytes(format);
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + (first_group + g) * k_blocks * block_bytes;
    std::memset(group, 0, size_t(k_blocks * block_bytes));  // padding rows: scale 0, q 0
    for (int64_t b = 0; b < k_blocks; ++b) {
      uint8_t* blk = group + b * block_bytes;
      for (int64_t r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
        const Block& q = src[(g * kPackRows + r) * k_blocks + b];
        std::memcpy(blk + 2 * r, &q.d, 2);
        for (int e = 0; e < kQ8Block; ++e) {
          const int j = e / 4, i = e % 4, v = block_q(q, e);
          uint8_t& nibbles = blk[kPackedNibbleOffset + 64 * (j / 2) + 4 * r + i];
          nibbles |= uint8_t((v & 0x0F) << (j % 2 ? 4 : 0));
          if (format == ops::DType::Q5_0 && (v & 0x10)) {
            blk[kPackedHighBitOffset + 8 * j + (4 * r + i) / 8] |= uint8_t(1u << ((4 * r + i) % 8));
          }
        }
      }
    }
  }
}

}  // namespace

int64_t packed_bytes(ops::DType format, int64_t rows, int64_t k) {
  if (rows < 0 || k < 0 || k % kQ8Block != 0 || !is_packed_format(format)) {
    throw std::invalid_argument("packed_bytes: a packed format, k a non-negative multiple of 32");
  }
  return (rows + kPackRows - 1) / kPackRows * (k / kQ8Block) * packed_block_bytes(format);
}

void pack_q4_0(const quant::BlockQ4_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_rows(ops::DType::Q4_0, src, rows, k, out, first_group);
}

void pack_q5_0(const quant::BlockQ5_0* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  pack_rows(ops::DType::Q5_0, src, rows, k, out, first_group);
}

int packed_q(ops::DType format, const uint8_t* group, int64_t r, int64_t k) {
  const int64_t b = k / kQ8Block, e = k % kQ8Block, j = e / 4, i = e % 4;
  const uint8_t* blk = group + b * packed_block_bytes(format);
  int q = (blk[kPackedNibbleOffset + 64 * (j / 2) + 4 * r + i] >> (j % 2 ? 4 : 0)) & 0x0F;
  if (format == ops::DType::Q5_0) q |= ((blk[kPackedHighBitOffset + 8 * j + (4 * r + i) / 8] >> ((4 * r + i) % 8)) & 1) << 4;
  return q;
}

uint16_t packed_4bit_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block) {
  uint16_t d;
  std::memcpy(&d, group + block * packed_block_bytes(format) + 2 * r, 2);
  return d;
}

void convert_packed_to_q8_0(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
                            uint8_t* out) {
  const uint8_t flip = is_vnni_isa(isa) ? 0x80 : 0x00;
  const int offset = q_offset(format);
  const int64_t src_block = packed_block_bytes(format);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t b = 0; b < k_blocks; ++b) {
      const uint8_t* in = src + (g * k_blocks + b) * src_block;
      uint8_t* blk = out + (g * k_blocks + b) * kPackedBlockBytes;
      std::memcpy(blk, in, kPackedScaleBytes);
      for (int64_t j = 0; j < kQ8Block / 4; ++j) {
        const uint8_t* nibbles = in + kPackedNibbleOffset + 64 * (j / 2);
        const uint8_t* high = in + kPackedHighBitOffset + 8 * j;
        uint8_t* quads = blk + kPackedScaleBytes + 64 * j;
        for (int64_t byte = 0; byte < 64; ++byte) {
          int q = (nibbles[byte] >> (j % 2 ? 4 : 0)) & 0x0F;
          if (format == ops::DType::Q5_0) q |= ((high[byte / 8] >> (byte % 8)) & 1) << 4;
          quads[byte] = uint8_t(int8_t(q - offset)) ^ flip;
        }
      }
    }
  }
}

void convert_row_to_q8_0(ops::DType type, const void* src, BlockQ8_0* out, int64_t k) {
  if (!converts_exactly_to_q8_0(type) || k < 0 || k % kQ8Block != 0) {
    throw std::invalid_argument("convert_row_to_q8_0: a Q4_0, Q5_0 or IQ4_NL row of a multiple of 32");
  }
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    BlockQ8_0& o = out[b];
    for (int e = 0; e < kQ8Block; ++e) {
      if (type == ops::DType::Q4_0) {
        const auto& q = static_cast<const quant::BlockQ4_0*>(src)[b];
        o.d = q.d;
        o.qs[e] = int8_t(block_q(q, e) - 8);
      } else if (type == ops::DType::Q5_0) {
        const auto& q = static_cast<const quant::BlockQ5_0*>(src)[b];
        o.d = q.d;
        o.qs[e] = int8_t(block_q(q, e) - 16);
      } else {
        const auto& q = static_cast<const quant::BlockIQ4_NL*>(src)[b];
        o.d = q.d;
        o.qs[e] = quant::kIq4nlValues[e < 16 ? q.qs[e] & 0x0F : q.qs[e - 16] >> 4];
      }
    }
  }
}

}  // namespace lumen
