// The k-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) GEMV and batch kernels against a scalar
// dequantize-then-dot reference (a transcription of ggml's
// dequantize_row_q4_K / q5_K / q6_K; Q2_K, Q3_K: quant::dequantize_row, ggml's)
// and against the packed-layout oracle (bit for bit, the fp32 stage being the
// same), on random blocks with finite scales, for every ISA this CPU runs and
// every epilogue; the batch kernel's row of each token equals the GEMV's.
// The prefill GEMM over expanded rows runs Q4_1 and Q5_1 too (their GEMV and
// batch kernels are matmul_generator.cpp's): each GEMM row is their GEMV's.
#include <gtest/gtest.h>

#include <bit>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kquant_kernel.h"
#include "lumen/passes/passes.h"
#include "lumen/quant/blocks.h"
#include "lumen/quant/quant.h"
#include "lumen/target/weight_formats.h"
#include "lumen/target/act_quant.h"
#include "lumen/target/packed_kquant.h"
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

const DType kTypes[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
// The 32-wide types the k-quant GEMM runs on expanded rows (has_expanded_kquant).
const DType kExpanded32Types[] = {DType::Q4_1, DType::Q5_1};

// ggml's get_scale_min_k4, transcribed.
void scale_min_k4(const uint8_t* scales, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// ggml's dequantize_row_q5_K, transcribed.
void dequant_q5k(const quant::BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d), min = f16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    int sc, m;
    scale_min_k4(b.scales, is + 0, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    scale_min_k4(b.scales, is + 1, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    is += 2;
    u1 = uint8_t(u1 << 2);
    u2 = uint8_t(u2 << 2);
  }
}

// ggml's dequantize_row_q4_K, transcribed.
void dequant_q4k(const quant::BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d), min = f16_to_f32(b.dmin);
  auto scale_min = [&](int j, int* sc, int* m) { scale_min_k4(b.scales, j, sc, m); };
  const uint8_t* q = b.qs;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    scale_min(is, &sc, &m);
    const float d1 = d * sc, m1 = min * m;
    scale_min(is + 1, &sc, &m);
    const float d2 = d * sc, m2 = min * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
  }
}

// ggml's dequantize_row_q6_K, transcribed.
void dequant_q6k(const quant::BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

// rows x k of random blocks of type t: random bytes, finite scales.
std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  const int64_t nb = rows * k / ops::row(t).block_elems, bytes = ops::row(t).block_bytes;
  std::vector<uint8_t> data(nb * bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : data) b = uint8_t(byte(rng));
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* blk = data.data() + i * bytes;
    if (t == DType::Q2_K) {
      reinterpret_cast<quant::BlockQ2_K*>(blk)->d = f32_to_f16(scale(rng));
      reinterpret_cast<quant::BlockQ2_K*>(blk)->dmin = f32_to_f16(scale(rng));
    } else if (t == DType::Q3_K) {
      reinterpret_cast<quant::BlockQ3_K*>(blk)->d = f32_to_f16(scale(rng));
    } else if (t != DType::Q6_K) {
      // d and dmin (Q4_1, Q5_1: d and m) open Q4_K, Q5_K, Q4_1 and Q5_1 blocks.
      const uint16_t d = f32_to_f16(scale(rng)), dmin = f32_to_f16(scale(rng));
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
    } else {
      reinterpret_cast<quant::BlockQ6_K*>(blk)->d = f32_to_f16(scale(rng));
    }
  }
  return data;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& blocks, int64_t rows, int64_t k) {
  std::vector<float> w(rows * k);
  if (!has_packed_kquant(t) || t == DType::Q2_K || t == DType::Q3_K) {  // the library's (ggml's) dequantizer
    quant::dequantize_row(t, blocks.data(), w.data(), rows * k);
    return w;
  }
  for (int64_t i = 0; i < rows * k / 256; ++i) {
    if (t == DType::Q4_K) {
      dequant_q4k(reinterpret_cast<const quant::BlockQ4_K*>(blocks.data())[i], w.data() + 256 * i);
    } else if (t == DType::Q5_K) {
      dequant_q5k(reinterpret_cast<const quant::BlockQ5_K*>(blocks.data())[i], w.data() + 256 * i);
    } else {
      dequant_q6k(reinterpret_cast<const quant::BlockQ6_K*>(blocks.data())[i], w.data() + 256 * i);
    }
  }
  return w;
}

