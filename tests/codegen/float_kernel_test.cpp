// The float-weight (F16, BF16, F32) GEMV, batch and prefill GEMM kernels
// against their scalar oracle (bit for bit: the same fp32 FMAs in the same
// order) and a float64 dot, on random weights, for every ISA this CPU runs and
// every epilogue, with poisoned outputs and strides wider than the rows; every
// kernel's row of each token equals the GEMV's bit for bit.
#include <gtest/gtest.h>

#include <bit>
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
#include "lumen/codegen/float_kernel.h"
#include "lumen/common/numeric.h"
#include "lumen/passes/passes.h"
#include "lumen/target/weight_formats.h"
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

const DType kFormats[] = {DType::F16, DType::BF16, DType::F32};

// bf16 by round to nearest even (as ggml's fp32 -> bf16).
uint16_t to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// rows x k GGUF elements of `format`, and their values as floats.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
Matrix random_matrix(DType format, int64_t rows, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  Matrix w;
  w.bytes.resize(size_t(rows * k * float_element_bytes(format)));
  w.values.resize(size_t(rows * k));
  for (int64_t i = 0; i < rows * k; ++i) {
    const float v = normal(rng);
    if (format == DType::F32) {
      std::memcpy(w.bytes.data() + 4 * i, &v, 4);
      w.values[i] = v;
      continue;
    }
    const uint16_t h = format == DType::F16 ? f32_to_f16(v) : to_bf16(v);
    std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    w.values[i] = format == DType::F16 ? f16_to_f32(h) : from_bf16(h);
  }
  return w;
}

struct Case {
  DType format;
  int64_t m, k;
  Epilogue epi;
  int64_t max_n;
  int64_t x_stride() const { return k + 7; }
  int64_t y_stride() const { return m + 5; }
  int64_t r_stride() const { return m + 2; }
};

struct Data {
  std::vector<uint8_t> packed;
  std::vector<float> x, bias, residual;
  std::vector<double> exact, mag;  // float64 dot and sum |w x| per (token, packed row: gate then up)
  std::vector<float> oracle;       // reference_float_matmul, y layout
};

Data make_data(const Case& c, std::mt19937& rng) {
  Data d;
  const bool silu = c.epi == Epilogue::SiluMul;
  const Matrix w = random_matrix(c.format, c.m, c.k, rng);
  const Matrix u = silu ? random_matrix(c.format, c.m, c.k, rng) : Matrix{};
  d.packed.resize(size_t((silu ? 2 : 1) * packed_bytes(c.format, c.m, c.k)));
  if (silu) {
    pack_gate_up_rows(c.format, Isa::Avx2, w.bytes.data(), u.bytes.data(), c.m, c.k, d.packed.data());
  } else {
    pack_rows(c.format, Isa::Avx2, w.bytes.data(), c.m, c.k, d.packed.data(), 0);  // the layout of every ISA
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  d.x.assign(size_t(c.max_n * c.x_stride()), std::bit_cast<float>(kPoisonBits));  // the gaps are never read
  for (int64_t n = 0; n < c.max_n; ++n)
    for (int64_t i = 0; i < c.k; ++i) d.x[n * c.x_stride() + i] = normal(rng);
  d.bias.resize(size_t(c.m));
  d.residual.resize(size_t(c.max_n * c.r_stride()));
  for (auto& v : d.bias) v = normal(rng);
  for (auto& v : d.residual) v = normal(rng);
  const int64_t rows = c.m * (silu ? 2 : 1);
  d.exact.resize(size_t(c.max_n * rows));
  d.mag.resize(d.exact.size());
  for (int64_t n = 0; n < c.max_n; ++n) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = r < c.m ? w.values.data() + r * c.k : u.values.data() + (r - c.m) * c.k;
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < c.k; ++i) {
        acc += double(row[i]) * d.x[n * c.x_stride() + i];
        mag += std::fabs(double(row[i]) * d.x[n * c.x_stride() + i]);
      }
      d.exact[n * rows + r] = acc;
      d.mag[n * rows + r] = mag;
    }
  }
  d.oracle.assign(size_t(c.max_n * c.y_stride()), std::bit_cast<float>(kPoisonBits));
  MatMulArgs a{};
  a.w = d.packed.data();
  a.x_f32 = d.x.data();
  a.y = d.oracle.data();
  a.bias = d.bias.data();
  a.residual = d.residual.data();
  a.x_stride = c.x_stride();
  a.y_stride = c.y_stride();
  a.r_stride = c.r_stride();
  a.k_blocks = c.k / 32;
  a.m_rows = c.m;
  a.n_tokens = c.max_n;
  reference_float_matmul(c.format, c.epi, a);
  return d;
}

