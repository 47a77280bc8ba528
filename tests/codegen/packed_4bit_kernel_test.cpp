// The Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL and IQ4_XS GEMV and batch kernels against a
// scalar dequantize-then-dot reference (a transcription of ggml's
// dequantize_row_* below, in double), for every ISA this CPU runs, every
// epilogue, odd block counts and row counts, N = 1..9; the batch kernel's rows
// bit-identical to the GEMV's (batch invariance) and, but for SiLU, to the
// scalar oracle of the kernels' fp32 order. Outputs are poisoned first; the
// padding between output rows must stay poisoned.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/target/kernel_abi.h"
#include "lumen/target/weight_formats.h"
#include "support/tolerances.h"
#include "support/kernel_test.h"

namespace lumen::codegen {
namespace {

using test::kAllEpilogues;
using test::kPoisonBits;
using test::runnable_isas;
using test::kernel;

using ops::DType;
using program::Epilogue;
using program::KernelId;

constexpr DType kFormats[] = {DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS};

// ggml's dequantize_row_q4_0 / q5_0 / q4_1 / q5_1 / iq4_nl / iq4_xs
// (ggml-quants.c), one block (IQ4_XS: 256 values).
void dequantize_block(DType format, const uint8_t* block, float* y) {
  uint16_t d16, m16 = 0;
  std::memcpy(&d16, block, 2);
  if (format == DType::IQ4_XS) {
    const auto& x = *reinterpret_cast<const quant::BlockIQ4_XS*>(block);
    const uint8_t* qs = x.qs;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((x.scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x.scales_h >> 2 * ib) & 3) << 4);
      const float dl = f16_to_f32(x.d) * float(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(quant::kIq4nlValues[qs[j] & 0xf]);
        y[j + 16] = dl * float(quant::kIq4nlValues[qs[j] >> 4]);
      }
      y += 32;
      qs += 16;
    }
    return;
  }
  const bool with_min = format == DType::Q4_1 || format == DType::Q5_1;
  if (with_min) std::memcpy(&m16, block + 2, 2);
  const float d = f16_to_f32(d16), m = f16_to_f32(m16);
  const int head = with_min ? 4 : 2;
  if (format == DType::Q4_0 || format == DType::Q4_1 || format == DType::IQ4_NL) {
    const uint8_t* qs = block + head;
    for (int j = 0; j < 16; ++j) {
      if (format == DType::Q4_0) {
        y[j] = float((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = float((qs[j] >> 4) - 8) * d;
      } else if (format == DType::Q4_1) {
        y[j] = float(qs[j] & 0x0F) * d + m;
        y[j + 16] = float(qs[j] >> 4) * d + m;
      } else {
        y[j] = d * float(quant::kIq4nlValues[qs[j] & 0x0F]);
        y[j + 16] = d * float(quant::kIq4nlValues[qs[j] >> 4]);
      }
    }
    return;
  }
  uint32_t qh;
  std::memcpy(&qh, block + head, 4);
  const uint8_t* qs = block + head + 4;
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh_0 = uint8_t(((qh >> j) << 4) & 0x10);
    const uint8_t xh_1 = uint8_t((qh >> (j + 12)) & 0x10);
    if (format == DType::Q5_0) {
      y[j] = float(((qs[j] & 0x0F) | xh_0) - 16) * d;
      y[j + 16] = float(((qs[j] >> 4) | xh_1) - 16) * d;
    } else {
      y[j] = float((qs[j] & 0x0F) | xh_0) * d + m;
      y[j + 16] = float((qs[j] >> 4) | xh_1) * d + m;
    }
  }
}

// The kernels' arithmetic for one row of a packed group, in their order: per
// block acc = fma(float(sum(level * x)), d * x_scale, acc) (IQ4_XS: d * (ls - 32)
// for d), then for Q4_1 and Q5_1 acc = fma(m * -1/128, float(ActBlock::sum) *
// x_scale, acc).
float oracle_dot(DType format, const uint8_t* group, int64_t r, const ActBlock* x, int64_t k_blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < k_blocks; ++b) {
    int32_t sum = 0;
    for (int64_t i = 0; i < 32; ++i) {
      const int q = packed_q(format, group, r, b * 32 + i);
      sum += (has_iq4_levels(format) ? quant::kIq4nlValues[q] : q - q_offset(format)) * x[b].qs[i];
    }
    float d = f16_to_f32(packed_4bit_scale(format, group, r, b));
    if (format == DType::IQ4_XS) d *= float(packed_4bit_block_scale(format, group, r, b));
    acc = std::fma(float(sum), d * x[b].d, acc);
    if (has_mins(format)) {
      acc = std::fma(f16_to_f32(packed_4bit_min(format, group, r, b)) * (-1.0f / 128), float(x[b].sum) * x[b].d, acc);
    }
  }
  return acc;
}

