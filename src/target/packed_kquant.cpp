// Load-time repack of Q2_K, Q3_K, Q4_K, Q5_K and Q6_K rows into the 16-row groups the k-quant
// kernels stream (layouts in include/lumen/target/packed_kquant.h): the 6-bit
// scales (and mins) of Q3_K and Q4_K are expanded to one byte each (+4 bytes per 256
// weights per row), the quants regrouped so that one 64-byte load gives 8
// (Q3_K: 16 or 32) consecutive k of 16 rows.
#include "lumen/target/packed_kquant.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "lumen/common/numeric.h"
#include "lumen/quant/blocks.h"
#include "lumen/target/isa.h"
#include "lumen/target/packed_4bit.h"

namespace lumen {
namespace {

using ops::DType;
constexpr int64_t kRows = 16;

void check_type(DType t, const char* who) {
  if (!has_packed_kquant(t)) {
    throw std::invalid_argument(std::string(who) + ": no packed k-quant layout for " + ops::row(t).name);
  }
}

// ggml's get_scale_min_k4: the 6-bit scale and min of 32-block j of a Q4_K block.
void q4k_scale_min(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The 256 q (0..15) of a Q4_K block: 32-block j is the low (j even) or high
// (j odd) nibbles of qs[32 (j/2) ..].
void q4k_values(const quant::BlockQ4_K& b, uint8_t* q) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      q[64 * p + l] = b.qs[32 * p + l] & 0xF;
      q[64 * p + 32 + l] = b.qs[32 * p + l] >> 4;
    }
  }
}

