// quant::dequantize_row and quant::check_row against the block formats as
// ggml defines them (ggml-common.h). Two kinds of test:
//  - hand-built blocks whose values follow from the format description
//    (chosen scales, mins and quants; powers of two, so every product is
//    exact), including the nibble order and the sign of each type;
//  - random blocks of every type against `element`, a second plain
//    transcription that computes one element from its index (where a closed
//    form for a whole block would be awkward: the k-quants' packed 6-bit
//    scales, Q3_K's hmask, Q6_K's split quants), bitwise, with ggml's order
//    of float operations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/quant/blocks.h"
#include "lumen/quant/quant.h"

namespace lumen::quant {
namespace {

using ops::DType;

constexpr uint16_t kOne = 0x3C00, kHalf = 0x3800, kQuarter = 0x3400, kMinusOne = 0xBC00;

template <class Block>
std::vector<float> dequantize(DType t, const Block& b) {
  std::vector<float> y(static_cast<size_t>(ops::row(t).block_elems));
  dequantize_row(t, &b, y.data(), static_cast<int64_t>(y.size()));
  return y;
}

// ------------------------------------------------ the second transcription

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K/Q5_K sub-block j's 6-bit scale (min if `min`): j < 4 in the low 6
// bits of byte j (min: j + 4); j >= 4 a nibble of byte j + 4 (scale low,
// min high) with 2 high bits from the top of byte j - 4 (min: byte j).
int k4_scale(const uint8_t* s, int j, bool min) {
  if (j < 4) return s[j + (min ? 4 : 0)] & 63;
  const int low = min ? s[j + 4] >> 4 : s[j + 4] & 0xF;
  return low | ((s[min ? j : j - 4] >> 6) << 4);
}

// The 2-bit field of element e (0..255) of a k-quant with 2-bit quants
// packed as Q2_K/Q3_K do: byte 32 * (e / 128) + e % 32, shift 2 * (e % 128 / 32).
int two_bits(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }

// Element e of one block of type t at `b`.
float element(DType t, const uint8_t* b, int e) {
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, b + 4 * e, 4);
      return f;
    }
    case DType::F16: return f16_to_f32(u16_at(b + 2 * e));
    case DType::BF16: {
      const uint32_t bits = uint32_t(u16_at(b + 2 * e)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::Q8_0: return float(int8_t(b[2 + e])) * f16_to_f32(u16_at(b));
    case DType::Q4_0: {
      const int q = e < 16 ? b[2 + e] & 0xF : b[2 + e - 16] >> 4;
      return float(q - 8) * f16_to_f32(u16_at(b));
    }
    case DType::Q4_1: {
      const int q = e < 16 ? b[4 + e] & 0xF : b[4 + e - 16] >> 4;
      return float(q) * f16_to_f32(u16_at(b)) + f16_to_f32(u16_at(b + 2));
    }
    case DType::Q5_0: {
      const int q = (e < 16 ? b[6 + e] & 0xF : b[6 + e - 16] >> 4) | (((b[2 + e / 8] >> (e % 8)) & 1) << 4);
      return float(q - 16) * f16_to_f32(u16_at(b));
    }
    case DType::Q5_1: {
      const int q = (e < 16 ? b[8 + e] & 0xF : b[8 + e - 16] >> 4) | (((b[4 + e / 8] >> (e % 8)) & 1) << 4);
      return float(q) * f16_to_f32(u16_at(b)) + f16_to_f32(u16_at(b + 2));
    }
    case DType::Q2_K: {
      const uint8_t sc = b[e / 16];
      const float d = f16_to_f32(u16_at(b + 80)), dmin = f16_to_f32(u16_at(b + 82));
      return d * float(sc & 0xF) * float(two_bits(b + 16, e)) - dmin * float(sc >> 4);
    }
    case DType::Q3_K: {
      const uint8_t* s = b + 96;
      const int j = e / 16;
      const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
      const int scale = (low | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const bool high = (b[e % 32] >> (e / 32)) & 1;
      return f16_to_f32(u16_at(b + 108)) * float(scale) * float(two_bits(b + 32, e) - (high ? 0 : 4));
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const int j = e / 32;  // sub-block; chunk e / 64 holds sub-blocks 2c (low nibbles), 2c + 1 (high)
      const uint8_t* qs = b + (t == DType::Q4_K ? 16 : 48);
      const uint8_t byte = qs[32 * (e / 64) + e % 32];
      int q = j % 2 == 0 ? byte & 0xF : byte >> 4;
      if (t == DType::Q5_K) q += ((b[16 + e % 32] >> j) & 1) * 16;
      const float d = f16_to_f32(u16_at(b)), dmin = f16_to_f32(u16_at(b + 2));
      return d * float(k4_scale(b + 4, j, false)) * float(q) - dmin * float(k4_scale(b + 4, j, true));
    }
    case DType::Q6_K: {
      // Half h = e / 128; within it quarter c = e % 128 / 32, l = e % 32:
      // low 4 bits from ql[64h + l + 32 (c odd)], low (c < 2) or high nibble;
      // 2 high bits from qh[32h + l] at bits 2c.
      const int h = e / 128, c = e % 128 / 32, l = e % 32;
      const uint8_t lo = b[64 * h + l + (c % 2) * 32];
      const int q = ((c < 2 ? lo & 0xF : lo >> 4) | (((b[128 + 32 * h + l] >> (2 * c)) & 3) << 4)) - 32;
      return f16_to_f32(u16_at(b + 208)) * float(int8_t(b[192 + e / 16])) * float(q);
    }
    case DType::IQ4_NL: {
      const int q = e < 16 ? b[2 + e] & 0xF : b[2 + e - 16] >> 4;
      return f16_to_f32(u16_at(b)) * float(kIq4nlValues[q]);
    }
    case DType::IQ4_XS: {
      const int ib = e / 32, j = e % 32;
      const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((u16_at(b + 2) >> (2 * ib)) & 3) << 4);
      const uint8_t byte = b[8 + 16 * ib + j % 16];
      return f16_to_f32(u16_at(b)) * float(ls - 32) * float(kIq4nlValues[j < 16 ? byte & 0xF : byte >> 4]);
    }
    case DType::ActQ8:
    case DType::Any:
    case DType::I32: break;
  }
  ADD_FAILURE() << "not a weight type";
  return 0;
}

// Where the fp16 scales of a block are (byte offsets), for random blocks
// (kept finite) and for check_row.
std::vector<int> scale_offsets(DType t) {
  switch (t) {
    case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: case DType::IQ4_NL: case DType::IQ4_XS: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

std::vector<DType> weight_types() {
  std::vector<DType> types;
  for (const ops::DTypeRow& r : ops::kDTypes)
    if (r.weight) types.push_back(r.id);
  return types;
}

TEST(Dequantize, RandomBlocksOfEveryTypeMatchTheElementwiseTranscription) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
  for (DType t : weight_types()) {
    SCOPED_TRACE(ops::to_string(t));
    const ops::DTypeRow& r = ops::row(t);
    // Three blocks, or 96 elements of a scalar type.
    const int blocks = r.block_elems == 1 ? 96 : 3;
    std::vector<uint8_t> row(static_cast<size_t>(blocks * r.block_bytes));
    for (uint8_t& v : row) v = static_cast<uint8_t>(byte(rng));
    for (int b = 0; b < blocks; ++b)
      for (int at : scale_offsets(t)) {
        const uint16_t h = f32_to_f16(scale(rng));
        std::memcpy(row.data() + b * r.block_bytes + at, &h, 2);
      }
    if (t == DType::F32)  // finite floats
      for (int i = 0; i < blocks; ++i) {
        const float f = scale(rng);
        std::memcpy(row.data() + 4 * i, &f, 4);
      }
    const int64_t n = int64_t(blocks) * r.block_elems;
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, row.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = r.block_elems == 1 ? 0 : i / r.block_elems;
      const int e = static_cast<int>(r.block_elems == 1 ? i : i % r.block_elems);
      const float want = element(t, row.data() + b * r.block_bytes, e);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[size_t(i)])) << i;
        continue;
      }
      ASSERT_EQ(y[size_t(i)], want) << "element " << i;
    }
  }
}

