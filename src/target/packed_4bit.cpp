// Load-time repack of Q4_0 / Q5_0 / Q4_1 / Q5_1 / IQ4_NL / IQ4_XS rows into the 16-row
// groups the generated kernels stream, and the exact conversions to Q8_0 (layouts in
// include/lumen/target/packed_4bit.h and packed_q8_0.h).
#include "lumen/target/packed_4bit.h"

#include <immintrin.h>

#include <array>
#include <cstring>
#include <stdexcept>

#include "lumen/target/isa.h"
#include "lumen/target/weight_formats.h"

namespace lumen {
namespace {

// The unsigned quants of a GGUF block, decoded once.
void nibbles_and_fifth_bits(const uint8_t qs[16], const uint8_t qh_bytes[4], uint8_t q[kQ8Block]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int e = 0; e < 16; ++e) {
    q[e] = uint8_t((qs[e] & 0x0F) | ((qh >> e) & 1) << 4);
    q[e + 16] = uint8_t((qs[e] >> 4) | ((qh >> (e + 16)) & 1) << 4);
  }
}
void block_quants(const quant::BlockQ5_0& b, uint8_t q[kQ8Block]) { nibbles_and_fifth_bits(b.qs, b.qh, q); }
void block_quants(const quant::BlockQ5_1& b, uint8_t q[kQ8Block]) { nibbles_and_fifth_bits(b.qs, b.qh, q); }
// Q4_1's and IQ4_NL's nibbles are laid out as Q4_0's.
template <class Block>
void block_quants(const Block& b, uint8_t q[kQ8Block]) {
  for (int e = 0; e < 16; ++e) {
    q[e] = b.qs[e] & 0x0F;
    q[e + 16] = b.qs[e] >> 4;
  }
}

// Byte i of kBitBytes[m] is 16 where bit i of m is set: one mask byte of
// Q5_0's fifth bits as 8 bytes to OR in.
constexpr std::array<uint64_t, 256> kBitBytes = [] {
  std::array<uint64_t, 256> t{};
  for (int m = 0; m < 256; ++m)
    for (int i = 0; i < 8; ++i)
      if (m >> i & 1) t[size_t(m)] |= uint64_t(0x10) << (8 * i);
  return t;
}();

template <class Block>
void pack_4bit_rows(ops::DType format, const Block* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  if (rows < 0 || k <= 0 || k % kQ8Block != 0 || first_group < 0) {
    throw std::invalid_argument(std::string("pack_") + ops::to_string(format) +
                                ": rows >= 0, k a positive multiple of 32, first_group >= 0");
  }
  const int64_t k_blocks = k / kQ8Block, block_bytes = packed_block_bytes(format);
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + (first_group + g) * k_blocks * block_bytes;
    std::memset(group, 0, size_t(k_blocks * block_bytes));  // padding rows: scale 0, q 0
    for (int64_t r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
      const Block* row = src + (g * kPackRows + r) * k_blocks;
      for (int64_t b = 0; b < k_blocks; ++b) {
        uint8_t* blk = group + b * block_bytes;
        std::memcpy(blk + 2 * r, &row[b].d, 2);
        if constexpr (requires { row[b].m; }) std::memcpy(blk + block_bytes - kPackedScaleBytes + 2 * r, &row[b].m, 2);
        uint8_t q[kQ8Block];
        block_quants(row[b], q);
        for (int v = 0; v < 4; ++v) {
          for (int i = 0; i < 4; ++i) {
            blk[kPackedNibbleOffset + 64 * v + 4 * r + i] = uint8_t((q[8 * v + i] & 0x0F) | (q[8 * v + 4 + i] & 0x0F) << 4);
          }
        }
        if (!has_fifth_bits(format)) continue;
        for (int j = 0; j < kQ8Block / 4; ++j) {
          int bits = 0;
          for (int i = 0; i < 4; ++i) bits |= (q[4 * j + i] >> 4) << i;
          blk[kPackedHighBitOffset + 8 * j + r / 2] |= uint8_t(bits << (4 * (r % 2)));
        }
      }
    }
  }
}