// The 256 q (0..63) of a Q6_K block, in the order of ggml's dequantize_row_q6_K.
void q6k_values(const quant::BlockQ6_K& b, uint8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    uint8_t* y = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      y[l] = uint8_t((ql[l] & 0xF) | ((qh[l] & 3) << 4));
      y[l + 32] = uint8_t((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      y[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      y[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

// The 256 q (0..7, value q - 4) and 16 scales (sc6 - 32) of a Q3_K block, in
// the order of ggml's dequantize_row_q3_K.
void q3k_values(const quant::BlockQ3_K& b, uint8_t* q, int8_t* scales) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
    const int high = (b.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = int8_t((low | (high << 4)) - 32);
  }
  for (int half = 0; half < 2; ++half) {
    for (int shift = 0; shift < 4; ++shift) {
      for (int l = 0; l < 32; ++l) {
        const int k = 128 * half + 32 * shift + l;
        const int hbit = (b.hmask[l] >> (4 * half + shift)) & 1;
        q[k] = uint8_t(((b.qs[32 * half + l] >> (2 * shift)) & 3) | (hbit << 2));
      }
    }
  }
}

// Writes 2-bit fields of the 32 q of 32-block j of row r (q: the block's 256
// values; `shift` picks the field) as two vectors u: byte i of row r's dword
// holds those of k = 32j + 16u + 4p + i at bits 2p (Q6_K's high bits, Q3_K's low ones, Q2_K's q).
void put_two_bit_vectors(const uint8_t* q, int j, int64_t r, int shift, uint8_t* vectors) {
  for (int u = 0; u < 2; ++u) {
    for (int i = 0; i < 4; ++i) {
      uint8_t byte = 0;
      for (int p = 0; p < 4; ++p) byte |= uint8_t(((q[32 * j + 16 * u + 4 * p + i] >> shift) & 3) << (2 * p));
      vectors[64 * u + 4 * r + i] = byte;
    }
  }
}

// Writes the 4 quant vectors of 32-block j of row r (q: the block's 256
// values): byte i of row r's dword of vector v holds q[8v + i] (low nibble)
// and q[8v + 4 + i] (high nibble), over the low 4 bits of q.
void put_quant_vectors(const uint8_t* q, int j, int64_t r, uint8_t* vectors) {
  for (int v = 0; v < 4; ++v) {
    for (int i = 0; i < 4; ++i) {
      const int k0 = 32 * j + 8 * v + i;
      vectors[64 * v + 4 * r + i] = uint8_t((q[k0] & 0xF) | ((q[k0 + 4] & 0xF) << 4));
    }
  }
}

// The 256 q (0..31) of a Q5_K block: Q4_K's nibbles plus bit j of qh[l] as bit 4.
void q5k_values(const quant::BlockQ5_K& b, uint8_t* q) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      q[64 * p + l] = uint8_t((b.qs[32 * p + l] & 0xF) | (((b.qh[l] >> (2 * p)) & 1) << 4));
      q[64 * p + 32 + l] = uint8_t((b.qs[32 * p + l] >> 4) | (((b.qh[l] >> (2 * p + 1)) & 1) << 4));
    }
  }
}

// Q4_K and Q5_K (Block: BlockQ4_K or BlockQ5_K; sub: the sub-block bytes).
template <class Block>
void pack_group_min_type(const Block* rows, int64_t n_rows, int64_t supers, int64_t sub_bytes, uint8_t* g) {
  const int64_t super_bytes = kQ4KHeaderBytes + kKQuantSubBlocks * sub_bytes;
  std::memset(g, 0, supers * super_bytes);
  uint8_t q[kKQuantSuperK];
  for (int64_t sb = 0; sb < supers; ++sb) {
    uint8_t* s = g + sb * super_bytes;
    for (int64_t r = 0; r < n_rows; ++r) {
      const Block& b = rows[r * supers + sb];
      if constexpr (std::is_same_v<Block, quant::BlockQ4_K>) {
        q4k_values(b, q);
      } else {
        q5k_values(b, q);
      }
      std::memcpy(s + 2 * r, &b.d, 2);
      std::memcpy(s + 32 + 2 * r, &b.dmin, 2);
      for (int j = 0; j < kKQuantSubBlocks; ++j) {
        uint8_t* sub = s + kQ4KHeaderBytes + j * sub_bytes;
        int sc, m;
        q4k_scale_min(b.scales, j, &sc, &m);
        sub[r] = uint8_t(sc);
        sub[16 + r] = uint8_t(m);
        put_quant_vectors(q, j, r, sub + 32);
        if constexpr (std::is_same_v<Block, quant::BlockQ5_K>) {
          for (int i = 0; i < 4; ++i) {
            uint8_t byte = 0;
            for (int v = 0; v < 4; ++v) {
              byte |= uint8_t((q[32 * j + 8 * v + i] >> 4) << (2 * v));
              byte |= uint8_t((q[32 * j + 8 * v + 4 + i] >> 4) << (2 * v + 1));
            }
            sub[kKQuantHighBits + 4 * r + i] = byte;
          }
        }
      }
    }
  }
}

// The 256 q (0..3) of a Q2_K block, in the order of ggml's dequantize_row_q2_K.
void q2k_values(const quant::BlockQ2_K& b, uint8_t* q) {
  for (int half = 0; half < 2; ++half)
    for (int shift = 0; shift < 4; ++shift)
      for (int l = 0; l < 32; ++l) q[128 * half + 32 * shift + l] = uint8_t((b.qs[32 * half + l] >> (2 * shift)) & 3);
}

// Packs the 16-row group at g (n_rows rows of `supers` GGUF blocks, the
// group's super-blocks of super_bytes each): fill(block, super-block bytes, r)
// writes row r of one super-block.
template <class Block, class Fill>
void pack_group(const Block* rows, int64_t n_rows, int64_t supers, int64_t super_bytes, uint8_t* g, Fill fill) {
  std::memset(g, 0, supers * super_bytes);
  for (int64_t sb = 0; sb < supers; ++sb)
    for (int64_t r = 0; r < n_rows; ++r) fill(rows[r * supers + sb], g + sb * super_bytes, r);
}

void pack_group_q6k(const quant::BlockQ6_K* rows, int64_t n_rows, int64_t supers, uint8_t* g) {
  pack_group(rows, n_rows, supers, kQ6KHeaderBytes + kKQuantSubBlocks * kQ6KSubBytes, g,
             [](const quant::BlockQ6_K& b, uint8_t* s, int64_t r) {
               uint8_t q[kKQuantSuperK];
               q6k_values(b, q);
               std::memcpy(s + 2 * r, &b.d, 2);
               for (int j = 0; j < kKQuantSubBlocks; ++j) {
                 uint8_t* sub = s + kQ6KHeaderBytes + j * kQ6KSubBytes;
                 sub[r] = uint8_t(b.scales[2 * j]);
                 sub[16 + r] = uint8_t(b.scales[2 * j + 1]);
                 put_quant_vectors(q, j, r, sub + 32);
                 put_two_bit_vectors(q, j, r, 4, sub + kKQuantHighBits);
               }
             });
}

void pack_group_q2k(const quant::BlockQ2_K* rows, int64_t n_rows, int64_t supers, uint8_t* g) {
  pack_group(rows, n_rows, supers, kQ4KHeaderBytes + kKQuantSubBlocks * kQ2KSubBytes, g,
             [](const quant::BlockQ2_K& b, uint8_t* s, int64_t r) {
               uint8_t q[kKQuantSuperK];
               q2k_values(b, q);
               std::memcpy(s + 2 * r, &b.d, 2);
               std::memcpy(s + 32 + 2 * r, &b.dmin, 2);
               for (int j = 0; j < kKQuantSubBlocks; ++j) {
                 uint8_t* sub = s + kQ4KHeaderBytes + j * kQ2KSubBytes;
                 sub[r] = b.scales[2 * j];
                 sub[16 + r] = b.scales[2 * j + 1];
                 put_two_bit_vectors(q, j, r, 0, sub + kKQuantTwoBits);
               }
             });
}

void pack_group_q3k(const quant::BlockQ3_K* rows, int64_t n_rows, int64_t supers, uint8_t* g) {
  pack_group(rows, n_rows, supers, kQ6KHeaderBytes + kKQuantSubBlocks * kQ3KSubBytes, g,
             [](const quant::BlockQ3_K& b, uint8_t* s, int64_t r) {
               uint8_t q[kKQuantSuperK];
               int8_t scales[16];
               q3k_values(b, q, scales);
               std::memcpy(s + 2 * r, &b.d, 2);
               for (int j = 0; j < kKQuantSubBlocks; ++j) {
                 uint8_t* sub = s + kQ6KHeaderBytes + j * kQ3KSubBytes;
                 sub[r] = uint8_t(scales[2 * j]);
                 sub[16 + r] = uint8_t(scales[2 * j + 1]);
                 put_two_bit_vectors(q, j, r, 0, sub + kKQuantTwoBits);
                 for (int i = 0; i < 4; ++i) {
                   uint8_t byte = 0;
                   for (int e = 0; e < 8; ++e) byte |= uint8_t(((q[32 * j + 4 * e + i] >> 2) & 1) << e);
                   sub[kQ3KThirdBits + 4 * r + i] = byte;
                 }
               }
             });
}

// The 16 fp16 values at h (a group's d, dmin or m, row r at 2r) as fp32,
// exactly: vcvtph2ps where the CPU has F16C (every CPU the kernels run on),
// since a call per value cost most of a Q4_1 expansion.
__attribute__((target("avx,f16c"))) void widen16_f16c(const uint8_t* h, float* out) {
  _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h))));
  _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 16))));
}
void widen16(const uint8_t* h, float* out) {
  static const bool f16c = (cpu_features() & kCpuF16c) != 0;
  if (f16c) return widen16_f16c(h, out);
  for (int r = 0; r < kRows; ++r) {
    uint16_t v;
    std::memcpy(&v, h + 2 * r, 2);
    out[r] = f16_to_f32(v);
  }
}