// ----------------------------------------------------- hand-built blocks

TEST(Dequantize, HalfAndBrainFloatWidening) {
  const uint16_t f16[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000, 0x7C00};
  float y[6];
  dequantize_row(DType::F16, f16, y, 6);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_EQ(y[3], std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_TRUE(y[4] == 0.0f && std::signbit(y[4]));
  EXPECT_EQ(y[5], INFINITY);
  const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049, 0x0000};
  dequantize_row(DType::BF16, bf16, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);  // the top 16 bits of pi's float
  EXPECT_EQ(y[3], 0.0f);
  const float f32[] = {1.5f, -0.25f};
  dequantize_row(DType::F32, f32, y, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -0.25f);
}

TEST(Dequantize, Q8_0IsTheSignedQuantTimesTheScale) {
  BlockQ8_0 b{kHalf, {}};
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const std::vector<float> y = dequantize(DType::Q8_0, b);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[size_t(j)], float(j * 8 - 128) * 0.5f) << j;
}

// Low nibbles are elements 0-15, high nibbles 16-31; quants are offset by 8.
TEST(Dequantize, Q4_0NibbleOrderAndOffset) {
  BlockQ4_0 b{kQuarter, {}};
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequantize(DType::Q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], float(j - 8) * 0.25f) << j;
    EXPECT_EQ(y[size_t(j + 16)], float(7 - j) * 0.25f) << j;
  }
  EXPECT_EQ(y[0], -2.0f);  // quant 0 is the most negative
}

