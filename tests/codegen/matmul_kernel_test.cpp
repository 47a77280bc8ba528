// Generated matmul kernels against a plain scalar reference computed from
// the unpacked Q8_0 rows, for every ISA this CPU runs, every epilogue, odd
// shapes and 1-4 threads splitting rows in tasks. Outputs are poisoned first;
// the padding between output rows must stay poisoned.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/target/weight_formats.h"
#include "lumen/target/kernel_abi.h"
#include "support/tolerances.h"
#include "support/kernel_test.h"

namespace lumen::codegen {
namespace {

using test::kAllEpilogues;
using test::kPoisonBits;
using test::runnable_isas;

using program::Epilogue;
using program::KernelId;
using program::KernelKind;


// `kernel`, or when its GEMM tile does not fit `isa`, the tile with fewer
// tokens (then fewer rows) that does: the cases below name tiles for 32
// registers, and the schedule gives every ISA a tile it holds.
KernelId fitting(Isa isa, KernelId kernel) {
  while (!program::fits(kernel, isa)) {
    if (kernel.tile_n > 1) {
      --kernel.tile_n;
    } else {
      kernel.tile_m -= kPackRows;
    }
  }
  return kernel;
}

// `shape` overrides the register tile the kernel id implies (groups 0: none).
const JitKernel& kernel(Isa isa, const KernelId& id, const KernelShape& shape) {
  static std::map<std::tuple<Isa, KernelId, int64_t, int64_t, int64_t, int64_t, bool, bool>,
                  std::unique_ptr<JitKernel>>
      cache;
  auto& slot = cache[{isa, id, shape.groups, shape.tokens, shape.prefetch_bytes, shape.chunk_act_bytes,
                      shape.fp32_acc_in_memory, shape.prefetch_next_tile}];
  if (!slot) {
    slot = shape.groups == 0 ? std::make_unique<JitKernel>(isa, id)
                             : std::make_unique<JitKernel>(generate_matmul_kernel(isa, id, shape));
  }
  return *slot;
}

struct Problem {
  int64_t m = 16, k = 32, n = 1;
  Epilogue epilogue = Epilogue::None;
  KernelId kernel;
  int threads = 1;
  int64_t rows_per_task = 16;
  bool in_place_residual = false;  // residual == y
  bool exact_integers = false;     // all scales 1, small quants: results are exact integers
  KernelShape shape{0, 0, 0, 0, false};  // groups 0: the kernel's own shape
};

struct Data {
  std::vector<BlockQ8_0> weights;  // rows (2 * m for SiluMul: gate then up), k/32 blocks each
  std::vector<ActBlock> x;         // n tokens, x_stride blocks apart
  std::vector<float> bias, residual;
  int64_t x_stride = 0, y_stride = 0, r_stride = 0;
};

Data make_data(const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t kb = p.k / 32;
  const int64_t rows = p.epilogue == Epilogue::SiluMul ? 2 * p.m : p.m;
  Data d;
  d.weights.resize(rows * kb);
  for (auto& b : d.weights) {
    if (p.exact_integers) {
      b.d = f32_to_f16(1.0f);
      for (auto& q : b.qs) q = int8_t(int(rng() % 15) - 7);
    } else {
      b.d = f32_to_f16(0.0005f + 0.0001f * float(rng() % 100));
      for (auto& q : b.qs) q = int8_t(int(rng() % 256) - 128);  // -128 included
    }
  }
  d.x_stride = kb + 1;
  d.y_stride = p.m + 3;
  d.r_stride = p.m + 5;
  d.x.resize(p.n * d.x_stride);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(p.k);
  for (int64_t t = 0; t < p.n; ++t) {
    if (p.exact_integers) {
      for (int64_t b = 0; b < kb; ++b) {
        ActBlock& blk = d.x[t * d.x_stride + b];
        blk.d = 1.0f;
        int sum = 0;
        for (auto& q : blk.qs) {
          q = int8_t(int(rng() % 15) - 7);
          sum += q;
        }
        blk.sum = -128 * sum;
      }
    } else {
      for (auto& v : row) v = normal(rng);
      quantize_act(row.data(), d.x.data() + t * d.x_stride, p.k);
    }
  }
  d.bias.resize(p.m);
  for (auto& v : d.bias) v = normal(rng);
  d.residual.resize(p.n * d.r_stride);
  for (auto& v : d.residual) v = normal(rng);
  return d;
}

// Plain reference from the unpacked rows: value and a magnitude bound for
// the fp32 rounding (sum of |terms|).
struct Expected {
  float value;
  double magnitude;
};
Expected expected(const Problem& p, const Data& d, int64_t n, int64_t m, const float* residual) {
  const int64_t kb = p.k / 32;
  auto dot = [&](int64_t row, double& mag) {
    float acc = 0.0f;
    for (int64_t b = 0; b < kb; ++b) {
      const BlockQ8_0& w = d.weights[row * kb + b];
      const ActBlock& x = d.x[n * d.x_stride + b];
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) sum += int32_t(w.qs[i]) * int32_t(x.qs[i]);
      const float scale = f16_to_f32(w.d) * x.d;
      acc = std::fma(float(sum), scale, acc);
      mag += std::fabs(double(sum) * scale);
    }
    return acc;
  };
  double mag = 0;
  float v;
  if (p.epilogue == Epilogue::SiluMul) {
    double mag_g = 0, mag_u = 0;
    const float g = dot(m, mag_g), u = dot(p.m + m, mag_u);
    v = g / (1.0f + std::exp(-g)) * u;
    mag = std::fabs(v) * 8 + mag_g * std::fabs(u) + mag_u * std::fabs(g);
  } else {
    v = dot(m, mag);
  }
  if (p.epilogue == Epilogue::Bias || p.epilogue == Epilogue::BiasResidual) {
    v += d.bias[m];
    mag += std::fabs(d.bias[m]);
  }
  if (p.epilogue == Epilogue::Residual || p.epilogue == Epilogue::BiasResidual) {
    v += residual[n * d.r_stride + m];
    mag += std::fabs(residual[n * d.r_stride + m]);
  }
  return {v, mag};
}

std::vector<uint8_t> pack(Isa isa, const Problem& p, const Data& d) {
  const int64_t kb = p.k / 32;
  if (p.epilogue == Epilogue::SiluMul) {
    std::vector<uint8_t> packed(2 * packed_bytes(isa, p.m, p.k));
    pack_gate_up_rows(ops::DType::Q8_0, isa, d.weights.data(), d.weights.data() + p.m * kb, p.m, p.k, packed.data());
    return packed;
  }
  std::vector<uint8_t> packed(packed_bytes(isa, p.m, p.k));
  pack_q8_0(isa, d.weights.data(), p.m, p.k, packed.data(), 0);
  return packed;
}

// Runs the kernel (or the packed-format reference) with threads taking
// row tasks round-robin, as the runtime does.
void run(Isa isa, const Problem& p, const Data& d, const std::vector<uint8_t>& packed, float* y,
         const float* residual, bool use_reference) {
  const MatMulFn fn = use_reference ? nullptr : kernel(isa, p.kernel, p.shape).fn();
  const int64_t mult = p.epilogue == Epilogue::SiluMul ? 2 : 1;
  const int64_t group_bytes = (p.k / 32) * kPackedBlockBytes;
  const int64_t tasks = (p.m + p.rows_per_task - 1) / p.rows_per_task;
  auto worker = [&](int id) {
    for (int64_t task = id; task < tasks; task += p.threads) {
      const int64_t row0 = task * p.rows_per_task;
      MatMulArgs a{};
      a.w = packed.data() + (row0 / 16) * mult * group_bytes;
      a.x = d.x.data();
      a.y = y + row0;
      a.bias = d.bias.data() + row0;
      a.residual = residual + row0;
      a.x_stride = d.x_stride;
      a.y_stride = d.y_stride;
      a.r_stride = d.r_stride;
      a.k_blocks = p.k / 32;
      a.m_rows = std::min(p.rows_per_task, p.m - row0);
      a.n_tokens = p.n;
      if (use_reference) {
        reference_matmul(isa, p.epilogue, a);
      } else {
        fn(&a);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int id = 1; id < p.threads; ++id) pool.emplace_back(worker, id);
  worker(0);
  for (auto& t : pool) t.join();
}

void check(Isa isa, Problem p, uint32_t seed) {
  if (p.shape.groups == 0) p.kernel = fitting(isa, p.kernel);
  SCOPED_TRACE(testing::Message() << to_string(isa) << " " << to_string(p.kernel) << " M=" << p.m << " K=" << p.k
                                  << " N=" << p.n << " threads=" << p.threads << " rows/task=" << p.rows_per_task
                                  << (p.in_place_residual ? " in-place" : ""));
  const Data d = make_data(p, seed);
  const std::vector<uint8_t> packed = pack(isa, p, d);
  const float poison = std::bit_cast<float>(kPoisonBits);
  std::vector<Expected> want(p.n * p.m);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t m = 0; m < p.m; ++m) want[n * p.m + m] = expected(p, d, n, m, d.residual.data());
  }
  for (bool use_reference : {false, true}) {
    std::vector<float> y(p.n * d.y_stride, poison);
    Data in_place;  // residual == y: y starts as the residual, at y's stride
    const Data* view = &d;
    const float* residual = d.residual.data();
    if (p.in_place_residual) {
      in_place = d;
      in_place.r_stride = d.y_stride;
      for (int64_t n = 0; n < p.n; ++n) {
        for (int64_t m = 0; m < p.m; ++m) y[n * d.y_stride + m] = d.residual[n * d.r_stride + m];
      }
      view = &in_place;
      residual = y.data();
    }
    run(isa, p, *view, packed, y.data(), residual, use_reference);
    int failures = 0;
    for (int64_t n = 0; n < p.n && failures < 5; ++n) {
      for (int64_t m = 0; m < d.y_stride && failures < 5; ++m) {
        const float got = y[n * d.y_stride + m];
        if (m >= p.m) {
          if (std::bit_cast<uint32_t>(got) != kPoisonBits) {
            ADD_FAILURE() << "wrote past m_rows at n=" << n << " m=" << m;
            ++failures;
          }
          continue;
        }
        const Expected& w = want[n * p.m + m];
        const double tol = p.exact_integers ? 0.0 : tolerance::kFp32ReorderRelative * w.magnitude + tolerance::kZeroFloor;
        if (!(std::fabs(double(got) - double(w.value)) <= tol)) {
          ADD_FAILURE() << (use_reference ? "reference" : "kernel") << " n=" << n << " m=" << m << " got " << got
                        << " want " << w.value << " tol " << tol;
          ++failures;
        }
      }
    }
    // The packed-format reference is checked on the small shapes only: it is slow.
    if (p.exact_integers || p.m * p.k * p.n > (1 << 22)) break;
  }
}

KernelId gemm_kernel(Epilogue e, int variant) {
  static const int64_t tiles[][2] = {{16, 4}, {48, 4}, {32, 6}, {64, 8}, {16, 1}, {48, 3}, {32, 2}};
  return KernelId::gemm(e, tiles[variant % 7][0], tiles[variant % 7][1]);
}

TEST(MatMulKernels, SmallShapesEveryIsaEpilogueAndThreadCount) {
  int variant = 0;
  for (Isa isa : runnable_isas()) {
    for (Epilogue e : kAllEpilogues) {
      for (int64_t k : {32, 352, 896}) {
        for (int64_t m : {1, 3, 17, 33}) {
          for (int64_t n : {1, 2, 3, 7, 8, 16, 31, 32, 64, 67}) {
            ++variant;
            Problem p;
            p.m = m;
            p.k = k;
            p.n = n;
            p.epilogue = e;
            p.threads = 1 + variant % 4;
            p.rows_per_task = variant % 3 == 0 ? 32 : 16;
            p.kernel = n <= 3 && variant % 2 == 0 ? KernelId::gemv(e) : gemm_kernel(e, variant);
            check(isa, p, uint32_t(variant));
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(MatMulKernels, IntegerPartsAreExact) {
  for (Isa isa : runnable_isas()) {
    for (const KernelId& id : {KernelId::gemv(Epilogue::None), KernelId::gemm(Epilogue::None, 32, 4),
                               KernelId::gemm(Epilogue::None, 16, 8)}) {
      for (int64_t k : {32, 352, 4864}) {
        Problem p;
        p.m = 33;
        p.k = k;
        p.n = id.kind == KernelKind::Gemv ? 1 : 11;
        p.kernel = id;
        p.exact_integers = true;
        p.threads = 2;
        p.rows_per_task = 32;
        check(isa, p, uint32_t(k));
      }
    }
  }
}

TEST(MatMulKernels, QwenShapesGemv) {
  int variant = 0;
  for (Isa isa : runnable_isas()) {
    for (auto [m, k] : {std::pair<int64_t, int64_t>{896, 896}, {4864, 896}, {896, 4864}, {4864, 4864}}) {
      for (Epilogue e : kAllEpilogues) {
        ++variant;
        if (m == 4864 && k == 4864 && variant % 3 != 0) continue;
        Problem p;
        p.m = m;
        p.k = k;
        p.epilogue = e;
        p.kernel = KernelId::gemv(e);
        p.threads = 1 + variant % 4;
        p.rows_per_task = 64;
        check(isa, p, uint32_t(variant));
      }
    }
  }
}

TEST(MatMulKernels, LargeBatches) {
  const struct {
    int64_t m, k, n;
    Epilogue e;
    int64_t tile_m, tile_n;
  } cases[] = {
      {896, 896, 64, Epilogue::BiasResidual, 32, 6}, {33, 4864, 512, Epilogue::None, 16, 8},
      {4864, 32, 512, Epilogue::SiluMul, 32, 4},      {896, 352, 67, Epilogue::Residual, 64, 8},
      {17, 4864, 512, Epilogue::SiluMul, 16, 4},     {97, 4864, 131, Epilogue::Residual, 48, 4},
  };
  int variant = 0;
  for (Isa isa : runnable_isas()) {
    for (const auto& c : cases) {
      ++variant;
      Problem p;
      p.m = c.m;
      p.k = c.k;
      p.n = c.n;
      p.epilogue = c.e;
      p.kernel = KernelId::gemm(c.e, c.tile_m, c.tile_n);
      p.threads = 1 + variant % 4;
      p.rows_per_task = 64;
      check(isa, p, uint32_t(variant));
    }
  }
}

TEST(MatMulKernels, NonDefaultShapes) {
  // The benchmark's knobs: 8 or 1 GEMV groups, software prefetch (ahead or of
  // the next tile), tiny and no token chunks.
  const struct {
    KernelId kernel;
    KernelShape shape;
  } cases[] = {
      {KernelId::gemv(Epilogue::Bias), {8, 1, 1088, 256 << 10, false}},
      {KernelId::gemv(Epilogue::Residual), {4, 1, 0, 256 << 10, false}},  // no prefetch (cpu_tune.h)
      {KernelId::gemv(Epilogue::SiluMul), {3, 1, 544, 256 << 10, false}},
      {KernelId::gemv(Epilogue::Residual), {4, 1, 0, 256 << 10, false, true}},  // next tile (cpu_tune.h)
      {KernelId::gemv(Epilogue::Residual), {1, 1, 0, 256 << 10, false}},        // one group (cpu_tune.h)
      {KernelId::gemv(Epilogue::SiluMul), {1, 1, 0, 256 << 10, false, true}},   // one pair, next tile
      {KernelId::gemv(Epilogue::SiluMul), {1, 1, 0, 256 << 10, false, true, true}},  // gate, then up
      {KernelId::gemv(Epilogue::SiluMul), {2, 1, 544, 256 << 10, false, false, true}},
      {KernelId::gemm(Epilogue::Residual, 16, 8), {1, 8, 0, 0, false}},
      {KernelId::gemm(Epilogue::None, 32, 4), {2, 4, 2176, 1, false}},
  };
  for (Isa isa : runnable_isas()) {
    for (const auto& c : cases) {
      Problem p;
      p.kernel = fitting(isa, c.kernel);
      p.shape = c.shape;
      p.epilogue = c.kernel.epilogue;
      if (is_ymm_isa(isa)) p.shape = kernel_shape(isa, p.kernel);  // 16 registers only
      p.shape.prefetch_bytes = c.shape.prefetch_bytes;
      p.shape.prefetch_next_tile = c.shape.prefetch_next_tile;
      p.shape.chunk_act_bytes = c.shape.chunk_act_bytes;
      p.m = 150;
      p.k = 4864;
      p.n = p.kernel.kind == KernelKind::Gemv ? 2 : 45;
      p.threads = 2;
      p.rows_per_task = 128;
      check(isa, p, 3);
    }
  }
}

TEST(MatMulKernels, TilesWithFp32AccumulatorsInRegistersOrMemory) {
  // Every tile of the 16-register ISAs, and the zmm tiles up to 8 tokens, with
  // the fp32 accumulators in registers or in stack slots: odd block count,
  // rows and tokens.
  for (Isa isa : runnable_isas()) {
    for (Epilogue e : {Epilogue::None, Epilogue::SiluMul, Epilogue::BiasResidual}) {
      const int64_t mult = e == Epilogue::SiluMul ? 2 : 1;
      for (bool in_memory : {false, true}) {
        for (int64_t groups = 1; groups * mult <= 8; ++groups) {
          for (int64_t tokens = 1; tokens <= 8; ++tokens) {
            if (!tile_fits(isa, groups * mult, tokens, in_memory)) continue;
            if (!is_ymm_isa(isa) && groups * mult > 4) continue;  // zmm: up to 4 packed groups, as the schedule's tiles
            Problem p;
            p.epilogue = e;
            p.kernel = tokens == 1 ? KernelId::gemv(e) : KernelId::gemm(e, 16 * groups, tokens);
            p.shape = KernelShape{groups, tokens, tokens == 1 ? 1088 : 0, 256 << 10, in_memory};
            p.m = 75;
            p.k = 352;
            p.n = 2 * tokens + 1;
            p.threads = 2;
            p.rows_per_task = 48;
            SCOPED_TRACE(std::string(to_string(isa)) + " " + to_string(p.kernel) + (in_memory ? " fp32 in memory" : "") +
                         " groups " + std::to_string(groups) + " tokens " + std::to_string(tokens));
            check(isa, p, uint32_t(groups * 10 + tokens));
          }
        }
      }
    }
  }
}

TEST(MatMulKernels, BatchKernelsOfEveryEpilogueForAnyTokenCount) {
  // The runtime calls batch kernels for 2-8 tokens; any count must work,
  // with every tuning's prefetch.
  for (Isa isa : runnable_isas()) {
    for (Epilogue e : {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual,
                       Epilogue::SiluMul}) {
      for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 13}) {
        const CpuTune tune = kCpuTunes[size_t(n) % std::size(kCpuTunes)];
        Problem p;
        p.epilogue = e;
        p.kernel = KernelId::batch(e);
        p.shape = kernel_shape(isa, p.kernel, tune);
        p.m = n % 2 ? 150 : 67;
        p.k = n % 3 ? 352 : 896;
        p.n = n;
        p.threads = 1 + int(n % 3);
        p.rows_per_task = 64;
        SCOPED_TRACE(std::string(to_string(isa)) + " " + to_string(p.kernel) + " " + to_string(tune) + " n " +
                     std::to_string(n));
        check(isa, p, uint32_t(n * 7 + int(e)));
      }
    }
  }
}

TEST(MatMulKernels, ResidualMayBeTheOutput) {
  for (Isa isa : runnable_isas()) {
    for (const KernelId& id : {KernelId::gemv(Epilogue::Residual), KernelId::gemm(Epilogue::BiasResidual, 32, 4)}) {
      Problem p;
      p.m = 40;
      p.k = 96;
      p.n = id.kind == KernelKind::Gemv ? 1 : 9;
      p.epilogue = id.epilogue;
      p.kernel = id;
      p.in_place_residual = true;
      p.threads = 3;
      check(isa, p, 99);
    }
  }
}

TEST(MatMulKernels, SiluOfExtremeGates) {
  // Large |gate| exercises the exp clamp: silu(g) -> g for g >> 0, -> 0 for g << 0.
  for (Isa isa : runnable_isas()) {
    Problem p;
    p.m = 16;
    p.k = 32;
    p.epilogue = Epilogue::SiluMul;
    p.kernel = KernelId::gemv(Epilogue::SiluMul);
    Data d = make_data(p, 5);
    for (int64_t r = 0; r < 2 * p.m; ++r) {
      d.weights[r].d = f32_to_f16(r < p.m ? (r % 2 ? 0.9f : -0.9f) * float(1 + r) : 0.01f);
    }
    const auto packed = pack(isa, p, d);
    std::vector<float> y(d.y_stride, 0.0f);
    run(isa, p, d, packed, y.data(), d.residual.data(), false);
    for (int64_t m = 0; m < p.m; ++m) {
      const Expected want = expected(p, d, 0, m, d.residual.data());
      EXPECT_NEAR(y[m], want.value, tolerance::kFp32ReorderRelative * want.magnitude + tolerance::kZeroFloor) << to_string(isa) << " m=" << m;
      EXPECT_TRUE(std::isfinite(y[m]));
    }
  }
}

}  // namespace
}  // namespace lumen::codegen

namespace lumen::codegen {
namespace {

// silu(g) * 1 for gates spread over [-80, 90]: gate = fp16 scale x 1 exactly,
// so the error is the epilogue's alone, measured in float ulps of the true
// value. (Below -80 the result is under 1e-33 and the exp clamp takes over.)
TEST(MatMulKernels, SiluIsAccurateToAFewUlp) {
  const int64_t rows = 4096, k = 32;
  std::vector<BlockQ8_0> gate(rows), up(rows);
  std::vector<float> gates(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float g = -80.0f + 170.0f * float(r) / float(rows - 1);
    gate[r] = BlockQ8_0{f32_to_f16(g), {1}};
    up[r] = BlockQ8_0{f32_to_f16(1.0f), {1}};
    gates[r] = f16_to_f32(gate[r].d);
  }
  ActBlock x{1.0f, -128, {1}};
  for (Isa isa : runnable_isas()) {
    std::vector<uint8_t> packed(2 * packed_bytes(isa, rows, k));
    pack_gate_up_rows(ops::DType::Q8_0, isa, gate.data(), up.data(), rows, k, packed.data());
    std::vector<float> y(rows);
    MatMulArgs a{};
    a.w = packed.data();
    a.x = &x;
    a.y = y.data();
    a.x_stride = 1;
    a.y_stride = rows;
    a.k_blocks = 1;
    a.m_rows = rows;
    a.n_tokens = 1;
    kernel(isa, program::KernelId::gemv(program::Epilogue::SiluMul), KernelShape{0, 0, 0, 0, false}).fn()(&a);
    double worst_ulps = 0;
    float worst_gate = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double g = gates[r];
      const double want = g / (1.0 + std::exp(-g));
      const double ulp = std::nextafter(float(std::fabs(want)), INFINITY) - float(std::fabs(want));
      const double ulps = std::fabs(double(y[r]) - want) / ulp;
      if (ulps > worst_ulps) {
        worst_ulps = ulps;
        worst_gate = gates[r];
      }
    }
    EXPECT_LT(worst_ulps, tolerance::kSiluUlps) << to_string(isa);
    RecordProperty(std::string("worst_ulps_") + to_string(isa), std::to_string(worst_ulps));
    std::printf("silu max error %s: %.2f ulp (at gate %g)\n", to_string(isa), worst_ulps, double(worst_gate));
  }
}

}  // namespace
}  // namespace lumen::codegen