// IQ4_XS: per 256-k super-block the row's d, its eight 6-bit scales as
// ls - 32, and each 32-block's nibbles in IQ4_NL's order.
void pack_iq4_xs_rows(const quant::BlockIQ4_XS* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  if (rows < 0 || k <= 0 || k % quant::kQK_K != 0 || first_group < 0) {
    throw std::invalid_argument("pack_iq4_xs: rows >= 0, k a positive multiple of 256, first_group >= 0");
  }
  const int64_t supers = k / quant::kQK_K, group_bytes = supers * kPackedIQ4_XSSuperBytes;
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  for (int64_t g = 0; g < groups; ++g) {
    uint8_t* group = out + (first_group + g) * group_bytes;
    std::memset(group, 0, size_t(group_bytes));  // padding rows: d 0, scales 0, q 0
    for (int64_t r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
      const quant::BlockIQ4_XS* row = src + (g * kPackRows + r) * supers;
      for (int64_t sb = 0; sb < supers; ++sb) {
        const quant::BlockIQ4_XS& x = row[sb];
        uint8_t* super = group + sb * kPackedIQ4_XSSuperBytes;
        std::memcpy(super + 2 * r, &x.d, 2);
        for (int b = 0; b < kIQ4_XSBlocks; ++b) {
          const int ls = ((x.scales_l[b / 2] >> (4 * (b % 2))) & 0x0F) | (((x.scales_h >> (2 * b)) & 3) << 4);
          super[kPackedIQ4_XSScaleOffset + kPackRows * b + r] = uint8_t(int8_t(ls - 32));
          uint8_t q[kQ8Block];
          for (int e = 0; e < 16; ++e) {
            q[e] = x.qs[16 * b + e] & 0x0F;
            q[e + 16] = x.qs[16 * b + e] >> 4;
          }
          uint8_t* nibbles = super + packed_nibble_offset(ops::DType::IQ4_XS, b);
          for (int v = 0; v < 4; ++v)
            for (int i = 0; i < 4; ++i) nibbles[64 * v + 4 * r + i] = uint8_t(q[8 * v + i] | q[8 * v + 4 + i] << 4);
        }
      }
    }
  }
}

// convert_packed_to_q8_0 for one format: the int8 level of each q, as u8 ^ flip.
// Q4_0's and Q5_0's level is q - offset, which the compiler vectorizes; a
// table lookup (IQ4_NL's) it does not.
template <bool kHighBits, bool kLevelTable>
void convert_groups(const int8_t levels[32], int offset, uint8_t flip, int64_t src_block, const uint8_t* src,
                    int64_t blocks, uint8_t* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* in = src + b * src_block;
    uint8_t* blk = out + b * kPackedBlockBytes;
    std::memcpy(blk, in, kPackedScaleBytes);
    for (int64_t j = 0; j < kQ8Block / 4; ++j) {
      const uint8_t* nibbles = in + kPackedNibbleOffset + 64 * (j / 2);
      const int shift = j % 2 ? 4 : 0;
      uint8_t high[64] = {};
      if constexpr (kHighBits) {
        for (int m = 0; m < 8; ++m) std::memcpy(high + 8 * m, &kBitBytes[in[kPackedHighBitOffset + 8 * j + m]], 8);
      }
      uint8_t* quads = blk + kPackedScaleBytes + 64 * j;
      for (int byte = 0; byte < 64; ++byte) {
        const uint8_t q = uint8_t(((nibbles[byte] >> shift) & 0x0F) | high[byte]);
        quads[byte] = uint8_t(uint8_t(kLevelTable ? levels[q] : q - offset) ^ flip);
      }
    }
  }
}