std::vector<float> run(Isa isa, const Case& c, const Data& d, const KernelId& id, int64_t n0, int64_t n) {
  std::vector<float> y(size_t(c.max_n * c.y_stride()), std::bit_cast<float>(kPoisonBits));
  MatMulArgs a{};
  a.w = d.packed.data();
  a.x_f32 = d.x.data() + n0 * c.x_stride();
  a.y = y.data() + n0 * c.y_stride();
  a.bias = d.bias.data();
  a.residual = d.residual.data() + n0 * c.r_stride();
  a.x_stride = c.x_stride();
  a.y_stride = c.y_stride();
  a.r_stride = c.r_stride();
  a.k_blocks = c.k / 32;
  a.m_rows = c.m;
  a.n_tokens = n;
  kernel(isa, id).fn()(&a);
  return y;
}

// The float64 value of (token n, row m) after the epilogue, and its tolerance:
// a sequential fp32 sum of k products is within k * 2^-24 * sum |w x|.
std::pair<double, double> expected(const Case& c, const Data& d, int64_t n, int64_t m) {
  const bool silu = c.epi == Epilogue::SiluMul;
  const int64_t base = n * c.m * (silu ? 2 : 1);
  auto bound = [&](int64_t r) { return double(c.k) * 6e-8 * d.mag[base + r] + 1e-6; };
  double v = d.exact[base + m], tol = bound(m);
  if (silu) {
    const double g = v, up = d.exact[base + c.m + m];
    const double sg = 1.0 / (1.0 + std::exp(-g));
    v = g * sg * up;
    tol = tol * std::fabs(sg * (1 + g * (1 - sg)) * up) + bound(c.m + m) * std::fabs(g * sg) + 1e-6;
  }
  if (c.epi == Epilogue::Bias || c.epi == Epilogue::BiasResidual) v += d.bias[m];
  if (c.epi == Epilogue::Residual || c.epi == Epilogue::BiasResidual) v += d.residual[n * c.r_stride() + m];
  return {v, tol + 1e-6 * std::fabs(v)};
}

void check(Isa isa, const Case& c, const Data& d, const KernelId& id, int64_t n_tokens, const std::vector<float>& y) {
  SCOPED_TRACE(std::string(to_string(isa)) + " " + program::to_string(id) + " m=" + std::to_string(c.m) +
               " k=" + std::to_string(c.k) + " n=" + std::to_string(n_tokens));
  int failures = 0;
  for (int64_t n = 0; n < c.max_n; ++n) {
    for (int64_t m = 0; m < c.y_stride(); ++m) {
      const float got = y[n * c.y_stride() + m];
      if (n >= n_tokens || m >= c.m) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got), kPoisonBits) << "write outside the output at n=" << n << " m=" << m;
        continue;
      }
      const float want = d.oracle[n * c.y_stride() + m];
      if (c.epi == Epilogue::SiluMul) {
        // The kernels' exp is within a few ulp of std::exp.
        EXPECT_NEAR(got, want, 1e-5 * std::fabs(want) + 1e-7) << "oracle at n=" << n << " m=" << m;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "oracle at n=" << n << " m=" << m << ": " << got << " vs " << want;
      }
      const auto [v, tol] = expected(c, d, n, m);
      EXPECT_NEAR(got, v, tol) << "float64 dot at n=" << n << " m=" << m;
      if (::testing::Test::HasFailure() && ++failures > 5) return;
    }
  }
}