// The expanded q of 4 quant vectors (k0 .. k0 + 31 of 16 rows): vector 2v is
// the low nibbles of packed vector v, 2v + 1 its high ones.
void expand_nibbles(const uint8_t* vectors, uint8_t* e) {
  for (int v = 0; v < 4; ++v) {
    for (int x = 0; x < 64; ++x) {
      const uint8_t p = vectors[64 * v + x];
      e[64 * (2 * v) + x] = p & 0xF;
      e[64 * (2 * v + 1) + x] = p >> 4;
    }
  }
}

// Q4_1 and Q5_1 (packed_4bit.h): `blocks` consecutive packed 32-blocks (of
// any groups; each block stands alone) to expanded ones. The factors are the
// GEMV's (matmul_generator.cpp): float(d), and float(m) * (-1/128) for
// fma(., float(ActBlock::sum) * dx, acc).
void expand_q4_1_q5_1(DType t, const uint8_t* src, int64_t blocks, uint8_t* dst) {
  const int64_t block_bytes = t == DType::Q4_1 ? kPackedQ4_1BlockBytes : kPackedQ5_1BlockBytes;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = src + b * block_bytes;
    uint8_t* e = dst + b * expanded_kquant_block_bytes(t);
    expand_nibbles(p + kPackedNibbleOffset, e);
    if (t == DType::Q5_1) {  // vector e is 4-k step e: bit 4r + i of its qword is byte 4r + i's fifth bit
      for (int v = 0; v < 8; ++v) {
        for (int x = 0; x < 64; x += 8) {
          // The 8 bits of one mask byte to 16 or 0 in 8 bytes (a bit loop cost a quarter of Q5_1's GEMM).
          uint64_t bits = uint64_t(p[kPackedHighBitOffset + 8 * v + x / 8]) * 0x0101010101010101ull;
          bits &= 0x8040201008040201ull;                                           // byte i keeps bit i
          bits = ((bits + 0x7F7F7F7F7F7F7F7Full) >> 7 & 0x0101010101010101ull) << 4;  // no carry leaves a byte
          uint64_t q;
          std::memcpy(&q, e + 64 * v + x, 8);
          q |= bits;
          std::memcpy(e + 64 * v + x, &q, 8);
        }
      }
    }
    float f[2][kRows];
    widen16(p, f[0]);
    widen16(p + block_bytes - kPackedScaleBytes, f[1]);
    for (float& m : f[1]) m *= -1.0f / 128.0f;
    std::memcpy(e + kExpandedKQuantFactors, f, sizeof(f));
  }
}