TEST(Dequantize, Q4_1AddsTheMin) {
  BlockQ4_1 b{kHalf, kMinusOne, {}};
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequantize(DType::Q4_1, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], float(j) * 0.5f - 1.0f) << j;
    EXPECT_EQ(y[size_t(j + 16)], float(15 - j) * 0.5f - 1.0f) << j;
  }
}

// The fifth bit of element e is bit e of qh (a little-endian u32).
TEST(Dequantize, Q5_0And5_1HighBitOrder) {
  BlockQ5_0 b{kOne, {}, {}};
  const uint32_t qh = 0x80000001u | (1u << 16);  // elements 0, 16 and 31
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = 0x33;  // low 4 bits 3 everywhere
  std::vector<float> y = dequantize(DType::Q5_0, b);
  for (int e = 0; e < 32; ++e) {
    const bool high = e == 0 || e == 16 || e == 31;
    EXPECT_EQ(y[size_t(e)], float((high ? 19 : 3) - 16)) << e;
  }
  BlockQ5_1 c{kHalf, kOne, {}, {}};
  std::memcpy(c.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) c.qs[j] = 0xF0;  // low nibbles 0, high nibbles 15
  y = dequantize(DType::Q5_1, c);
  EXPECT_EQ(y[0], 16 * 0.5f + 1);
  EXPECT_EQ(y[1], 0 * 0.5f + 1);
  EXPECT_EQ(y[16], 31 * 0.5f + 1);
  EXPECT_EQ(y[17], 15 * 0.5f + 1);
  EXPECT_EQ(y[31], 31 * 0.5f + 1);
}