// convert_groups<false> with the level lookup as one `vpshufb` per 32 quants
// from a 16-byte table (level ^ flip): the same bytes.
__attribute__((target("avx2"))) void convert_nibble_groups_avx2(const int8_t levels[16], uint8_t flip,
                                                                int64_t src_block, const uint8_t* src,
                                                                int64_t blocks, uint8_t* out) {
  alignas(16) uint8_t table[16];
  for (int q = 0; q < 16; ++q) table[q] = uint8_t(uint8_t(levels[q]) ^ flip);
  const __m256i lut = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* in = src + b * src_block;
    uint8_t* blk = out + b * kPackedBlockBytes;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    static_assert(kPackedScaleBytes == 32);
    // Vector v's low nibbles are 4-k step 2v, its high ones step 2v + 1.
    for (int64_t half = 0; half < 2 * kQ8Block / 8; ++half) {  // 4 vectors of 2 ymm halves
      const int64_t v = half / 2, h = half % 2;
      const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + kPackedNibbleOffset + 64 * v + 32 * h));
      const __m256i lo = _mm256_and_si256(n, low_nibble);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(n, 4), low_nibble);
      uint8_t* quads = blk + kPackedScaleBytes + 64 * (2 * v) + 32 * h;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(quads), _mm256_shuffle_epi8(lut, lo));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(quads + 64), _mm256_shuffle_epi8(lut, hi));
    }
  }
}

// The int8 weight level of each q of a format that converts exactly to Q8_0.
std::array<int8_t, 32> q8_levels(ops::DType format) {
  std::array<int8_t, 32> levels{};
  for (int q = 0; q < 32; ++q)
    levels[size_t(q)] = format == ops::DType::IQ4_NL ? quant::kIq4nlValues[q % 16] : int8_t(q - q_offset(format));
  return levels;
}

}  // namespace

void pack_4bit(ops::DType format, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  switch (format) {
    case ops::DType::Q4_0: return pack_4bit_rows(format, static_cast<const quant::BlockQ4_0*>(src), rows, k, out, first_group);
    case ops::DType::Q5_0: return pack_4bit_rows(format, static_cast<const quant::BlockQ5_0*>(src), rows, k, out, first_group);
    case ops::DType::Q4_1: return pack_4bit_rows(format, static_cast<const quant::BlockQ4_1*>(src), rows, k, out, first_group);
    case ops::DType::Q5_1: return pack_4bit_rows(format, static_cast<const quant::BlockQ5_1*>(src), rows, k, out, first_group);
    case ops::DType::IQ4_NL:
      return pack_4bit_rows(format, static_cast<const quant::BlockIQ4_NL*>(src), rows, k, out, first_group);
    case ops::DType::IQ4_XS: return pack_iq4_xs_rows(static_cast<const quant::BlockIQ4_XS*>(src), rows, k, out, first_group);
    default: throw std::invalid_argument(std::string("pack_4bit: ") + ops::id_name(format) + " is not a 4-bit packed format");
  }
}

namespace {
// The super-block holding 32-block `block`, and the block's index in it.
const uint8_t* super_block(ops::DType format, const uint8_t* group, int64_t block, int64_t& b) {
  const int64_t n = packed_super_blocks(format);
  b = block % n;
  return group + block / n * n * packed_block_bytes(format);
}
}  // namespace

int packed_q(ops::DType format, const uint8_t* group, int64_t r, int64_t k) {
  const int64_t e = k % kQ8Block, j = e / 4, i = e % 4;
  int64_t b;
  const uint8_t* blk = super_block(format, group, k / kQ8Block, b);
  int q = (blk[packed_nibble_offset(format, b) + 64 * (j / 2) + 4 * r + i] >> (j % 2 ? 4 : 0)) & 0x0F;
  if (has_fifth_bits(format)) q |= ((blk[kPackedHighBitOffset + 8 * j + (4 * r + i) / 8] >> ((4 * r + i) % 8)) & 1) << 4;
  return q;
}

uint16_t packed_4bit_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block) {
  uint16_t d;
  int64_t b;
  std::memcpy(&d, super_block(format, group, block, b) + 2 * r, 2);
  return d;
}