struct Case {
  DType type;
  int64_t m, k;
  Epilogue epi;
  int64_t max_n = 9;  // tokens of the data
  int64_t x_stride() const { return k / 32 + 3; }
  int64_t y_stride() const { return m + 5; }
  int64_t r_stride() const { return m + 2; }
};

struct Data {
  std::vector<uint8_t> packed;
  std::vector<uint8_t> expanded;  // expand_kquant of every packed group, as a prefill task makes them
  std::vector<ActBlock> x;
  std::vector<float> bias, residual;
  std::vector<float> exact;  // float64 dequantize-then-dot, per (token, row), before the epilogue
  std::vector<float> bound;  // the tolerance of each
  std::vector<float> oracle; // reference_kquant_matmul, y layout (k-quants; Q4_1, Q5_1: empty)
};

Data make_data(const Case& c, std::mt19937& rng) {
  Data d;
  const bool silu = c.epi == Epilogue::SiluMul;
  const auto w = random_blocks(c.type, c.m, c.k, rng);
  const auto u = silu ? random_blocks(c.type, c.m, c.k, rng) : std::vector<uint8_t>{};
  d.packed.resize((silu ? 2 : 1) * packed_bytes(c.type, c.m, c.k));
  // The layouts are the same on every ISA.
  if (silu) {
    pack_gate_up_rows(c.type, Isa::Avx2, w.data(), u.data(), c.m, c.k, d.packed.data());
  } else {
    pack_rows(c.type, Isa::Avx2, w.data(), c.m, c.k, d.packed.data(), 0);
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  d.x.resize(c.max_n * c.x_stride());
  std::vector<float> xf(c.k);
  std::vector<std::vector<float>> xd(c.max_n, std::vector<float>(c.k));
  for (int64_t n = 0; n < c.max_n; ++n) {
    for (auto& v : xf) v = normal(rng);
    quantize_act(xf.data(), d.x.data() + n * c.x_stride(), c.k);
    for (int64_t i = 0; i < c.k; ++i) {
      const ActBlock& b = d.x[n * c.x_stride() + i / 32];
      xd[n][i] = b.d * b.qs[i % 32];
    }
  }
  d.bias.resize(c.m);
  d.residual.resize(c.max_n * c.r_stride());
  for (auto& v : d.bias) v = normal(rng);
  for (auto& v : d.residual) v = normal(rng);
  const auto wf = dequantize(c.type, w, c.m, c.k);
  const auto uf = silu ? dequantize(c.type, u, c.m, c.k) : std::vector<float>{};
  d.exact.resize(c.max_n * c.m * (silu ? 2 : 1));
  d.bound.resize(d.exact.size());
  for (int64_t n = 0; n < c.max_n; ++n) {
    for (int64_t r = 0; r < c.m * (silu ? 2 : 1); ++r) {
      const float* row = r < c.m ? wf.data() + r * c.k : uf.data() + (r - c.m) * c.k;
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < c.k; ++i) {
        acc += double(row[i]) * xd[n][i];
        mag += std::fabs(double(row[i]) * xd[n][i]);
      }
      d.exact[n * c.m * (silu ? 2 : 1) + r] = float(acc);
      // The kernels' min term and scale products round apart from the weights:
      // a few ulp of each block's terms, which the weight magnitudes bound
      // within a factor (q * d * sc and dmin * m are each at most ~2 |w|).
      d.bound[n * c.m * (silu ? 2 : 1) + r] = float(2e-5 * mag + 1e-6);
    }
  }
  if (has_packed_kquant(c.type)) {
    d.oracle.assign(c.max_n * c.y_stride(), std::bit_cast<float>(kPoisonBits));
    MatMulArgs a{d.packed.data(), d.x.data(), d.oracle.data(), d.bias.data(), d.residual.data(), c.x_stride(),
                 c.y_stride(), c.r_stride(), c.k / 32, c.m, c.max_n};
    reference_kquant_matmul(c.type, c.epi, a);
  }
  const int64_t groups = (c.m + 15) / 16 * (silu ? 2 : 1);
  d.expanded.resize(groups * c.k / 32 * expanded_kquant_block_bytes(c.type));
  expand_kquant(c.type, d.packed.data(), groups, c.k / 32, d.expanded.data());
  return d;
}