struct Problem {
  DType format = DType::Q4_0;
  Epilogue epilogue = Epilogue::None;
  int64_t m = 16, k = 32;
};

struct Data {
  std::vector<uint8_t> blocks;    // GGUF blocks: rows (2m for SiluMul: gate then up) x k/32
  std::vector<double> weights;    // their dequantized values
  std::vector<double> magnitudes; // |d * q| + |m|: what the kernel's rounding scales with
  std::vector<uint8_t> packed;    // packed groups (gate and up alternating for SiluMul)
  std::vector<ActBlock> x;        // kMaxTokens tokens, x_stride apart
  std::vector<float> bias, residual;
  int64_t x_stride = 0, y_stride = 0, r_stride = 0;
};
constexpr int64_t kMaxTokens = 9;

Data make_data(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t kb = p.k / 32, rows = p.epilogue == Epilogue::SiluMul ? 2 * p.m : p.m;
  const int64_t block_bytes = ops::row(p.format).block_bytes, block_elems = ops::row(p.format).block_elems;
  Data d;
  d.blocks.resize(size_t(rows * ops::row_bytes(p.format, p.k)));
  for (auto& b : d.blocks) b = uint8_t(rng());
  d.weights.resize(size_t(rows * p.k));
  d.magnitudes.resize(d.weights.size());
  for (int64_t b = 0; b < rows * p.k / block_elems; ++b) {
    uint8_t* blk = d.blocks.data() + b * block_bytes;
    const uint16_t scale = f32_to_f16(0.0005f + 0.0001f * float(rng() % 100));
    std::memcpy(blk, &scale, 2);
    float min = 0.0f;
    if (has_mins(p.format)) {
      // Mostly negative, as a quantizer's; both signs, and zero.
      min = -0.004f + 0.0001f * float(int(rng() % 60) - 10);
      const uint16_t m16 = f32_to_f16(min);
      std::memcpy(blk + 2, &m16, 2);
      min = f16_to_f32(m16);
    }
    float y[256];
    dequantize_block(p.format, blk, y);
    for (int64_t i = 0; i < block_elems; ++i) {
      d.weights[size_t(b * block_elems + i)] = y[i];
      d.magnitudes[size_t(b * block_elems + i)] = std::fabs(double(y[i]) - min) + std::fabs(min);
    }
  }
  const int64_t group_bytes = kb * packed_block_bytes(p.format);
  const int64_t groups = (p.m + kPackRows - 1) / kPackRows;
  const int64_t mult = p.epilogue == Epilogue::SiluMul ? 2 : 1;
  d.packed.resize(size_t(mult * groups * group_bytes));
  // The layout is the same on every ISA.
  if (p.epilogue == Epilogue::SiluMul) {
    pack_gate_up_rows(p.format, Isa::Avx2, d.blocks.data(), d.blocks.data() + p.m * ops::row_bytes(p.format, p.k), p.m, p.k,
                      d.packed.data());
  } else {
    pack_rows(p.format, Isa::Avx2, d.blocks.data(), p.m, p.k, d.packed.data(), 0);
  }
  d.x_stride = kb + 1;
  d.y_stride = p.m + 3;
  d.r_stride = p.m + 5;
  d.x.resize(size_t(kMaxTokens * d.x_stride));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(size_t(p.k));
  for (int64_t t = 0; t < kMaxTokens; ++t) {
    for (auto& v : row) v = normal(rng);
    quantize_act(row.data(), d.x.data() + t * d.x_stride, p.k);
  }
  d.bias.resize(size_t(p.m));
  for (auto& v : d.bias) v = normal(rng);
  d.residual.resize(size_t(kMaxTokens * d.r_stride));
  for (auto& v : d.residual) v = normal(rng);
  return d;
}