const uint8_t* super_block(const uint8_t* group, DType t, int64_t sb) {
  return group + sb * packed_kquant_super_bytes(t);
}

}  // namespace

bool has_packed_kquant(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

bool has_expanded_kquant(DType t) { return has_packed_kquant(t) || t == DType::Q4_1 || t == DType::Q5_1; }

int64_t packed_kquant_header_bytes(DType t) {
  check_type(t, "packed_kquant_header_bytes");
  return has_q6k_form(t) ? kQ6KHeaderBytes : kQ4KHeaderBytes;
}

int64_t packed_kquant_sub_bytes(DType t) {
  check_type(t, "packed_kquant_sub_bytes");
  switch (t) {
    case DType::Q2_K: return kQ2KSubBytes;
    case DType::Q3_K: return kQ3KSubBytes;
    case DType::Q4_K: return kQ4KSubBytes;
    case DType::Q5_K: return kQ5KSubBytes;
    default: return kQ6KSubBytes;
  }
}

int64_t packed_kquant_super_bytes(DType t) {
  return packed_kquant_header_bytes(t) + kKQuantSubBlocks * packed_kquant_sub_bytes(t);
}

int64_t packed_kquant_bytes(DType t, int64_t rows, int64_t k) {
  check_type(t, "packed_kquant_bytes");
  if (rows < 0 || k <= 0 || k % kKQuantSuperK != 0) {
    throw std::invalid_argument(std::string("packed_kquant_bytes: ") + ops::row(t).name +
                                " rows need k a positive multiple of 256, got k = " + std::to_string(k));
  }
  return (rows + kRows - 1) / kRows * (k / kKQuantSuperK) * packed_kquant_super_bytes(t);
}

void pack_kquant(DType t, const void* src, int64_t rows, int64_t k, uint8_t* out, int64_t first_group) {
  packed_kquant_bytes(t, rows, k);  // checks t, rows and k
  if (first_group < 0) throw std::invalid_argument("pack_kquant: first_group must be >= 0");
  const int64_t supers = k / kKQuantSuperK, group_bytes = supers * packed_kquant_super_bytes(t);
  for (int64_t g = 0; g * kRows < rows; ++g) {
    const int64_t n = std::min(kRows, rows - g * kRows);
    uint8_t* dst = out + (first_group + g) * group_bytes;
    if (t == DType::Q4_K) {
      pack_group_min_type(static_cast<const quant::BlockQ4_K*>(src) + g * kRows * supers, n, supers,
                          kQ4KSubBytes, dst);
    } else if (t == DType::Q5_K) {
      pack_group_min_type(static_cast<const quant::BlockQ5_K*>(src) + g * kRows * supers, n, supers,
                          kQ5KSubBytes, dst);
    } else if (t == DType::Q6_K) {
      pack_group_q6k(static_cast<const quant::BlockQ6_K*>(src) + g * kRows * supers, n, supers, dst);
    } else if (t == DType::Q3_K) {
      pack_group_q3k(static_cast<const quant::BlockQ3_K*>(src) + g * kRows * supers, n, supers, dst);
    } else {
      pack_group_q2k(static_cast<const quant::BlockQ2_K*>(src) + g * kRows * supers, n, supers, dst);
    }
  }
}

void expand_kquant(DType t, const uint8_t* src, int64_t groups, int64_t k_blocks, uint8_t* dst) {
  if (!has_expanded_kquant(t))
    throw std::invalid_argument(std::string("expand_kquant: no expanded layout for ") + ops::row(t).name);
  if (k_blocks <= 0 || (has_packed_kquant(t) && k_blocks % kKQuantSubBlocks != 0))
    throw std::invalid_argument(std::string("expand_kquant: ") + ops::row(t).name + " needs k_blocks " +
                                (has_packed_kquant(t) ? "a positive multiple of 8" : "positive"));
  if (!has_packed_kquant(t)) return expand_q4_1_q5_1(t, src, groups * k_blocks, dst);
  const int64_t supers = k_blocks / kKQuantSubBlocks, super_bytes = packed_kquant_super_bytes(t);
  const int64_t header = packed_kquant_header_bytes(t), sub_bytes = packed_kquant_sub_bytes(t);
  const int64_t block_bytes = expanded_kquant_block_bytes(t);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* s = src + (g * supers + sb) * super_bytes;
      float d[kRows], dmin[kRows];
      widen16(s, d);
      if (!has_q6k_form(t)) widen16(s + 32, dmin);
      for (int j = 0; j < kKQuantSubBlocks; ++j) {
        const uint8_t* sub = s + header + j * sub_bytes;
        uint8_t* e = dst + ((g * supers + sb) * kKQuantSubBlocks + j) * block_bytes;
        if (t == DType::Q2_K || t == DType::Q3_K) {  // Q3_K: q + 28, since Q6_K's q - 32 is Q3_K's q - 4
          for (int v = 0; v < 8; ++v) {
            for (int x = 0; x < 64; ++x) {
              const int q = (sub[kKQuantTwoBits + 64 * (v / 4) + x] >> (2 * (v % 4))) & 3;
              e[64 * v + x] = uint8_t(t == DType::Q2_K ? q : (q | (((sub[kQ3KThirdBits + x] >> v) & 1) << 2)) + 28);
            }
          }
        } else {
          expand_nibbles(sub + 32, e);
        }
        if (t == DType::Q5_K) {  // fifth bit of vector e at bit e
          for (int v = 0; v < 8; ++v)
            for (int x = 0; x < 64; ++x) e[64 * v + x] |= uint8_t(((sub[kKQuantHighBits + x] >> v) & 1) << 4);
        } else if (t == DType::Q6_K) {  // high bits of vector e: vector e / 4, bits 2 (e % 4)
          for (int v = 0; v < 8; ++v)
            for (int x = 0; x < 64; ++x)
              e[64 * v + x] |= uint8_t(((sub[kKQuantHighBits + 64 * (v / 4) + x] >> (2 * (v % 4))) & 3) << 4);
        }
        if (t == DType::Q2_K) {
          float f[4][kRows];
          for (int r = 0; r < kRows; ++r) {
            for (int s = 0; s < 2; ++s) {
              f[s][r] = d[r] * float(sub[16 * s + r] & 0xF);
              f[2 + s][r] = dmin[r] * float(sub[16 * s + r] >> 4);
            }
          }
          std::memcpy(e + kExpandedKQuantFactors, f, sizeof(f));
          continue;
        }
        float f[2][kRows];
        for (int r = 0; r < kRows; ++r) {
          if (has_q6k_form(t)) {
            f[0][r] = float(int8_t(sub[r])) * d[r];
            f[1][r] = float(int8_t(sub[16 + r])) * d[r];
          } else {
            f[0][r] = d[r] * float(sub[r]);
            f[1][r] = (dmin[r] * float(sub[16 + r])) * (1.0f / 128.0f);
          }
        }
        std::memcpy(e + kExpandedKQuantFactors, f, sizeof(f));
      }
    }
  }
}