// Beside the GEMV: the batch kernel, the schedule's prefill GEMM and a
// one-group GEMM of up to 3 tokens (edge bodies of both kinds).
std::vector<KernelId> kernels_under_test(Isa isa, const Case& c) {
  std::vector<KernelId> ids = {KernelId::batch(c.epi, c.format), passes::prefill_kernel(isa, c.epi, c.format)};
  for (int64_t tokens : {3, 2, 1}) {
    if (program::fits(KernelId::gemm(c.epi, 16, tokens, c.format), isa)) {
      ids.push_back(KernelId::gemm(c.epi, 16, tokens, c.format));
      break;
    }
  }
  return ids;
}

void run_case(const Case& c, std::mt19937& rng, const std::vector<int64_t>& ns) {
  const Data d = make_data(c, rng);
  for (Isa isa : runnable_isas()) {
    const KernelId gemv = KernelId::gemv(c.epi, c.format);
    std::vector<float> per_token(size_t(c.max_n * c.y_stride()), std::bit_cast<float>(kPoisonBits));
    for (int64_t n = 0; n < c.max_n; ++n) {
      const auto y = run(isa, c, d, gemv, n, 1);
      std::copy_n(y.begin() + n * c.y_stride(), c.y_stride(), per_token.begin() + n * c.y_stride());
    }
    check(isa, c, d, gemv, c.max_n, per_token);
    for (int64_t n : ns) {
      for (const KernelId& id : kernels_under_test(isa, c)) {
        const auto y = run(isa, c, d, id, 0, n);
        check(isa, c, d, id, n, y);
        // Batch invariance: each token's row is the GEMV's, bit for bit.
        for (int64_t t = 0; t < n; ++t) {
          ASSERT_EQ(0, std::memcmp(y.data() + t * c.y_stride(), per_token.data() + t * c.y_stride(),
                                   size_t(c.m) * sizeof(float)))
              << to_string(isa) << " " << program::to_string(id) << " n=" << n << ": token " << t
              << " differs from the GEMV";
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(FloatKernels, EveryEpilogueShapeAndTokenCount) {
  std::mt19937 rng(31);
  const std::vector<int64_t> small_n = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13};
  for (DType f : kFormats) {
    for (Epilogue e : kAllEpilogues) {
      for (const auto& [m, k] : {std::pair<int64_t, int64_t>{1, 32}, {3, 96}, {17, 896}, {33, 96}, {80, 32}}) {
        run_case(Case{f, m, k, e, 13}, rng, small_n);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// Prefill token counts (several token tiles and chunks, odd remainders) and a
// long row (Qwen's 4864-wide down projection).
TEST(FloatKernels, PrefillTokenCountsAndLongRows) {
  std::mt19937 rng(32);
  for (DType f : kFormats) {
    for (Epilogue e : {Epilogue::None, Epilogue::BiasResidual, Epilogue::SiluMul}) {
      run_case(Case{f, 33, 896, e, 67}, rng, {64, 67});
      run_case(Case{f, 17, 4864, e, 9}, rng, {9});
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(FloatKernels, PackedLayoutIsTheRowsAtNoExtraBytes) {
  std::mt19937 rng(33);
  for (DType f : kFormats) {
    const int64_t rows = 19, k = 64;
    const Matrix w = random_matrix(f, rows, k, rng);
    std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(f, rows, k)));
    pack_rows(f, Isa::Avx512, w.bytes.data(), rows, k, packed.data(), 0);
    const int64_t group_bytes = packed_bytes(f, 16, k);
    EXPECT_EQ(group_bytes, ops::row_bytes(f, k) * 16) << "a 16-row group costs what GGUF's rows do";
    for (int64_t r = 0; r < 32; ++r) {
      for (int64_t c = 0; c < k; ++c) {
        const float v = packed_float_weight(f, packed.data() + r / 16 * group_bytes, r % 16, c);
        const float want = r < rows ? w.values[r * k + c] : 0.0f;
        ASSERT_EQ(std::bit_cast<uint32_t>(v), std::bit_cast<uint32_t>(want)) << ops::to_string(f) << " r=" << r;
      }
    }
  }
  std::vector<uint8_t> out(4096);
  const std::vector<uint8_t> src(4096);
  EXPECT_THROW(pack_float(DType::Q8_0, src.data(), 1, 32, out.data(), 0), std::invalid_argument);
  EXPECT_THROW(pack_float(DType::F16, src.data(), 1, 48, out.data(), 0), std::invalid_argument);
  EXPECT_THROW((void)packed_bytes(DType::F16, 1, 48), std::invalid_argument);
}

// The type rule, stated in weight_formats.h: float formats read f32, the
// others act_q8; under act_q8 (a matmul with quantized layers too) float
// weights run as Q8_0, other types in their own formats.
TEST(FloatKernels, TypeRuleOfTheMatmulInput) {
  for (DType f : kFormats) {
    EXPECT_EQ(packed_format(f, Isa::Avx2), f);
    EXPECT_EQ(matmul_input_dtype(f), DType::F32);
    EXPECT_EQ(packed_format(f, Isa::Avx2, DType::F32), f);
    EXPECT_EQ(packed_format(f, Isa::Avx2, DType::ActQ8), DType::Q8_0);
  }
  // Every quantized weight type runs in its own format, under act_q8 too:
  // float weights under act_q8 are the one Q8_0 fallback left.
  for (const ops::DTypeRow& row : ops::kDTypes) {
    if (!row.weight || is_float_format(row.id)) continue;
    EXPECT_EQ(packed_format(row.id, Isa::Avx2), row.id) << row.name;
    EXPECT_EQ(matmul_input_dtype(row.id), DType::ActQ8) << row.name;
    EXPECT_EQ(packed_format(row.id, Isa::Avx2, DType::ActQ8), row.id) << row.name;
  }
}

// The type rule (weight_formats.h matmul_input_dtype): the kernels read the
// f32 activations, not ggml's (fp16-rounded for F16 weights, bf16 for BF16),
// because that is closer to a float64 dot of the same weights: measured here
// on Gaussian activations and activations with outlier channels (the figures
// are in docs/kernels.md).
TEST(FloatKernels, F32ActivationsAreCloserToExactThanGgmlsRounded) {
  std::mt19937 rng(34);
  const int64_t m = 64, k = 4864;
  const Isa isa = runnable_isas().front();
  for (DType f : {DType::F16, DType::BF16}) {
    const Matrix w = random_matrix(f, m, k, rng);
    std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(f, m, k)));
    pack_rows(f, isa, w.bytes.data(), m, k, packed.data(), 0);
    for (bool outliers : {false, true}) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      double err_f32 = 0, err_ggml = 0, norm = 0;
      for (int trial = 0; trial < 8; ++trial) {
        std::vector<float> x(static_cast<size_t>(k));
        for (auto& v : x) v = normal(rng);
        if (outliers)
          for (int64_t i = 7; i < k; i += 611) x[i] *= 30.0f;
        std::vector<float> y(static_cast<size_t>(m));
        MatMulArgs a{};
        a.w = packed.data();
        a.x_f32 = x.data();
        a.y = y.data();
        a.x_stride = k;
        a.y_stride = m;
        a.k_blocks = k / 32;
        a.m_rows = m;
        a.n_tokens = 1;
        kernel(isa, KernelId::gemv(Epilogue::None, f)).fn()(&a);
        for (int64_t r = 0; r < m; ++r) {
          double exact = 0, ggml = 0;
          for (int64_t i = 0; i < k; ++i) {
            const double wv = w.values[r * k + i];
            exact += wv * x[i];
            // ggml's rounded activation, summed exactly (its own fp32 sum only adds error).
            ggml += wv * (f == DType::F16 ? round_to_f16(x[i]) : from_bf16(to_bf16(x[i])));
          }
          err_f32 += (y[r] - exact) * (y[r] - exact);
          err_ggml += (ggml - exact) * (ggml - exact);
          norm += exact * exact;
        }
      }
      const double rel_f32 = std::sqrt(err_f32 / norm), rel_ggml = std::sqrt(err_ggml / norm);
      std::printf("%s, %s activations: rms error / rms dot: f32 kernel %.2e, ggml's %s activations %.2e (%.0fx)\n",
                  ops::to_string(f), outliers ? "outlier" : "gaussian", rel_f32, ops::to_string(f), rel_ggml,
                  rel_ggml / rel_f32);
      EXPECT_LT(rel_f32, rel_ggml) << ops::to_string(f) << (outliers ? " outliers" : " gaussian");
    }
  }
}

}  // namespace
}  // namespace lumen::codegen