// The dequantized weights times the dequantized activations, in double; and
// a bound for the kernel's fp32 rounding (sum of |terms|).
struct Expected {
  double value, magnitude;
};
Expected expected(const Problem& p, const Data& d, int64_t n, int64_t m) {
  auto dot = [&](int64_t row, double& mag) {
    double acc = 0;
    for (int64_t b = 0; b < p.k / 32; ++b) {
      const ActBlock& x = d.x[size_t(n * d.x_stride + b)];
      for (int i = 0; i < 32; ++i) {
        const double xv = double(x.d) * x.qs[i];
        acc += d.weights[size_t(row * p.k + b * 32 + i)] * xv;
        mag += d.magnitudes[size_t(row * p.k + b * 32 + i)] * std::fabs(xv);
      }
    }
    return acc;
  };
  double mag = 0, v;
  if (p.epilogue == Epilogue::SiluMul) {
    double mag_g = 0, mag_u = 0;
    const double g = dot(m, mag_g), u = dot(p.m + m, mag_u);
    v = g / (1.0 + std::exp(-g)) * u;
    mag = std::fabs(v) * 8 + mag_g * std::fabs(u) + mag_u * std::fabs(g);
  } else {
    v = dot(m, mag);
  }
  if (p.epilogue == Epilogue::Bias || p.epilogue == Epilogue::BiasResidual) {
    v += d.bias[size_t(m)];
    mag += std::fabs(d.bias[size_t(m)]);
  }
  if (p.epilogue == Epilogue::Residual || p.epilogue == Epilogue::BiasResidual) {
    v += d.residual[size_t(n * d.r_stride + m)];
    mag += std::fabs(d.residual[size_t(n * d.r_stride + m)]);
  }
  return {v, mag};
}

// Runs `id` over n tokens in row tasks of 32 rows (so that w starts at a
// later group), as the runtime does.
std::vector<float> run(Isa isa, const KernelId& id, const Problem& p, const Data& d, int64_t n,
                       CpuTune tune = host_cpu_tune()) {
  std::vector<float> y(size_t(n * d.y_stride), std::bit_cast<float>(kPoisonBits));
  const int64_t mult = p.epilogue == Epilogue::SiluMul ? 2 : 1;
  const int64_t group_bytes = (p.k / 32) * packed_block_bytes(p.format);
  for (int64_t row0 = 0; row0 < p.m; row0 += 32) {
    MatMulArgs a{};
    a.w = d.packed.data() + (row0 / 16) * mult * group_bytes;
    a.x = d.x.data();
    a.y = y.data() + row0;
    a.bias = d.bias.data() + row0;
    a.residual = d.residual.data() + row0;
    a.x_stride = d.x_stride;
    a.y_stride = d.y_stride;
    a.r_stride = d.r_stride;
    a.k_blocks = p.k / 32;
    a.m_rows = std::min<int64_t>(32, p.m - row0);
    a.n_tokens = n;
    kernel(isa, id, tune).fn()(&a);
  }
  return y;
}

// The reference and the oracle of every (token, row), computed once for
// every ISA and N (they are scalar: most of the test's time).
struct Wanted {
  std::vector<Expected> reference;
  std::vector<float> oracle;  // SiluMul: none
};
Wanted wanted(const Problem& p, const Data& d) {
  Wanted w;
  const int64_t group_bytes = (p.k / 32) * packed_block_bytes(p.format);
  for (int64_t t = 0; t < kMaxTokens; ++t) {
    for (int64_t m = 0; m < p.m; ++m) {
      w.reference.push_back(expected(p, d, t, m));
      // The scalar oracle's bits (SiLU's exp is the kernel's own approximation).
      if (p.epilogue == Epilogue::SiluMul) continue;
      float o = oracle_dot(p.format, d.packed.data() + m / 16 * group_bytes, m % 16, d.x.data() + t * d.x_stride,
                           p.k / 32);
      if (p.epilogue == Epilogue::Bias || p.epilogue == Epilogue::BiasResidual) o += d.bias[size_t(m)];
      if (p.epilogue == Epilogue::Residual || p.epilogue == Epilogue::BiasResidual)
        o += d.residual[size_t(t * d.r_stride + m)];
      w.oracle.push_back(o);
    }
  }
  return w;
}