std::vector<float> run(Isa isa, const Case& c, const Data& d, const KernelId& id, int64_t n0, int64_t n,
                       CpuTune tune = host_cpu_tune()) {
  std::vector<float> y(c.max_n * c.y_stride(), std::bit_cast<float>(kPoisonBits));
  // A GEMM reads the expanded rows.
  const uint8_t* w = id.kind == program::KernelKind::Gemm ? d.expanded.data() : d.packed.data();
  MatMulArgs a{w, d.x.data() + n0 * c.x_stride(), y.data() + n0 * c.y_stride(), d.bias.data(),
               d.residual.data() + n0 * c.r_stride(), c.x_stride(), c.y_stride(), c.r_stride(), c.k / 32, c.m, n};
  kernel(isa, id, tune).fn()(&a);
  return y;
}

// The float64 value of (token n, row m) after the epilogue, and its tolerance.
std::pair<double, double> expected(const Case& c, const Data& d, int64_t n, int64_t m) {
  const bool silu = c.epi == Epilogue::SiluMul;
  const int64_t base = n * c.m * (silu ? 2 : 1);
  double v = d.exact[base + m], tol = d.bound[base + m];
  if (silu) {
    const double g = v, up = d.exact[base + c.m + m];
    const double sg = 1.0 / (1.0 + std::exp(-g));
    v = g * sg * up;
    tol = tol * std::fabs(sg * (1 + g * (1 - sg)) * up) + d.bound[base + c.m + m] * std::fabs(g * sg) + 1e-6;
  }
  if (c.epi == Epilogue::Bias || c.epi == Epilogue::BiasResidual) v += d.bias[m];
  if (c.epi == Epilogue::Residual || c.epi == Epilogue::BiasResidual) v += d.residual[n * c.r_stride() + m];
  return {v, tol + 1e-6 * std::fabs(v)};
}

void check(Isa isa, const Case& c, const Data& d, const KernelId& id, int64_t n_tokens,
           const std::vector<float>& y) {
  SCOPED_TRACE(std::string(to_string(isa)) + " " + program::to_string(id) + " " + ops::row(c.type).name +
               " m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) + " n=" + std::to_string(n_tokens));
  int failures = 0;
  for (int64_t n = 0; n < c.max_n; ++n) {
    for (int64_t m = 0; m < c.y_stride(); ++m) {
      const float got = y[n * c.y_stride() + m];
      if (n >= n_tokens || m >= c.m) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got), kPoisonBits) << "write outside the output at n=" << n << " m=" << m;
        continue;
      }
      // Q4_1 and Q5_1 have no oracle here: their GEMV is checked against
      // packed_4bit_kernel_test.cpp's, and run_case checks each GEMM row is the GEMV's.
      const float want = d.oracle.empty() ? got : d.oracle[n * c.y_stride() + m];
      if (c.epi == Epilogue::SiluMul) {
        // The kernels' exp is within a few ulp of std::exp.
        EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-7) << "oracle at n=" << n << " m=" << m;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "oracle at n=" << n << " m=" << m << ": " << got << " vs " << want;
      }
      const auto [v, tol] = expected(c, d, n, m);
      EXPECT_NEAR(got, v, tol) << "dequantize-then-dot at n=" << n << " m=" << m;
      if (::testing::Test::HasFailure() && ++failures > 5) return;
    }
  }
}

// The kernels run_case checks beside the GEMV: the batch kernel, or (gemm)
// the schedule's k-quant GEMM and a one-group tile of up to 3 tokens (edge
// bodies of both kinds at every N tested).
std::vector<KernelId> kernels_under_test(Isa isa, const Case& c, bool gemm) {
  if (!gemm) return {KernelId::gemv(c.epi, c.type), KernelId::batch(c.epi, c.type)};
  std::vector<KernelId> ids = {passes::prefill_kernel(isa, c.epi, c.type)};
  for (int64_t tokens : {3, 2, 1}) {
    if (program::fits(KernelId::gemm(c.epi, 16, tokens, c.type), isa)) {
      ids.push_back(KernelId::gemm(c.epi, 16, tokens, c.type));
      break;
    }
  }
  return ids;
}