// Every sub-block j (32 elements) of a Q4_K block with scale 33 + 3j and min
// 40 - j (6-bit values that need the packed high bits for j >= 4), quants q(e) = e % 16.
TEST(Dequantize, Q4_KWithEveryScaleAndMinChosen) {
  BlockQ4_K b{kHalf, kQuarter, {}, {}};
  auto scale = [](int j) { return 33 + 3 * j; };
  auto min = [](int j) { return 40 - j; };
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      b.scales[j] = static_cast<uint8_t>(scale(j));
      b.scales[j + 4] = static_cast<uint8_t>(min(j));
    } else {
      b.scales[j + 4] = static_cast<uint8_t>((scale(j) & 0xF) | ((min(j) & 0xF) << 4));
      b.scales[j - 4] |= static_cast<uint8_t>((scale(j) >> 4) << 6);
      b.scales[j] |= static_cast<uint8_t>((min(j) >> 4) << 6);
    }
  }
  // Chunk c of 64 elements: sub-block 2c in the low nibbles of qs[32c..32c+32), 2c + 1 in the high ones.
  for (int e = 0; e < 256; ++e) {
    uint8_t& byte = b.qs[32 * (e / 64) + e % 32];
    byte |= static_cast<uint8_t>((e / 32) % 2 == 0 ? e % 16 : (e % 16) << 4);
  }
  const std::vector<float> y = dequantize(DType::Q4_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[size_t(e)], 0.5f * float(scale(j) * (e % 16)) - 0.25f * float(min(j))) << e;
  }
}

// Q5_K: Q4_K's scales plus a fifth bit: element e of sub-block j has it at bit j of qh[e % 32].
TEST(Dequantize, Q5_KHighBits) {
  BlockQ5_K b{kOne, 0, {}, {}, {}};
  for (int j = 0; j < 4; ++j) b.scales[j] = 1;  // sub-blocks 0-3 scale 1, 4-7 scale 0
  b.qh[5] = 0x05;  // sub-blocks 0 and 2 of element 5
  const std::vector<float> y = dequantize(DType::Q5_K, b);
  for (int e = 0; e < 128; ++e) EXPECT_EQ(y[size_t(e)], (e == 5 || e == 69) ? 16.0f : 0.0f) << e;
  for (int e = 128; e < 256; ++e) EXPECT_EQ(y[size_t(e)], 0.0f) << e;
}

// Q3_K: 2 low bits as Q2_K packs them, minus 4 unless the hmask bit
// (bit e / 32 of hmask[e % 32]) is set; scales 6-bit, stored + 32.
TEST(Dequantize, Q3_KSignFromTheMask) {
  BlockQ3_K b{};
  b.d = kHalf;
  // Every scale 34 (stored): low nibble 2 in bytes 0-7 (both nibbles), high bits 2 (0b10) in bytes 8-11.
  for (int i = 0; i < 8; ++i) b.scales[i] = 0x22;
  for (int i = 8; i < 12; ++i) b.scales[i] = 0xAA;
  // qs all 0xFF: low bits 3 everywhere; hmask: only element 0 (bit 0 of byte 0) and element 33 (bit 1 of byte 1).
  std::memset(b.qs, 0xFF, sizeof b.qs);
  b.hmask[0] = 0x01;
  b.hmask[1] = 0x02;
  const std::vector<float> y = dequantize(DType::Q3_K, b);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[size_t(e)], 0.5f * 2 * ((e == 0 || e == 33) ? 3 : -1)) << e;
}

// Q2_K: scale byte = 4-bit scale | 4-bit min << 4 per 16 elements.
TEST(Dequantize, Q2_KScaleAndMinNibbles) {
  BlockQ2_K b{};
  b.d = kOne;
  b.dmin = kHalf;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>((j % 15 + 1) | ((15 - j) << 4));
  for (int e = 0; e < 256; ++e) b.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>((e % 4) << (2 * (e % 128 / 32)));
  const std::vector<float> y = dequantize(DType::Q2_K, b);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 16;
    EXPECT_EQ(y[size_t(e)], float((j % 15 + 1) * (e % 4)) - 0.5f * float(15 - j)) << e;
  }
}