void check(Isa isa, const Problem& p, const Data& d, const Wanted& wanted, const std::vector<int64_t>& token_counts) {
  SCOPED_TRACE(testing::Message() << to_string(isa) << " " << to_string(p.format) << " "
                                  << to_string(p.epilogue) << " M=" << p.m << " K=" << p.k);
  const std::vector<float> gemv = run(isa, KernelId::gemv(p.epilogue, p.format), p, d, kMaxTokens);
  // Every tuning's GEMV and batch kernel (their software prefetch) compute
  // the same bits.
  const std::vector<float> batch = run(isa, KernelId::batch(p.epilogue, p.format), p, d, kMaxTokens - 1);
  for (CpuTune tune : kCpuTunes) {
    const std::vector<float> tuned = run(isa, KernelId::gemv(p.epilogue, p.format), p, d, kMaxTokens, tune);
    if (std::memcmp(tuned.data(), gemv.data(), gemv.size() * sizeof(float)) != 0)
      ADD_FAILURE() << "the " << to_string(tune) << " GEMV differs from the host tuning's";
    const std::vector<float> tuned_batch = run(isa, KernelId::batch(p.epilogue, p.format), p, d, kMaxTokens - 1, tune);
    if (std::memcmp(tuned_batch.data(), batch.data(), batch.size() * sizeof(float)) != 0)
      ADD_FAILURE() << "the " << to_string(tune) << " batch kernel differs from the host tuning's";
  }
  for (int64_t n : token_counts) {
    const KernelId id = n == 1 ? KernelId::gemv(p.epilogue, p.format) : KernelId::batch(p.epilogue, p.format);
    const std::vector<float> y = run(isa, id, p, d, n);
    int failures = 0;
    for (int64_t t = 0; t < n && failures < 5; ++t) {
      for (int64_t m = 0; m < d.y_stride && failures < 5; ++m) {
        const float got = y[size_t(t * d.y_stride + m)];
        if (m >= p.m) {
          if (std::bit_cast<uint32_t>(got) != kPoisonBits) {
            ADD_FAILURE() << "N=" << n << ": wrote past m_rows at n=" << t << " m=" << m;
            ++failures;
          }
          continue;
        }
        const Expected w = wanted.reference[size_t(t * p.m + m)];
        const double tol = tolerance::kFp32ReorderRelative * w.magnitude + tolerance::kZeroFloor;
        if (!(std::fabs(double(got) - w.value) <= tol)) {
          ADD_FAILURE() << to_string(id) << " N=" << n << " n=" << t << " m=" << m << " got " << got << " want "
                        << w.value << " tol " << tol;
          ++failures;
        }
        if (p.epilogue != Epilogue::SiluMul) {
          const float want = wanted.oracle[size_t(t * p.m + m)];
          if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want)) {
            ADD_FAILURE() << to_string(id) << " N=" << n << " n=" << t << " m=" << m << " got " << got
                          << " the oracle's " << want;
            ++failures;
          }
        }
        // The GEMV ran every token on its own: the batch kernel's rows are the same bits.
        if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(gemv[size_t(t * d.y_stride + m)])) {
          ADD_FAILURE() << to_string(id) << " N=" << n << " n=" << t << " m=" << m << " differs from the GEMV";
          ++failures;
        }
      }
    }
  }
}

TEST(Packed4BitKernels, GemvAndBatchEveryIsaEpilogueAndShape) {
  uint32_t seed = 0;
  for (DType format : kFormats) {
    for (Epilogue e : kAllEpilogues) {
      // IQ4_XS: 1, 3, 5 and 19 super-blocks.
      const bool super = format == DType::IQ4_XS;
      for (int64_t k : super ? std::vector<int64_t>{256, 768, 1280, 4864} : std::vector<int64_t>{32, 352, 896, 4864}) {
        // Every N on the small K; fewer on the large ones.
        const std::vector<int64_t> ns = k <= 768   ? std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}
                                        : k < 4864 ? std::vector<int64_t>{1, 2, 7, 9}
                                                   : std::vector<int64_t>{1, 8};
        for (int64_t m : {1, 3, 17, 33, 80}) {
          if (k == 4864 && m != 17 && m != 80) continue;
          const Problem p{format, e, m, k};
          const Data d = make_data(p, ++seed);
          const Wanted w = wanted(p, d);
          for (Isa isa : runnable_isas()) {
            check(isa, p, d, w, ns);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lumen::codegen