int packed_kquant_q(DType t, const uint8_t* group, int64_t r, int64_t k) {
  const int64_t sb = k / kKQuantSuperK;
  const int j = int(k % kKQuantSuperK) / 32, kk = int(k % 32);
  const uint8_t* sub = super_block(group, t, sb) + packed_kquant_header_bytes(t) + j * packed_kquant_sub_bytes(t);
  if (t == DType::Q2_K || t == DType::Q3_K) {
    const int two = (sub[kKQuantTwoBits + 64 * (kk / 16) + 4 * r + kk % 4] >> (2 * ((kk % 16) / 4))) & 3;
    return t == DType::Q2_K ? two : two | (((sub[kQ3KThirdBits + 4 * r + kk % 4] >> (kk / 4)) & 1) << 2);
  }
  const uint8_t low = sub[32 + 64 * (kk / 8) + 4 * r + kk % 4];
  const int q = kk % 8 >= 4 ? low >> 4 : low & 0xF;
  if (t == DType::Q4_K) return q;
  if (t == DType::Q5_K) return q | (((sub[kKQuantHighBits + 4 * r + kk % 4] >> (2 * (kk / 8) + (kk % 8) / 4)) & 1) << 4);
  const int u = kk / 16, p = (kk % 16) / 4, i = kk % 4;
  return q | (((sub[kKQuantHighBits + 64 * u + 4 * r + i] >> (2 * p)) & 3) << 4);
}

