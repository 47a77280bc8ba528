// The packed Q4_0 / Q5_0 / Q4_1 / Q5_1 / IQ4_NL layouts: every quant, scale
// and min round-trips through the repack, padding rows are zero, the byte
// count is GGUF's, and both conversions to Q8_0 are exact (the int8 quant is
// q - offset or IQ4_NL's level, the scale d).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "lumen/target/weight_formats.h"

namespace lumen {
namespace {

using ops::DType;

constexpr DType kFormats[] = {DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::IQ4_NL};

// ggml's quant of element e of a block (dequantize_row_q4_0/q5_0/q4_1/q5_1/
// iq4_nl), Q4_0's and Q5_0's offset included (IQ4_NL's: the level's index).
int ggml_quant(DType type, const uint8_t* block, int e) {
  const int head = type == DType::Q4_1 || type == DType::Q5_1 ? 4 : 2;
  if (type == DType::Q4_0 || type == DType::Q4_1 || type == DType::IQ4_NL) {
    const uint8_t* qs = block + head;
    return (e < 16 ? qs[e] & 0x0F : qs[e - 16] >> 4) - (type == DType::Q4_0 ? 8 : 0);
  }
  uint32_t qh;
  std::memcpy(&qh, block + head, 4);
  const uint8_t* qs = block + head + 4;
  const int j = e % 16;
  const int high = e < 16 ? int(((qh >> j) << 4) & 0x10) : int((qh >> (j + 12)) & 0x10);
  return ((e < 16 ? qs[j] & 0x0F : qs[j] >> 4) | high) - (type == DType::Q5_0 ? 16 : 0);
}

std::vector<uint8_t> random_blocks(DType type, int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t bytes = ops::row_bytes(type, k);
  std::vector<uint8_t> blocks(size_t(rows * bytes));
  for (auto& b : blocks) b = uint8_t(rng());
  for (int64_t b = 0; b < rows * k / ops::row(type).block_elems; ++b) {
    const uint16_t d = f32_to_f16(0.001f * float(1 + rng() % 50));
    std::memcpy(blocks.data() + b * ops::row(type).block_bytes, &d, 2);
    if (has_mins(type)) {
      const uint16_t m = f32_to_f16(-0.001f * float(rng() % 50));
      std::memcpy(blocks.data() + b * ops::row(type).block_bytes + 2, &m, 2);
    }
  }
  return blocks;
}

std::vector<uint8_t> pack(DType type, const std::vector<uint8_t>& blocks, int64_t rows, int64_t k) {
  std::vector<uint8_t> out(size_t(packed_bytes(type, rows, k)), 0xCC);
  pack_rows(type, Isa::Avx2, blocks.data(), rows, k, out.data(), 0);
  return out;
}

TEST(Packed4Bit, EveryQuantAndScaleRoundTripsAndPaddingIsZero) {
  for (DType type : kFormats) {
    for (auto [rows, k] : {std::pair<int64_t, int64_t>{1, 32}, {17, 352}, {33, 96}}) {
      const std::vector<uint8_t> blocks = random_blocks(type, rows, k, uint32_t(rows * k));
      const std::vector<uint8_t> packed = pack(type, blocks, rows, k);
      const int64_t k_blocks = k / 32, group_bytes = k_blocks * packed_block_bytes(type);
      EXPECT_EQ(int64_t(packed.size()), (rows + 15) / 16 * 16 * ops::row_bytes(type, k)) << "GGUF's bytes";
      for (int64_t row = 0; row < (rows + 15) / 16 * 16; ++row) {
        const uint8_t* group = packed.data() + row / 16 * group_bytes;
        for (int64_t b = 0; b < k_blocks; ++b) {
          const uint8_t* block = blocks.data() + (row * k_blocks + b) * ops::row(type).block_bytes;
          uint16_t d = 0, m = 0;
          if (row < rows) std::memcpy(&d, block, 2);
          if (row < rows && has_mins(type)) std::memcpy(&m, block + 2, 2);
          ASSERT_EQ(packed_4bit_scale(type, group, row % 16, b), d) << to_string(type) << " row " << row;
          ASSERT_EQ(packed_4bit_min(type, group, row % 16, b), m) << to_string(type) << " row " << row;
          for (int e = 0; e < 32; ++e) {
            const int want = row < rows ? ggml_quant(type, block, e) + q_offset(type) : 0;
            ASSERT_EQ(packed_q(type, group, row % 16, b * 32 + e), want)
                << to_string(type) << " row " << row << " k " << b * 32 + e;
          }
        }
      }
    }
  }
}

// IQ4_XS: per 32-block the super-block's d, ls - 32 and the nibbles
// (dequantize_row_iq4_xs's order), at 138 B per 256 weights per row.
TEST(Packed4Bit, IQ4_XSRoundTripsAndPaddingIsZero) {
  for (auto [rows, k] : {std::pair<int64_t, int64_t>{1, 256}, {17, 768}, {33, 1280}}) {
    const std::vector<uint8_t> blocks = random_blocks(DType::IQ4_XS, rows, k, uint32_t(rows + k));
    const std::vector<uint8_t> packed = pack(DType::IQ4_XS, blocks, rows, k);
    const int64_t supers = k / 256, group_bytes = supers * kPackedIQ4_XSSuperBytes;
    EXPECT_EQ(int64_t(packed.size()), (rows + 15) / 16 * 16 * supers * 138);
    for (int64_t row = 0; row < (rows + 15) / 16 * 16; ++row) {
      const uint8_t* group = packed.data() + row / 16 * group_bytes;
      for (int64_t b = 0; b < k / 32; ++b) {
        quant::BlockIQ4_XS x{};
        if (row < rows) std::memcpy(&x, blocks.data() + (row * supers + b / 8) * sizeof(x), sizeof(x));
        const int ib = int(b % 8);
        const int ls = ((x.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x.scales_h >> 2 * ib) & 3) << 4);
        ASSERT_EQ(packed_4bit_scale(DType::IQ4_XS, group, row % 16, b), row < rows ? x.d : 0) << "row " << row;
        ASSERT_EQ(packed_4bit_block_scale(DType::IQ4_XS, group, row % 16, b), row < rows ? ls - 32 : 0)
            << "row " << row << " block " << b;
        for (int e = 0; e < 32; ++e) {
          const uint8_t byte = x.qs[16 * ib + e % 16];
          const int want = row < rows ? (e < 16 ? byte & 0x0F : byte >> 4) : 0;
          ASSERT_EQ(packed_q(DType::IQ4_XS, group, row % 16, b * 32 + e), want) << "row " << row << " k " << b * 32 + e;
        }
      }
    }
  }
}

TEST(Packed4Bit, ConvertsToQ8_0Exactly) {
  for (DType type : {DType::Q4_0, DType::Q5_0, DType::IQ4_NL}) {
    const int64_t rows = 19, k = 352, k_blocks = k / 32;
    const std::vector<uint8_t> blocks = random_blocks(type, rows, k, 7);
    std::vector<BlockQ8_0> q8(size_t(rows * k_blocks));
    for (int64_t r = 0; r < rows; ++r) {
      convert_row_to_q8_0(type, blocks.data() + r * ops::row_bytes(type, k), q8.data() + r * k_blocks, k);
    }
    for (int64_t b = 0; b < rows * k_blocks; ++b) {
      const uint8_t* block = blocks.data() + b * ops::row(type).block_bytes;
      uint16_t d;
      std::memcpy(&d, block, 2);
      ASSERT_EQ(q8[size_t(b)].d, d);
      for (int e = 0; e < 32; ++e) {
        const int want = type == DType::IQ4_NL
                             ? quant::kIq4nlValues[e < 16 ? block[2 + e] & 0x0F : block[2 + e - 16] >> 4]
                             : ggml_quant(type, block, e);
        ASSERT_EQ(q8[size_t(b)].qs[e], want) << to_string(type) << " block " << b << " element " << e;
      }
    }
    // The packed layout converts to the packed Q8_0 of the same rows (the
    // padding rows have scale 0, whatever their quants).
    const std::vector<uint8_t> packed = pack(type, blocks, rows, k);
    for (Isa isa : kAllIsas) {
      std::vector<uint8_t> want(size_t(packed_bytes(isa, rows, k)));
      pack_q8_0(isa, q8.data(), rows, k, want.data(), 0);
      std::vector<uint8_t> got(want.size(), 0xCC);
      convert_packed_to_q8_0(type, isa, packed.data(), (rows + 15) / 16, k_blocks, got.data());
      for (int64_t row = 0; row < (rows + 15) / 16 * 16; ++row) {
        const uint8_t* g = got.data() + row / 16 * k_blocks * kPackedBlockBytes;
        const uint8_t* w = want.data() + row / 16 * k_blocks * kPackedBlockBytes;
        for (int64_t b = 0; b < k_blocks; ++b) {
          ASSERT_EQ(packed_scale(g, k_blocks, row % 16, b), packed_scale(w, k_blocks, row % 16, b));
          for (int64_t e = 0; e < 32 && row < rows; ++e) {
            ASSERT_EQ(packed_weight(isa, g, k_blocks, row % 16, b * 32 + e),
                      packed_weight(isa, w, k_blocks, row % 16, b * 32 + e))
                << to_string(type) << " " << to_string(isa) << " row " << row;
          }
        }
      }
    }
  }
}

// The vector conversion (on CPUs with AVX2) writes the scalar reference's
// bytes on random packed blocks (any nibble and fifth bit), odd group and
// block counts, in every ISA's packing.
TEST(Packed4Bit, ConversionMatchesTheScalarReference) {
  std::mt19937 rng(11);
  for (DType type : {DType::Q4_0, DType::Q5_0, DType::IQ4_NL}) {
    for (auto [groups, k_blocks] : {std::pair<int64_t, int64_t>{1, 1}, {3, 11}, {5, 28}}) {
      std::vector<uint8_t> src(size_t(groups * k_blocks * packed_block_bytes(type)));
      for (auto& byte : src) byte = uint8_t(rng());
      for (Isa isa : kAllIsas) {
        std::vector<uint8_t> want(size_t(groups * k_blocks * kPackedBlockBytes), 0xCC), got(want.size(), 0x33);
        convert_packed_to_q8_0_scalar(type, isa, src.data(), groups, k_blocks, want.data());
        convert_packed_to_q8_0(type, isa, src.data(), groups, k_blocks, got.data());
        ASSERT_EQ(got, want) << to_string(type) << " " << to_string(isa) << " groups " << groups << " k_blocks "
                             << k_blocks;
      }
    }
  }
}

TEST(Packed4Bit, RefusesBadShapes) {
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(pack_q4_0(nullptr, 1, 33, out.data(), 0), std::invalid_argument);
  EXPECT_THROW(pack_q5_0(nullptr, -1, 32, out.data(), 0), std::invalid_argument);
  // Every weight type has a packed format now; act_q8 (activations) is none.
  EXPECT_THROW(packed_bytes(DType::ActQ8, 16, 256), std::invalid_argument);
  EXPECT_THROW(convert_row_to_q8_0(DType::Q4_K, nullptr, nullptr, 256), std::invalid_argument);
  EXPECT_THROW(convert_row_to_q8_0(DType::Q4_1, nullptr, nullptr, 32), std::invalid_argument);
  EXPECT_THROW(convert_packed_to_q8_0(DType::Q5_1, Isa::Avx2, nullptr, 1, 1, out.data()), std::invalid_argument);
  EXPECT_THROW(convert_packed_to_q8_0_scalar(DType::IQ4_XS, Isa::Avx2, nullptr, 1, 1, out.data()),
               std::invalid_argument);
  EXPECT_THROW(pack_4bit(DType::Q8_0, nullptr, 1, 32, out.data(), 0), std::invalid_argument);
  EXPECT_THROW(pack_4bit(DType::IQ4_XS, nullptr, 1, 288, out.data(), 0), std::invalid_argument);
  EXPECT_THROW(packed_bytes(DType::IQ4_XS, 16, 288), std::invalid_argument);
}

}  // namespace
}  // namespace lumen