// Q6_K: signed 6-bit quants (stored + 32), signed 8-bit scales per 16.
TEST(Dequantize, Q6_KSignedQuantsAndScales) {
  BlockQ6_K b{};
  b.d = kQuarter;
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j % 2 == 0 ? 4 : -4);
  // Every quant 0 (stored 32: low 4 bits 0, high bits 2): qh bytes 0b10101010.
  std::memset(b.qh, 0xAA, sizeof b.qh);
  // Element 0 stored 63 (quant 31): low nibble of ql[0] 15, its qh bits (0-1 of qh[0]) 3.
  b.ql[0] = 0x0F;
  b.qh[0] = 0xAB;
  // Element 255 (half 1, quarter 3, l 31) stored 0 (quant -32): high nibble of ql[64 + 63] 0, bits 6-7 of qh[63] 0.
  b.qh[63] = 0x2A;
  const std::vector<float> y = dequantize(DType::Q6_K, b);
  EXPECT_EQ(y[0], 0.25f * 4 * 31);
  EXPECT_EQ(y[255], 0.25f * -4 * -32);
  for (int e = 1; e < 255; ++e) EXPECT_EQ(y[size_t(e)], 0.0f) << e;
}

TEST(Dequantize, Iq4NlAndXsNonLinearLevels) {
  BlockIQ4_NL b{kOne, {}};
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> y = dequantize(DType::IQ4_NL, b);
  const float levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], levels[j]) << j;
    EXPECT_EQ(y[size_t(j + 16)], levels[15 - j]) << j;
  }
  // IQ4_XS: sub-block ib's scale = (4 bits of scales_l[ib / 2] | 2 bits of scales_h << 4) - 32.
  BlockIQ4_XS x{};
  x.d = kHalf;
  x.scales_h = 0xAAAA;  // high bits 2 for every sub-block: stored 32 + low
  for (int i = 0; i < 4; ++i) x.scales_l[i] = static_cast<uint8_t>((2 * i + 1) | ((2 * i + 2) << 4));
  std::memset(x.qs, 0x88, sizeof x.qs);  // level 1 everywhere
  y = dequantize(DType::IQ4_XS, x);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[size_t(e)], 0.5f * float(e / 32 + 1)) << e;
}

// ------------------------------------------------------------- check_row

TEST(CheckRow, NanOrInfiniteScaleIsReportedWithItsBlock) {
  for (DType t : weight_types()) {
    SCOPED_TRACE(ops::to_string(t));
    const ops::DTypeRow& r = ops::row(t);
    const int blocks = r.block_elems == 1 ? 64 : 4;
    std::vector<uint8_t> row(static_cast<size_t>(blocks * r.block_bytes), 0);
    const int64_t n = int64_t(blocks) * r.block_elems;
    EXPECT_EQ(check_row(t, row.data(), n), std::nullopt);
    const std::vector<int> scales = scale_offsets(t);
    if (scales.empty()) continue;  // F32, F16, BF16 have no scales
    const char* names[2] = {"d", t == DType::Q4_1 || t == DType::Q5_1 ? "m" : "dmin"};
    for (size_t s = 0; s < scales.size(); ++s)
      for (const auto& [bits, what] : std::vector<std::pair<uint16_t, std::string>>{
               {0x7C00, "infinite"}, {0xFC00, "infinite"}, {0x7E00, "NaN"}, {0xFC01, "NaN"}}) {
        std::vector<uint8_t> bad = row;
        std::memcpy(bad.data() + 2 * r.block_bytes + scales[s], &bits, 2);
        EXPECT_EQ(check_row(t, bad.data(), n), "block 2: scale " + std::string(names[s]) + " is " + what);
      }
    // The largest finite fp16 scale is fine.
    std::vector<uint8_t> big = row;
    const uint16_t max = 0x7BFF;
    std::memcpy(big.data() + scales[0], &max, 2);
    EXPECT_EQ(check_row(t, big.data(), n), std::nullopt);
  }
}

}  // namespace
}  // namespace lumen::quant