void run_case(const Case& c, std::mt19937& rng, const std::vector<int64_t>& ns, bool gemm = false) {
  const Data d = make_data(c, rng);
  for (Isa isa : runnable_isas()) {
    const KernelId gemv = KernelId::gemv(c.epi, c.type);
    std::vector<float> per_token(c.max_n * c.y_stride(), std::bit_cast<float>(kPoisonBits));
    for (int64_t n = 0; n < c.max_n; ++n) {
      const auto y = run(isa, c, d, gemv, n, 1);
      std::copy_n(y.begin() + n * c.y_stride(), c.y_stride(), per_token.begin() + n * c.y_stride());
    }
    if (d.oracle.empty()) check(isa, c, d, gemv, c.max_n, per_token);  // the float64 check of the GEMV rows
    // Every tuning's GEMV (its prefetch and row groups differ) gives the host tuning's bits.
    for (CpuTune tune : kCpuTunes) {
      const auto y = run(isa, c, d, gemv, 0, 1, tune);
      ASSERT_EQ(0, std::memcmp(y.data(), per_token.data(), c.m * sizeof(float)))
          << to_string(isa) << " " << ops::row(c.type).name << ": the " << to_string(tune)
          << " GEMV differs from the host tuning's";
    }
    for (int64_t n : ns) {
      for (const KernelId& id : kernels_under_test(isa, c, gemm)) {
        const auto y = run(isa, c, d, id, 0, n);
        check(isa, c, d, id, n, y);
        // Batch invariance: each token's row is the GEMV's, bit for bit.
        for (int64_t t = 0; t < n; ++t) {
          ASSERT_EQ(0, std::memcmp(y.data() + t * c.y_stride(), per_token.data() + t * c.y_stride(),
                                   c.m * sizeof(float)))
              << to_string(isa) << " " << program::to_string(id) << " " << ops::row(c.type).name
              << " n=" << n << ": token " << t << " differs from the GEMV";
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(KQuantKernels, EveryEpilogueShapeAndTokenCount) {
  std::mt19937 rng(20);
  const std::vector<int64_t> all_n = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  for (DType t : kTypes) {
    for (Epilogue e : kAllEpilogues) {
      for (int64_t k : {256, 512}) {
        for (int64_t m : {1, 3, 17, 33, 80}) run_case({t, m, k, e}, rng, all_n);
      }
      // The Qwen2.5 ffn_down width.
      for (int64_t m : {17, 80}) run_case({t, m, 4864, e}, rng, {1, 2, 8, 9});
    }
  }
}

// The prefill GEMM over expanded rows (odd N, edge tiles of rows and tokens):
// against the oracle and each token's row against the GEMV's, bit for bit.
TEST(KQuantKernels, GemmOverExpandedRowsIsTheGemvRowForRow) {
  std::mt19937 rng(21);
  for (DType t : kTypes) {
    for (Epilogue e : kAllEpilogues) {
      for (int64_t m : {1, 3, 17, 33, 80}) run_case({t, m, 256, e, 67}, rng, {9, 13, 64, 67}, true);
    }
    for (int64_t m : {1, 3, 17, 33, 80}) run_case({t, m, 512, Epilogue::SiluMul, 67}, rng, {9, 13, 64, 67}, true);
    run_case({t, 17, 4864, Epilogue::Residual, 67}, rng, {9, 67}, true);
    run_case({t, 80, 4864, Epilogue::SiluMul, 13}, rng, {13}, true);
  }
}

// Q4_1 and Q5_1 prefill on the same GEMM: K of any block count (odd ones, and
// Qwen2.5's 896, which the k-quants cannot have), odd M and N; each row is
// the GEMV's (matmul_generator.cpp) bit for bit.
TEST(KQuantKernels, Q4_1AndQ5_1GemmOverExpandedRowsIsTheGemvRowForRow) {
  std::mt19937 rng(22);
  for (DType t : kExpanded32Types) {
    for (Epilogue e : kAllEpilogues) {
      for (int64_t m : {1, 17, 33}) run_case({t, m, 96, e, 67}, rng, {9, 13, 67}, true);
      run_case({t, 19, 224, e, 13}, rng, {13}, true);
    }
    run_case({t, 33, 896, Epilogue::Bias, 67}, rng, {9, 67}, true);
    run_case({t, 17, 896, Epilogue::SiluMul, 13}, rng, {13}, true);
  }
}

TEST(KQuantKernels, ExpandedLayoutIsThePackedValuesAndTheGemvFactors) {
  std::mt19937 rng(4);
  for (DType t : kTypes) {
    const int64_t rows = 19, k = 512, kb = k / 32;
    const auto w = random_blocks(t, rows, k, rng);
    const int64_t block_bytes = expanded_kquant_block_bytes(t);
    std::vector<uint8_t> packed(packed_kquant_bytes(t, rows, k)), e(2 * kb * block_bytes);
    pack_kquant(t, w.data(), rows, k, packed.data(), 0);
    expand_kquant(t, packed.data(), 2, kb, e.data());
    const int64_t group_bytes = k / 256 * packed_kquant_super_bytes(t);
    for (int64_t r = 0; r < 32; ++r) {
      const uint8_t* g = packed.data() + (r / 16) * group_bytes;
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t* blk = e.data() + ((r / 16) * kb + b) * block_bytes;
        // Q3_K's q + 28 is a Q6_K q with the same value.
        const int q_shift = t == DType::Q3_K ? 28 : 0;
        for (int64_t i = 0; i < 32; ++i)
          ASSERT_EQ(blk[64 * (i / 4) + 4 * (r % 16) + i % 4], packed_kquant_q(t, g, r % 16, 32 * b + i) + q_shift);
        float f0, f1;
        std::memcpy(&f0, blk + kExpandedKQuantFactors + 4 * (r % 16), 4);
        std::memcpy(&f1, blk + kExpandedKQuantFactors + 64 + 4 * (r % 16), 4);
        const int64_t sb = b / 8, j = b % 8;
        const float d = f16_to_f32(packed_kquant_d(g, t, r % 16, sb));
        if (t == DType::Q2_K) {  // float(d) * float(sc_s), then float(dmin) * float(m_s)
          const float dmin = f16_to_f32(packed_kquant_dmin(g, t, r % 16, sb));
          for (int64_t s = 0; s < 2; ++s) {
            float fs, fm;
            std::memcpy(&fs, blk + kExpandedKQuantFactors + 64 * s + 4 * (r % 16), 4);
            std::memcpy(&fm, blk + kExpandedKQuantFactors + 128 + 64 * s + 4 * (r % 16), 4);
            EXPECT_EQ(fs, d * float(packed_kquant_scale(t, g, r % 16, sb, 2 * j + s)));
            EXPECT_EQ(fm, dmin * float(packed_kquant_min(g, t, r % 16, sb, 2 * j + s)));
          }
        } else if (!has_q6k_form(t)) {
          EXPECT_EQ(f0, d * float(packed_kquant_scale(t, g, r % 16, sb, j)));
          EXPECT_EQ(f1, f16_to_f32(packed_kquant_dmin(g, t, r % 16, sb)) * float(packed_kquant_min(g, t, r % 16, sb, j)) *
                            (1.0f / 128.0f));
        } else {
          EXPECT_EQ(f0, float(packed_kquant_scale(t, g, r % 16, sb, 2 * j)) * d);
          EXPECT_EQ(f1, float(packed_kquant_scale(t, g, r % 16, sb, 2 * j + 1)) * d);
        }
      }
    }
  }
  // Q4_1, Q5_1: q, then float(d) and float(m) * (-1/128), of any block count.
  for (DType t : kExpanded32Types) {
    const int64_t rows = 19, k = 896, kb = k / 32;
    const auto w = random_blocks(t, rows, k, rng);
    const int64_t block_bytes = expanded_kquant_block_bytes(t);
    std::vector<uint8_t> packed(packed_bytes(t, rows, k)), e(2 * kb * block_bytes);
    pack_rows(t, Isa::Avx2, w.data(), rows, k, packed.data(), 0);
    expand_kquant(t, packed.data(), 2, kb, e.data());
    const int64_t group_bytes = kb * packed_block_bytes(t);
    for (int64_t r = 0; r < 32; ++r) {
      const uint8_t* g = packed.data() + (r / 16) * group_bytes;
      for (int64_t b = 0; b < kb; ++b) {
        const uint8_t* blk = e.data() + ((r / 16) * kb + b) * block_bytes;
        for (int64_t i = 0; i < 32; ++i)
          ASSERT_EQ(blk[64 * (i / 4) + 4 * (r % 16) + i % 4], packed_q(t, g, r % 16, 32 * b + i)) << ops::row(t).name;
        float f0, f1;
        std::memcpy(&f0, blk + kExpandedKQuantFactors + 4 * (r % 16), 4);
        std::memcpy(&f1, blk + kExpandedKQuantFactors + 64 + 4 * (r % 16), 4);
        EXPECT_EQ(f0, f16_to_f32(packed_4bit_scale(t, g, r % 16, b)));
        EXPECT_EQ(f1, f16_to_f32(packed_4bit_min(t, g, r % 16, b)) * (-1.0f / 128.0f));
      }
    }
  }
  std::vector<uint8_t> src(1 << 16), dst(1 << 16);
  EXPECT_THROW(expand_kquant(DType::Q6_K, src.data(), 1, 28, dst.data()), std::invalid_argument);
  EXPECT_THROW(expand_kquant(DType::Q8_0, src.data(), 1, 8, dst.data()), std::invalid_argument);
  EXPECT_THROW(expand_kquant(DType::IQ4_XS, src.data(), 1, 8, dst.data()), std::invalid_argument);
  EXPECT_THROW(expand_kquant(DType::Q4_1, src.data(), 1, 0, dst.data()), std::invalid_argument);
}

TEST(KQuantKernels, KNotAMultipleOf256IsRefused) {
  for (DType t : kTypes) {
    EXPECT_THROW(packed_kquant_bytes(t, 16, 896), std::invalid_argument);
    std::vector<uint8_t> src(16 * 4 * ops::row(t).block_bytes), out(1 << 16);
    EXPECT_THROW(pack_kquant(t, src.data(), 16, 896, out.data(), 0), std::invalid_argument);
    // A kernel asked for K = 896 (28 blocks) writes nothing.
    std::vector<ActBlock> x(28);
    quantize_act(std::vector<float>(896, 1.0f).data(), x.data(), 896);
    for (Isa isa : runnable_isas()) {
      for (const KernelId& id : {KernelId::gemv(Epilogue::None, t), KernelId::batch(Epilogue::None, t),
                                 KernelId::gemm(Epilogue::None, 16, 1, t)}) {
        std::vector<float> y(16, std::bit_cast<float>(kPoisonBits));
        MatMulArgs a{out.data(), x.data(), y.data(), nullptr, nullptr, 28, 16, 16, 28, 16, 1};
        kernel(isa, id).fn()(&a);
        for (float v : y) EXPECT_EQ(std::bit_cast<uint32_t>(v), kPoisonBits) << to_string(isa);
      }
    }
    MatMulArgs a{out.data(), nullptr, nullptr, nullptr, nullptr, 28, 16, 16, 28, 16, 1};
    EXPECT_THROW(reference_kquant_matmul(t, Epilogue::None, a), std::invalid_argument);
  }
  EXPECT_THROW(packed_kquant_bytes(DType::Q8_0, 16, 256), std::invalid_argument);
}

TEST(KQuantKernels, PackedLayoutRoundTripsAndCostsAtMost4Percent) {
  std::mt19937 rng(3);
  for (DType t : kTypes) {
    const int64_t rows = 19, k = 512;
    const auto w = random_blocks(t, rows, k, rng);
    std::vector<uint8_t> packed(packed_kquant_bytes(t, rows, k));
    pack_kquant(t, w.data(), rows, k, packed.data(), 0);
    const auto wf = dequantize(t, w, rows, k);
    const int64_t group_bytes = k / 256 * packed_kquant_super_bytes(t);
    for (int64_t r = 0; r < 32; ++r) {
      const uint8_t* g = packed.data() + (r / 16) * group_bytes;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t sb = i / 256, j = (i % 256) / 32;
        const float d = f16_to_f32(packed_kquant_d(g, t, r % 16, sb));
        const int q = packed_kquant_q(t, g, r % 16, i);
        float v;
        if (t == DType::Q2_K) {  // sc and m per 16-block
          const int64_t s16 = (i % 256) / 16;
          v = d * float(packed_kquant_scale(t, g, r % 16, sb, s16)) * float(q) -
              f16_to_f32(packed_kquant_dmin(g, t, r % 16, sb)) * float(packed_kquant_min(g, t, r % 16, sb, s16));
        } else if (!has_q6k_form(t)) {
          v = d * float(packed_kquant_scale(t, g, r % 16, sb, j)) * float(q) -
              f16_to_f32(packed_kquant_dmin(g, t, r % 16, sb)) * float(packed_kquant_min(g, t, r % 16, sb, j));
        } else {
          v = d * float(packed_kquant_scale(t, g, r % 16, sb, (i % 256) / 16)) * float(q - kquant_q_offset(t));
        }
        if (r >= rows) {
          ASSERT_EQ(v, 0.0f) << "padding row " << r;
        } else {
          ASSERT_NEAR(v, wf[r * k + i], 1e-6 * std::fabs(wf[r * k + i]) + 1e-9) << ops::row(t).name << " r=" << r;
        }
      }
    }
    const double ratio = double(packed_kquant_super_bytes(t)) / (16.0 * ops::row(t).block_bytes);
    EXPECT_LE(ratio, 1.04) << ops::row(t).name;  // Q2_K 1, Q3_K 1.036, Q4_K 1.028
  }
}


// ggml's quantize_row_q8_K_ref (the activations ggml's k-quant dot products
// read: one fp32 scale per 256), dequantized: the alternative to ActBlock.
std::vector<float> q8k_roundtrip(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t b = 0; b < x.size(); b += 256) {
    float max = 0, amax = 0;
    for (size_t j = b; j < b + 256; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) continue;
    const float iscale = -127.f / max, d = 1 / iscale;
    for (size_t j = b; j < b + 256; ++j) y[j] = d * float(std::min(127, int(std::nearbyint(iscale * x[j]))));
  }
  return y;
}

// Issue 20 item 5: the k-quant kernels read ActBlock activations (Q8_0, one
// scale per 32) where ggml quantizes to Q8_K (one per 256). On random Q4_K and
// Q6_K rows against float activations, the kernel's result is closer to the
// exact float64 dot than a float64 dot with Q8_K activations, both for
// Gaussian activations and for activations with outlier channels (as LLM
// hidden states have). The figures are in docs/kernels.md.
TEST(KQuantKernels, ActBlockActivationsAreCloserToExactThanQ8K) {
  std::mt19937 rng(5);
  const int64_t m = 64, k = 4864;
  const Isa isa = runnable_isas().front();
  for (DType t : kTypes) {
    const auto w = random_blocks(t, m, k, rng);
    std::vector<uint8_t> packed(packed_kquant_bytes(t, m, k));
    pack_kquant(t, w.data(), m, k, packed.data(), 0);
    const auto wf = dequantize(t, w, m, k);
    for (bool outliers : {false, true}) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      double err_act = 0, err_q8k = 0, norm = 0;
      for (int trial = 0; trial < 16; ++trial) {
        std::vector<float> x(k);
        for (auto& v : x) v = normal(rng);
        // A few channels 30x larger, as in transformer hidden states.
        if (outliers)
          for (int64_t i = 7; i < k; i += 611) x[i] *= 30.0f;
        std::vector<ActBlock> xa(k / 32);
        quantize_act(x.data(), xa.data(), k);
        const auto xq = q8k_roundtrip(x);
        std::vector<float> y(m);
        MatMulArgs a{packed.data(), xa.data(), y.data(), nullptr, nullptr, k / 32, m, m, k / 32, m, 1};
        kernel(isa, KernelId::gemv(Epilogue::None, t)).fn()(&a);
        for (int64_t r = 0; r < m; ++r) {
          double exact = 0, q8k = 0;
          for (int64_t i = 0; i < k; ++i) {
            exact += double(wf[r * k + i]) * x[i];
            q8k += double(wf[r * k + i]) * xq[i];
          }
          err_act += (y[r] - exact) * (y[r] - exact);
          err_q8k += (q8k - exact) * (q8k - exact);
          norm += exact * exact;
        }
      }
      const double rel_act = std::sqrt(err_act / norm), rel_q8k = std::sqrt(err_q8k / norm);
      std::printf("%s, %s activations: rms error / rms dot: ActBlock kernel %.2e, Q8_K %.2e (%.2fx)\n",
                  ops::row(t).name, outliers ? "outlier" : "gaussian", rel_act, rel_q8k, rel_q8k / rel_act);
      EXPECT_LT(rel_act, rel_q8k) << ops::row(t).name << (outliers ? " outliers" : " gaussian");
    }
  }
}

}  // namespace
}  // namespace lumen::codegen