int packed_4bit_block_scale(ops::DType format, const uint8_t* group, int64_t r, int64_t block) {
  if (format != ops::DType::IQ4_XS) return 1;
  int64_t b;
  return int8_t(super_block(format, group, block, b)[kPackedIQ4_XSScaleOffset + kPackRows * b + r]);
}

uint16_t packed_4bit_min(ops::DType format, const uint8_t* group, int64_t r, int64_t block) {
  if (!has_mins(format)) return 0;
  uint16_t m;
  std::memcpy(&m, group + (block + 1) * packed_block_bytes(format) - kPackedScaleBytes + 2 * r, 2);
  return m;
}

namespace {
void check_converts_exactly(ops::DType format) {
  if (!converts_exactly_to_q8_0(format)) {
    throw std::invalid_argument(std::string("convert_packed_to_q8_0: ") + ops::id_name(format) +
                                " has no exact Q8_0 conversion");
  }
}
// VNNI's packed Q8_0 stores the level + 128 as u8 (packed_q8_0.h).
uint8_t q8_0_flip(Isa isa) { return is_vnni_isa(isa) ? 0x80 : 0x00; }
}  // namespace

void convert_packed_to_q8_0_scalar(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
                                   uint8_t* out) {
  check_converts_exactly(format);
  const std::array<int8_t, 32> levels = q8_levels(format);
  const int offset = q_offset(format);
  const uint8_t flip = q8_0_flip(isa);
  const int64_t src_block = packed_block_bytes(format), blocks = groups * k_blocks;
  if (has_fifth_bits(format)) {
    convert_groups<true, false>(levels.data(), offset, flip, src_block, src, blocks, out);
  } else if (has_iq4_levels(format)) {
    convert_groups<false, true>(levels.data(), offset, flip, src_block, src, blocks, out);
  } else {
    convert_groups<false, false>(levels.data(), offset, flip, src_block, src, blocks, out);
  }
}

void convert_packed_to_q8_0(ops::DType format, Isa isa, const uint8_t* src, int64_t groups, int64_t k_blocks,
                            uint8_t* out) {
  check_converts_exactly(format);
  static const bool avx2 = (cpu_features() & kCpuAvx2) != 0;
  if (!avx2 || has_fifth_bits(format)) return convert_packed_to_q8_0_scalar(format, isa, src, groups, k_blocks, out);
  const std::array<int8_t, 32> levels = q8_levels(format);
  convert_nibble_groups_avx2(levels.data(), q8_0_flip(isa), packed_block_bytes(format), src, groups * k_blocks, out);
}

void convert_row_to_q8_0(ops::DType type, const void* src, BlockQ8_0* out, int64_t k) {
  if (!converts_exactly_to_q8_0(type) || k < 0 || k % kQ8Block != 0) {
    throw std::invalid_argument("convert_row_to_q8_0: a Q4_0, Q5_0 or IQ4_NL row of a multiple of 32");
  }
  for (int64_t b = 0; b < k / kQ8Block; ++b) {
    BlockQ8_0& o = out[b];
    uint8_t q[kQ8Block];
    if (type == ops::DType::IQ4_NL) {
      const auto& blk = static_cast<const quant::BlockIQ4_NL*>(src)[b];
      o.d = blk.d;
      for (int e = 0; e < 16; ++e) {
        o.qs[e] = quant::kIq4nlValues[blk.qs[e] & 0x0F];
        o.qs[e + 16] = quant::kIq4nlValues[blk.qs[e] >> 4];
      }
      continue;
    }
    if (type == ops::DType::Q4_0) {
      const auto& blk = static_cast<const quant::BlockQ4_0*>(src)[b];
      o.d = blk.d;
      block_quants(blk, q);
    } else {
      const auto& blk = static_cast<const quant::BlockQ5_0*>(src)[b];
      o.d = blk.d;
      block_quants(blk, q);
    }
    for (int e = 0; e < kQ8Block; ++e) o.qs[e] = int8_t(q[e] - q_offset(type));
  }
}

}  // namespace lumen