uint16_t packed_kquant_d(const uint8_t* group, DType t, int64_t r, int64_t sb) {
  uint16_t d;
  std::memcpy(&d, super_block(group, t, sb) + 2 * r, 2);
  return d;
}

uint16_t packed_kquant_dmin(const uint8_t* group, DType t, int64_t r, int64_t sb) {
  uint16_t m;
  std::memcpy(&m, super_block(group, t, sb) + 32 + 2 * r, 2);
  return m;
}

int packed_kquant_scale(DType t, const uint8_t* group, int64_t r, int64_t sb, int64_t sub) {
  const uint8_t* s = super_block(group, t, sb) + packed_kquant_header_bytes(t);
  if (t == DType::Q2_K) return s[(sub / 2) * kQ2KSubBytes + 16 * (sub % 2) + r] & 0xF;
  if (!has_q6k_form(t)) return s[sub * packed_kquant_sub_bytes(t) + r];
  return int8_t(s[(sub / 2) * packed_kquant_sub_bytes(t) + 16 * (sub % 2) + r]);
}

int packed_kquant_min(const uint8_t* group, DType t, int64_t r, int64_t sb, int64_t j) {
  if (t == DType::Q2_K) return super_block(group, t, sb)[kQ4KHeaderBytes + (j / 2) * kQ2KSubBytes + 16 * (j % 2) + r] >> 4;
  return super_block(group, t, sb)[kQ4KHeaderBytes + j * packed_kquant_sub_bytes(t) + 16 + r];
}

}  // namespace lumen
