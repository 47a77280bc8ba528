// Kernel benchmark: GEMV GB/s (weights streamed from memory, never from
// cache), GEMM GOP/s and per-token cost relative to the GEMV, at the
// Qwen2.5-0.5B matmul shapes, with 1 and 2 threads splitting rows as the
// runtime does; the measured read bandwidth is printed beside them. With
// --format q4_0|q5_0 the GEMV streams that packed format, and the GEMM columns
// run the Q8_0 GEMM on the rows converted from it, with the conversion's
// share of the prefill time. With --format f16|bf16|f32 it prints the float
// kernels' table: GEMV GB/s, the batch kernel at N = 8, prefill tiles.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <cstring>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/codegen/kquant_kernel.h"
#include "lumen/passes/passes.h"
#include "lumen/target/membw.h"
#include "lumen/target/kernel_abi.h"
#include "lumen/target/packed_kquant.h"
#include "lumen/target/page_buffer.h"
#include "lumen/quant/blocks.h"
#include "lumen/target/weight_formats.h"

namespace {

using namespace lumen;
using lumen::codegen::JitKernel;
using lumen::codegen::KernelShape;
using lumen::program::KernelId;
using program::Epilogue;

// Persistent spinning workers: a GEMV of a small matrix takes tens of
// microseconds, less than starting a thread.
class SpinPool {
 public:
  explicit SpinPool(int threads) : threads_(threads) {
    for (int id = 1; id < threads; ++id) {
      workers_.emplace_back([this, id] {
        uint64_t seen = 0;
        for (;;) {
          uint64_t gen;
          for (int spins = 0; (gen = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
            backoff(spins);
          }
          seen = gen;
          if (stop_) return;
          (*job_)(id);
          done_.fetch_add(1, std::memory_order_acq_rel);
        }
      });
    }
  }
  ~SpinPool() {
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_acq_rel);
    for (auto& w : workers_) w.join();
  }
  int threads() const { return threads_; }
  void run(const std::function<void(int)>& job) {
    job_ = &job;
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    job(0);
    for (int spins = 0; done_.load(std::memory_order_acquire) != threads_ - 1; ++spins) backoff(spins);
  }

 private:
  // Spin briefly, then yield: on an oversubscribed machine the thread we wait
  // for may need this core.
  static void backoff(int spins) {
    if (spins < 4096) {
      __builtin_ia32_pause();
    } else {
      std::this_thread::yield();
    }
  }
  int threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
};

struct Shape {
  const char* name;
  int64_t m, k;  // output rows (gate rows for gate.up), row length
  Epilogue epilogue;
};

// Weight copies cycled so that every call reads them from memory; one
// mapping on huge pages, as the runtime holds the packed weights.
struct Weights {
  PageBuffer pages;
  int64_t copies = 0;
  int64_t stride = 0;  // bytes from one copy to the next
  const uint8_t* copy(int64_t i) const { return pages.data() + (i % copies) * stride; }
  int64_t bytes = 0;  // one copy
  int64_t block_bytes = kPackedBlockBytes;  // packed_block_bytes(format) of a 32-wide format
  int64_t group_bytes = 0;  // one packed 16-row group (one 32-block or k-quant super-block column)
  double pack_gbs = 0;  // load-time repack speed, best copy
};

// k-quant weights (--format q2_k, q3_k, q4_k, q5_k, q6_k): random blocks with a finite scale,
// packed as the k-quant kernels read them.
Weights make_kquant_weights(ops::DType t, const Shape& s, int64_t min_total_bytes) {
  const int64_t rows = s.epilogue == Epilogue::SiluMul ? 2 * s.m : s.m;
  const int64_t block = ops::row(t).block_bytes, row_bytes = s.k / 256 * block;
  std::mt19937 rng(1);
  std::vector<uint8_t> src(rows * row_bytes);
  for (auto& b : src) b = uint8_t(rng());
  // d (and dmin) open a Q4_K or Q5_K block and close a Q2_K (d, dmin), Q3_K or Q6_K one.
  const int64_t d_off = t == ops::DType::Q2_K ? block - 4 : has_q6k_form(t) ? block - 2 : 0;
  for (int64_t i = 0; i < int64_t(src.size()); i += block) {
    const uint16_t d = f32_to_f16(0.001f);
    std::memcpy(&src[i + d_off], &d, 2);
    if (!has_q6k_form(t)) std::memcpy(&src[i + d_off + 2], &d, 2);
  }
  Weights w;
  w.bytes = packed_kquant_bytes(t, rows, s.k);
  w.group_bytes = s.k / 256 * packed_kquant_super_bytes(t);
  w.copies = std::max<int64_t>(1, (min_total_bytes + w.bytes - 1) / w.bytes);
  w.stride = (w.bytes + 4095) / 4096 * 4096;
  w.pages = PageBuffer(static_cast<size_t>(w.copies * w.stride), PageBuffer::Pages::Huge);
  for (int64_t c = 0; c < w.copies; ++c) {
    for (size_t i = 0; i < src.size(); i += 4096) src[i] ^= uint8_t(rng());
    uint8_t* packed = w.pages.data() + c * w.stride;
    std::memset(packed, 0, static_cast<size_t>(w.bytes));
    const auto t0 = std::chrono::steady_clock::now();
    if (s.epilogue == Epilogue::SiluMul) {
      pack_gate_up_rows(t, Isa::Avx2, src.data(), src.data() + s.m * row_bytes, s.m, s.k, packed);
    } else {
      pack_kquant(t, src.data(), rows, s.k, packed, 0);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.pack_gbs = std::max(w.pack_gbs, double(w.bytes) / secs / 1e9);
  }
  return w;
}

// Packs random rows of GGUF `format` blocks (packed_4bit.h's types): gate and up
// alternating per group for SiluMul.
void pack_4bit(ops::DType format, const std::vector<uint8_t>& src, const Shape& s, uint8_t* packed) {
  // The 4-bit layouts are the same on every ISA.
  if (s.epilogue == Epilogue::SiluMul) {
    pack_gate_up_rows(format, Isa::Avx2, src.data(), src.data() + s.m * ops::row_bytes(format, s.k), s.m, s.k, packed);
  } else {
    pack_rows(format, Isa::Avx2, src.data(), s.m, s.k, packed, 0);
  }
}

Weights make_weights(Isa isa, const Shape& s, int64_t min_total_bytes, ops::DType format = ops::DType::Q8_0) {
  const int64_t rows = s.epilogue == Epilogue::SiluMul ? 2 * s.m : s.m;
  std::mt19937 rng(1);
  std::vector<BlockQ8_0> src(format == ops::DType::Q8_0 ? rows * s.k / 32 : 0);
  for (auto& b : src) {
    b.d = f32_to_f16(0.001f);
    for (auto& q : b.qs) q = int8_t(int(rng() % 255) - 127);
  }
  std::vector<uint8_t> src_4bit(format == ops::DType::Q8_0 ? 0 : size_t(rows * ops::row_bytes(format, s.k)));
  for (size_t i = 0; i < src_4bit.size(); ++i) src_4bit[i] = uint8_t(rng());
  for (size_t i = 0; i < src_4bit.size(); i += size_t(ops::row(format).block_bytes)) {
    const uint16_t d = f32_to_f16(0.001f);
    std::memcpy(&src_4bit[i], &d, 2);
    if (has_mins(format)) {
      const uint16_t m = f32_to_f16(-0.008f);
      std::memcpy(&src_4bit[i + 2], &m, 2);
    }
  }
  Weights w;
  w.block_bytes = packed_block_bytes(format);
  w.group_bytes = s.k / 32 * w.block_bytes;
  w.bytes = format == ops::DType::Q8_0 ? packed_bytes(isa, rows, s.k) : packed_bytes(format, rows, s.k);
  w.copies = std::max<int64_t>(1, (min_total_bytes + w.bytes - 1) / w.bytes);
  w.stride = (w.bytes + 4095) / 4096 * 4096;
  w.pages = PageBuffer(static_cast<size_t>(w.copies * w.stride), PageBuffer::Pages::Huge);
  for (int64_t c = 0; c < w.copies; ++c) {
    // Every copy different, so no page of one can stand in for another.
    for (size_t i = 0; i < src.size(); i += 4096 / sizeof(BlockQ8_0)) src[i].qs[0] = int8_t(rng() % 255 - 127);
    for (size_t i = 2; i < src_4bit.size(); i += 4096) src_4bit[i] = uint8_t(rng());
    uint8_t* packed = w.pages.data() + c * w.stride;
    std::memset(packed, 0, static_cast<size_t>(w.bytes));  // page faults are not packing time
    const auto t0 = std::chrono::steady_clock::now();
    if (format != ops::DType::Q8_0) {
      pack_4bit(format, src_4bit, s, packed);
    } else if (s.epilogue == Epilogue::SiluMul) {
      pack_gate_up_rows(ops::DType::Q8_0, isa, src.data(), src.data() + s.m * s.k / 32, s.m, s.k, packed);
    } else {
      pack_q8_0(isa, src.data(), rows, s.k, packed, 0);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.pack_gbs = std::max(w.pack_gbs, double(w.bytes) / secs / 1e9);
  }
  return w;
}

// Float weights (--format f16, bf16, f32): normal values, packed as the
// float kernels read them.
Weights make_float_weights(ops::DType t, const Shape& s, int64_t min_total_bytes) {
  const int64_t rows = s.epilogue == Epilogue::SiluMul ? 2 * s.m : s.m, e = float_element_bytes(t);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<uint8_t> src(size_t(rows * s.k * e));
  for (int64_t i = 0; i < rows * s.k; ++i) {
    const float v = normal(rng);
    const uint16_t h = t == ops::DType::F16 ? f32_to_f16(v) : uint16_t(std::bit_cast<uint32_t>(v) >> 16);
    if (t == ops::DType::F32) {
      std::memcpy(&src[size_t(4 * i)], &v, 4);
    } else {
      std::memcpy(&src[size_t(2 * i)], &h, 2);
    }
  }
  Weights w;
  w.block_bytes = packed_block_bytes(t);
  w.group_bytes = s.k / 32 * w.block_bytes;
  w.bytes = packed_bytes(t, rows, s.k);
  w.copies = std::max<int64_t>(1, (min_total_bytes + w.bytes - 1) / w.bytes);
  w.stride = (w.bytes + 4095) / 4096 * 4096;
  w.pages = PageBuffer(static_cast<size_t>(w.copies * w.stride), PageBuffer::Pages::Huge);
  for (int64_t c = 0; c < w.copies; ++c) {
    uint8_t* packed = w.pages.data() + c * w.stride;
    std::memset(packed, 0, static_cast<size_t>(w.bytes));  // page faults are not packing time
    const auto t0 = std::chrono::steady_clock::now();
    if (s.epilogue == Epilogue::SiluMul) {
      pack_gate_up_rows(t, Isa::Avx2, src.data(), src.data() + s.m * s.k * e, s.m, s.k, packed);
    } else {
      pack_rows(t, Isa::Avx2, src.data(), s.m, s.k, packed, 0);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    w.pack_gbs = std::max(w.pack_gbs, double(w.bytes) / secs / 1e9);
  }
  return w;
}

// Seconds per call: best of `samples` timings, each over enough calls to last
// `window` seconds. The window decides what a GEMV measures: over 0.3 ms
// windows the down GEMV read 54 GB/s on a host whose sustained rate was
// 27-32 GB/s (bursts), over 10 ms and 100 ms windows 27 and 32 GB/s. Decode
// streams 525 MB per token, so the default window (20 ms, --window-ms) times
// sustained streaming, like the whole-pass bandwidth printed beside it.
// With --cpu-time (1 thread only) a sample is the calling thread's CPU time,
// not wall time: on an oversubscribed host the time the thread was preempted
// drops out (memory stalls still count; other processes' traffic still
// slows them).
bool g_cpu_time = false;
double now_seconds() {
  if (g_cpu_time) {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double time_calls(const std::function<void(int64_t)>& call, double window, int samples = 10) {
  call(0);
  int64_t reps = 1;
  for (;;) {
    const double t0 = now_seconds();
    for (int64_t r = 0; r < reps; ++r) call(r);
    const double secs = now_seconds() - t0;
    if (secs > window || reps > (1 << 20)) break;
    reps *= 2;
  }
  std::vector<double> times;
  int64_t calls = 0;
  for (int s = 0; s < samples; ++s) {
    const double t0 = now_seconds();
    for (int64_t r = 0; r < reps; ++r) call(calls++);
    times.push_back((now_seconds() - t0) / double(reps));
  }
  // Best, not median: other processes on a shared machine only ever add time.
  return *std::min_element(times.begin(), times.end());
}

// Seconds for one matmul over n tokens: rows split in contiguous 16-aligned
// ranges per thread, tokens in calls of tokens_per_task. A matmul longer
// than ~1 ms is timed one row slice at a time (rotating over the slices and
// weight copies) and scaled up: on a shared machine long timings are always
// preempted, short ones often are not.
// X is ActBlock (act_q8 activations) or float (the float formats' f32 rows).
template <class X>
double time_matmul(SpinPool& pool, MatMulFn fn, const Weights& w, const Shape& s, const std::vector<X>& x,
                   std::vector<float>& y, const std::vector<float>& bias, int64_t n, int64_t tokens_per_task,
                   double window) {
  const int64_t kb = s.k / 32;
  const int64_t mult = s.epilogue == Epilogue::SiluMul ? 2 : 1;
  const int64_t groups = (s.m + 15) / 16;
  int64_t slice_groups = groups;
  auto call = [&](int64_t rep) {
    const uint8_t* base = w.copy(rep);
    const int64_t slices = groups / slice_groups;  // whole slices only: every call has the same work
    const int64_t s0 = (rep % slices) * slice_groups, s1 = std::min(groups, s0 + slice_groups);
    pool.run([&](int id) {
      const int64_t g0 = s0 + (s1 - s0) * id / pool.threads(), g1 = s0 + (s1 - s0) * (id + 1) / pool.threads();
      if (g0 == g1) return;
      for (int64_t t0 = 0; t0 < n; t0 += tokens_per_task) {
        MatMulArgs a{};
        a.w = base + g0 * mult * w.group_bytes;
        if constexpr (std::is_same_v<X, float>) {
          a.x_f32 = x.data() + t0 * s.k;
          a.x_stride = s.k;
        } else {
          a.x = x.data() + t0 * kb;
          a.x_stride = kb;
        }
        a.y = y.data() + t0 * s.m + g0 * 16;
        a.bias = bias.data() + g0 * 16;
        a.residual = y.data() + t0 * s.m + g0 * 16;
        a.y_stride = s.m;
        a.r_stride = s.m;
        a.k_blocks = kb;
        a.m_rows = std::min(g1 * 16, s.m) - g0 * 16;
        a.n_tokens = std::min(tokens_per_task, n - t0);
        fn(&a);
      }
    });
  };
  double full = 1e30;  // best of 3 whole calls: the first one also wakes the pool
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    call(rep);
    full = std::min(full, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (full > 1e-3) {
    slice_groups = std::min(groups, std::max<int64_t>(pool.threads(), int64_t(double(groups) * 1e-3 / full)));
  }
  const double per_call = time_calls(call, window);
  return per_call * double(groups) / double(slice_groups);
}

// Seconds for a k-quant prefill of n tokens as the runtime runs its GEMM:
// tasks of `task_rows` rows, each expanding its rows of the cold packed copy
// into a per-thread scratch (expand_kquant), then one call over all n tokens.
// Timed one task per call (rotating over the tasks and weight copies, as
// time_matmul times slices) and scaled up to the whole matrix.
double time_expanded_gemm(SpinPool& pool, MatMulFn fn, ops::DType t, const Weights& w, const Shape& s,
                          const std::vector<ActBlock>& x, std::vector<float>& y, const std::vector<float>& bias,
                          int64_t n, int64_t task_rows, double window) {
  const int64_t kb = s.k / 32, mult = s.epilogue == Epilogue::SiluMul ? 2 : 1, groups = (s.m + 15) / 16;
  const int64_t task_groups = task_rows / 16, tasks = groups / task_groups;  // whole tasks: the same work each call
  if (fn == nullptr) fn = [](const MatMulArgs*) {};  // the expansion alone
  std::vector<std::vector<uint8_t>> scratch(size_t(pool.threads()),
                                            std::vector<uint8_t>(size_t(task_groups * mult * kb * expanded_kquant_block_bytes(t))));
  const double per_call = time_calls(
      [&](int64_t rep) {
        const uint8_t* base = w.copy(rep);
        const int64_t task = rep % tasks;
        pool.run([&](int id) {
          // A task's tokens split over the threads (one thread: all).
          const int64_t t0 = n * id / pool.threads(), t1 = n * (id + 1) / pool.threads();
          const int64_t g0 = task * task_groups;
          uint8_t* e = scratch[size_t(id)].data();
          expand_kquant(t, base + g0 * mult * w.group_bytes, task_groups * mult, kb, e);
          MatMulArgs a{};
          a.w = e;
          a.x = x.data() + t0 * kb;
          a.y = y.data() + t0 * s.m + g0 * 16;
          a.bias = bias.data() + g0 * 16;
          a.residual = a.y;
          a.x_stride = kb;
          a.y_stride = s.m;
          a.r_stride = s.m;
          a.k_blocks = kb;
          a.m_rows = task_groups * 16;
          a.n_tokens = t1 - t0;
          fn(&a);
        });
      },
      window);
  return per_call * double(groups) / double(task_groups);
}

std::vector<ActBlock> make_acts(int64_t n, int64_t k) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(k);
  std::vector<ActBlock> x(n * k / 32);
  for (int64_t t = 0; t < n; ++t) {
    for (auto& v : row) v = normal(rng);
    quantize_act(row.data(), x.data() + t * k / 32, k);
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Benchmark of the generated Q8_0 matmul kernels at the Qwen2.5-0.5B shapes");
  std::string isa_name;
  std::vector<int> thread_counts = {1, 2};
  std::string gemm_tile;
  int64_t tokens_per_task = 64;
  int64_t prefetch = -1, gemm_prefetch = -1, gemv_groups = 0, prefetch_next_tile = -1, gemv_sequential = -1,
          batch_groups = 0;
  bool gemv_acc_in_memory = false;
  double window_ms = 20;
  std::string sweep;
  int64_t cold_bytes = int64_t(512) << 20;
  std::string format_name = "q8_0";
  app.add_option("--isa", isa_name, "avx512-vnni, avx512, avx-vnni or avx2 (default: best for this CPU)");
  app.add_option("--threads", thread_counts, "thread counts to run")->delimiter(',');
  app.add_option("--tile", gemm_tile, "GEMM register tile, m<M>n<N> (default: the schedule pass's for the ISA)");
  app.add_option("--tokens-per-task", tokens_per_task, "GEMM tokens per kernel call");
  app.add_option("--prefetch", prefetch, "GEMV software prefetch distance in bytes (-1: kernel default)");
  app.add_option("--prefetch-next-tile", prefetch_next_tile,
                 "the table's GEMV prefetches the next row tile's blocks (1) or --prefetch ahead (0, by default "
                 "the generic tuning's distance); -1: the host tuning's choice")
      ->check(CLI::Range(-1, 1));
  app.add_option("--gemv-groups", gemv_groups, "GEMV packed groups streamed at once in the table (0: kernel default)")
      ->check(CLI::Range(0, 8));
  app.add_option("--batch-groups", batch_groups,
                 "k-quant batch kernel's packed groups per tile in its table (0: kernel default)")
      ->check(CLI::Range(0, 2));
  app.add_option("--gemv-sequential", gemv_sequential,
                 "the table's SiluMul GEMV streams gate's blocks, then up's (1), or both side by side (0); -1: the "
                 "host tuning's choice")
      ->check(CLI::Range(-1, 1));
  app.add_flag("--gemv-acc-in-memory", gemv_acc_in_memory,
               "the table's GEMV keeps its fp32 accumulators in stack slots (ymm ISAs)");
  app.add_option("--gemm-prefetch", gemm_prefetch, "GEMM software prefetch distance in bytes (-1: kernel default)");
  app.add_option("--window-ms", window_ms, "length of one timed sample (best of 10 is reported)")
      ->check(CLI::Range(0.01, 10000.0));
  app.add_option("--cold-bytes", cold_bytes, "weight bytes cycled through per shape (beyond the caches)");
  app.add_option("--format", format_name,
                 "packed weight format: q8_0, q4_0, q5_0, q4_1, q5_1, iq4_nl or iq4_xs (the table only); f16, bf16 or f32 (their table); q2_k, q3_k, q4_k, q5_k or q6_k "
                 "(GEMV and batch kernels, K = 4864; then prefill per token at N = 512 against the Q8_0 GEMM, K = 4864, "
                 "1024, 2048)");
  std::string only;
  app.add_option("--shape", only, "run only shapes whose name contains this");
  app.add_option("--sweep", sweep, "gemv: sweep prefetch distance and groups; gemm: sweep tiles (down shape; a k-quant --format: its GEMM's "
                 "tiles on every prefill shape)");
  bool small_n = false;
  app.add_flag("--cpu-time", g_cpu_time, "time samples in thread CPU time (1 thread only; for loaded hosts)");
  app.add_flag("--small-n", small_n,
               "instead of the table: GEMM at N = 2, 4, 8, 16 (the --tile kernel and m16n8) against the GEMV, "
               "weights cold, the batched decode of several sequences");
  CLI11_PARSE(app, argc, argv);

  Isa isa;
  CpuTune tune = CpuTune::Generic;  // the GEMV shapes' (LUMEN_CPU_TUNE=generic to compare)
  try {
    isa = best_isa(cpu_features());
    tune = host_cpu_tune();
  } catch (const std::exception& e) {
    fmt::print(stderr, "lumen-bench-kernels: {}\n", e.what());
    return 1;
  }
  if (!isa_name.empty()) {
    bool known = false;
    for (Isa candidate : kAllIsas) {
      if (isa_name == to_string(candidate)) {
        isa = candidate;
        known = true;
      }
    }
    if (!known) {
      fmt::print(stderr, "lumen-bench-kernels: unknown --isa '{}' (avx512-vnni, avx512, avx-vnni, avx2)\n", isa_name);
      return 1;
    }
    if ((cpu_features() & required_features(isa)) != required_features(isa)) {
      fmt::print(stderr, "lumen-bench-kernels: this CPU cannot run {}\n", to_string(isa));
      return 1;
    }
  }
  for (int threads : thread_counts) {
    if (threads < 1 || threads > 256) {
      fmt::print(stderr, "lumen-bench-kernels: --threads values must be in [1, 256]\n");
      return 1;
    }
  }
  if (g_cpu_time && (thread_counts.size() != 1 || thread_counts[0] != 1)) {
    fmt::print(stderr, "lumen-bench-kernels: --cpu-time needs --threads 1\n");
    return 1;
  }
  const std::optional<ops::DType> format = ops::parse_dtype(format_name);
  if (!format || !is_packed_format(*format)) {
    fmt::print(stderr, "lumen-bench-kernels: unknown --format '{}' (q8_0, q4_0, q5_0, q4_1, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, f16, bf16, f32)\n", format_name);
    return 1;
  }
  if (*format != ops::DType::Q8_0 && (small_n || !(sweep.empty() || (has_packed_kquant(*format) && sweep == "gemm")))) {
    fmt::print(stderr, "lumen-bench-kernels: --format {} runs the table only\n", format_name);
    return 1;
  }
  if (tokens_per_task < 1 || cold_bytes < 1) {
    fmt::print(stderr, "lumen-bench-kernels: --tokens-per-task and --cold-bytes must be positive\n");
    return 1;
  }
  // The prefill kernel of an epilogue: the schedule's for this ISA, or with the --tile register tile.
  auto gemm_id = [&gemm_tile, isa](Epilogue e) {
    return gemm_tile.empty() ? std::optional(passes::prefill_kernel(isa, e))
                             : program::parse_kernel_id(std::string("gemm.") + program::to_string(e) + "." + gemm_tile);
  };
  for (Epilogue e : {Epilogue::Bias, Epilogue::Residual, Epilogue::SiluMul, Epilogue::None}) {
    std::string why;
    if (const std::optional<KernelId> id = gemm_id(e); !id || !program::fits(*id, isa, &why)) {
      fmt::print(stderr, "lumen-bench-kernels: bad --tile for {}: {}\n", program::to_string(e), why);
      return 1;
    }
  }
  const ops::DType weight_type = *format;
  const bool kquant = has_packed_kquant(weight_type);
  auto tile_name = [](const KernelId& k) { return fmt::format("m{}n{}", k.tile_m, k.tile_n); };
  fmt::print("cpu: {}\nisa: {}\ntune: {}\nformat: {}\n", cpu_feature_names(cpu_features()), to_string(isa), to_string(tune),
             format_name);

  const Shape shapes[] = {
      {"qkv 896x1152", 1152, 896, Epilogue::Bias},
      {"attn_out 896x896", 896, 896, Epilogue::Residual},
      {"gate.up 896x9728", 4864, 896, Epilogue::SiluMul},
      {"down 4864x896", 896, 4864, Epilogue::Residual},
      {"head 896x151936", 151936, 896, Epilogue::None},
  };
  const double window = window_ms / 1e3;
  for (int threads : thread_counts) {
    SpinPool pool(threads);
    const double bw_pass = measure_read_bandwidth(size_t(1) << 30, threads, 5);
    const double bw = measure_read_bandwidth_best_segment(size_t(1) << 30, threads, 5, size_t(16) << 20);
    fmt::print("\n== {} thread(s): read bandwidth {:.1f} GB/s best whole pass, {:.1f} GB/s best 16 MiB step "
               "(1 GiB, best of 5); %bw below is against the whole pass (sustained, as the {:.0f} ms samples)\n",
               threads, bw_pass, bw, window_ms);
    if (is_float_format(weight_type)) {
      // GEMV GB/s (cold weights), the batch kernel at N = 8 and prefill
      // N = 512 (calls of --tokens-per-task tokens, weights cold) with the
      // schedule's tile and the others that fit, us per token.
      const int64_t pp_n = 512;
      fmt::print("{:<18} {:>9} {:>8} {:>6} | {:>14} | n512 us/token: schedule's tile, then others\n", "shape",
                 "gemv us", "GB/s", "%bw", "batch N=8 us/t");
      for (const Shape& s : shapes) {
        if (std::string(s.name).find(only) == std::string::npos) continue;
        const Weights w = make_float_weights(weight_type, s, cold_bytes);
        std::vector<float> x(size_t(pp_n * s.k));
        std::mt19937 rng(2);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& v : x) v = normal(rng);
        std::vector<float> y(size_t(pp_n * s.m), 0.0f), bias(size_t(s.m), 0.5f);
        const KernelId gemv = KernelId::gemv(s.epilogue, weight_type);
        KernelShape gemv_shape = codegen::kernel_shape(isa, gemv, tune);
        if (prefetch >= 0) gemv_shape.prefetch_bytes = prefetch;
        if (gemv_groups > 0) gemv_shape.groups = gemv_groups;
        JitKernel gemv_kernel(codegen::generate_matmul_kernel(isa, gemv, gemv_shape));
        const double t1 = time_matmul(pool, gemv_kernel.fn(), w, s, x, y, bias, 1, 1, window);
        const double gbs = double(w.bytes) / t1 / 1e9;
        JitKernel batch_kernel(isa, KernelId::batch(s.epilogue, weight_type));
        const double t8 = time_matmul(pool, batch_kernel.fn(), w, s, x, y, bias, 8, 8, window) / 8;
        const KernelId sched = passes::prefill_kernel(isa, s.epilogue, weight_type);
        std::string cells;
        for (auto [tm, tn] : {std::pair<int64_t, int64_t>{sched.tile_m, sched.tile_n}, {16, 8}, {32, 8}, {48, 8},
                              {64, 6}, {32, 6}}) {
          const KernelId id = KernelId::gemm(s.epilogue, tm, tn, weight_type);
          if ((cells.size() > 0 && id == sched) || !program::fits(id, isa)) continue;
          JitKernel k(isa, id);
          const double t = time_matmul(pool, k.fn(), w, s, x, y, bias, pp_n, tokens_per_task, window) / pp_n;
          cells += fmt::format(" {}={:.2f}", tile_name(id), t * 1e6);
        }
        fmt::print("{:<18} {:>9.1f} {:>8.1f} {:>5.0f}% | {:>14.2f} |{}\n", s.name, t1 * 1e6, gbs, 100 * gbs / bw_pass,
                   t8 * 1e6, cells);
      }
      continue;
    }
    if (kquant) {
      // k-quant weights occur only where K % 256 == 0: in Qwen2.5-0.5B's
      // Q4_K_M, ffn_down (4864 wide); gate.up here is 4864 wide too.
      const Shape kq_shapes[] = {{"down 4864x896", 896, 4864, Epilogue::Residual},
                                 {"gate.up 4864x1792", 896, 4864, Epilogue::SiluMul}};
      fmt::print("{:<18} {:>9} {:>8} {:>6} | {:>16} {:>16} {:>16}\n", "shape", "gemv us", "GB/s", "%bw",
                 "N=2 us (xN1)", "N=4", "N=8");
      for (const Shape& s : kq_shapes) {
        if (std::string(s.name).find(only) == std::string::npos) continue;
        const Weights w = make_kquant_weights(weight_type, s, cold_bytes);
        const std::vector<ActBlock> x = make_acts(8, s.k);
        std::vector<float> y(8 * s.m, 0.0f), bias(s.m, 0.5f);
        const KernelId gemv = KernelId::gemv(s.epilogue, weight_type), batch = KernelId::batch(s.epilogue, weight_type);
        codegen::KQuantShape gemv_shape = codegen::kquant_kernel_shape(isa, gemv, tune);
        if (prefetch >= 0) gemv_shape.prefetch_bytes = prefetch;
        if (gemv_groups > 0) gemv_shape.groups = gemv_groups;
        JitKernel gemv_kernel(codegen::generate_kquant_kernel(isa, gemv, gemv_shape));
        codegen::KQuantShape batch_shape = codegen::kquant_kernel_shape(isa, batch, tune);
        if (batch_groups > 0) batch_shape.groups = batch_groups;
        JitKernel batch_kernel(codegen::generate_kquant_kernel(isa, batch, batch_shape));
        const double t1 = time_matmul(pool, gemv_kernel.fn(), w, s, x, y, bias, 1, 1, window);
        const double gbs = double(w.bytes) / t1 / 1e9;
        std::string cells;
        for (int64_t n : {2, 4, 8}) {
          const double t = time_matmul(pool, batch_kernel.fn(), w, s, x, y, bias, n, n, window);
          cells += fmt::format(" {:>16}", fmt::format("{:.1f} ({:.2f}x)", t * 1e6, t / t1));
        }
        fmt::print("{:<18} {:>9.1f} {:>8.1f} {:>5.0f}% |{}   repack {:.2f} GB/s\n", s.name, t1 * 1e6, gbs,
                   100 * gbs / bw_pass, cells, w.pack_gbs);
      }
      // Prefill (N = 512 in calls of --tokens-per-task tokens, weights cold),
      // per token: the Q8_0 GEMM on Q8_0 weights of the same shape, the
      // k-quant batch kernel over token tiles, and the k-quant sweep tiles.
      const Shape pp_shapes[] = {{"down 4864x896", 896, 4864, Epilogue::Residual},
                                 {"k1024 1024x1024", 1024, 1024, Epilogue::Residual},
                                 {"k2048 2048x2048", 2048, 2048, Epilogue::Residual}};
      const int64_t pp_n = 512;
      fmt::print("prefill N={} (q8_0 gemm, batch: {} tokens per call; k-quant gemm: all, rows expanded per task), "
                 "us per token:\n{:<18} {:>10} {:>16} {:>24}\n",
                 pp_n, tokens_per_task, "shape", "q8_0 gemm", "batch (xq8_0)", "k-quant gemm (xq8_0)");
      for (const Shape& s : pp_shapes) {
        if (std::string(s.name).find(only) == std::string::npos) continue;
        const Weights w = make_kquant_weights(weight_type, s, cold_bytes);
        const Weights wq8 = make_weights(isa, s, cold_bytes);
        const std::vector<ActBlock> x = make_acts(pp_n, s.k);
        std::vector<float> y(pp_n * s.m, 0.0f), bias(s.m, 0.5f);
        JitKernel q8_gemm(isa, gemm_id(s.epilogue).value());
        const double t_q8 = time_matmul(pool, q8_gemm.fn(), wq8, s, x, y, bias, pp_n, tokens_per_task, window) / pp_n;
        const KernelId batch = KernelId::batch(s.epilogue, weight_type);
        JitKernel batch_kernel(isa, batch);
        const double t_b = time_matmul(pool, batch_kernel.fn(), w, s, x, y, bias, pp_n, tokens_per_task, window) / pp_n;
        // The schedule's k-quant GEMM, its tasks' rows a multiple of its tile (as the runtime's).
        const KernelId gemm = passes::prefill_kernel(isa, s.epilogue, weight_type);
        const int64_t task_rows = std::max<int64_t>(gemm.tile_m, (64 + gemm.tile_m - 1) / gemm.tile_m * gemm.tile_m);
        JitKernel gemm_kernel(isa, gemm);
        const double t_g =
            time_expanded_gemm(pool, gemm_kernel.fn(), weight_type, w, s, x, y, bias, pp_n, task_rows, window) / pp_n;
        const double t_e =
            time_expanded_gemm(pool, nullptr, weight_type, w, s, x, y, bias, pp_n, task_rows, window) / pp_n;
        std::string cells = fmt::format(" expand {:.2f}", t_e * 1e6);
        if (sweep == "gemm") {  // every k-quant GEMM tile that fits, the same way
          for (int64_t g = 1; g <= 3; ++g) {
            for (int64_t tok = 2; tok <= 11; ++tok) {
              for (bool mem : {false, true}) {
                if (!kquant_tile_fits(isa, g * (s.epilogue == Epilogue::SiluMul ? 2 : 1), tok,
                                      kquant_int_accumulators(weight_type), mem))
                  continue;
                const KernelId id = KernelId::gemm(s.epilogue, 16 * g, tok, weight_type);
                codegen::KQuantShape shape = codegen::kquant_kernel_shape(isa, id, tune);
                shape.fp32_acc_in_memory = mem;
                JitKernel k(codegen::generate_kquant_kernel(isa, id, shape));
                const int64_t rows = std::max<int64_t>(16 * g, (64 + 16 * g - 1) / (16 * g) * (16 * g));
                const double t =
                    time_expanded_gemm(pool, k.fn(), weight_type, w, s, x, y, bias, pp_n, rows, window) / pp_n;
                cells += fmt::format(" m{}n{}{}={:.2f}({:.2f}x)", 16 * g, tok, mem ? "m" : "r", t * 1e6, t / t_q8);
              }
            }
          }
        }
        fmt::print("{:<18} {:>10.2f} {:>16} {:>24}{}\n", s.name, t_q8 * 1e6,
                   fmt::format("{:.2f} ({:.2f}x)", t_b * 1e6, t_b / t_q8),
                   fmt::format("{:.2f} ({:.2f}x) m{}n{}", t_g * 1e6, t_g / t_q8, gemm.tile_m, gemm.tile_n), cells);
      }
      continue;
    }
    if (small_n) {
      // N decode steps of N sequences in one GEMM against one GEMV: while the
      // GEMM is bound by the weight stream it should cost little more.
      fmt::print("{:<18} {:>9} | {:>22} {:>22} {:>22} {:>22}\n", "shape", "N=1 us", "N=2 us (xN1) tile",
                 "N=4", "N=8", "N=16");
      for (const Shape& s : shapes) {
        if (std::string(s.name).find(only) == std::string::npos) continue;
        const Weights w = make_weights(isa, s, cold_bytes);
        const std::vector<ActBlock> x = make_acts(16, s.k);
        std::vector<float> y(16 * s.m, 0.0f), bias(s.m, 0.5f);
        const KernelId gemv = KernelId::gemv(s.epilogue);
        JitKernel gemv_kernel(isa, gemv);
        const double t1 = time_matmul(pool, gemv_kernel.fn(), w, s, x, y, bias, 1, 1, window);
        const KernelId tile = gemm_id(s.epilogue).value();
        JitKernel tile_kernel(isa, tile);
        // m16n8 streams each weight block once for up to 8 tokens; with
        // --gemm-prefetch it also prefetches the weight stream like the GEMV
        // (where the ISA's registers hold it: not on the ymm ISAs).
        const KernelId n8 = KernelId::gemm(s.epilogue, 16, 8);
        std::unique_ptr<JitKernel> n8_kernel;
        if (program::fits(n8, isa)) {
          KernelShape n8_shape = codegen::kernel_shape(isa, n8, tune);
          if (gemm_prefetch >= 0) n8_shape.prefetch_bytes = gemm_prefetch;
          n8_kernel = std::make_unique<JitKernel>(codegen::generate_matmul_kernel(isa, n8, n8_shape));
        }
        const std::string n8_name = gemm_prefetch > 0 ? "m16n8+pf" : "m16n8";
        // The batch kernel the runtime runs for 2..8 tokens.
        const KernelId batch = KernelId::batch(s.epilogue);
        JitKernel batch_kernel(isa, batch);
        const std::string batch_name = "batch";
        std::string cells;
        for (int64_t n : {2, 4, 8, 16}) {
          const double ta = time_matmul(pool, tile_kernel.fn(), w, s, x, y, bias, n, n, window);
          const double tb = n8_kernel ? time_matmul(pool, n8_kernel->fn(), w, s, x, y, bias, n, n, window)
                                      : std::numeric_limits<double>::infinity();
          const double tc = time_matmul(pool, batch_kernel.fn(), w, s, x, y, bias, n, n, window);
          const double best = std::min({ta, tb, tc});
          const std::string best_name = best == ta ? tile_name(tile) : best == tb ? n8_name : batch_name;
          cells += fmt::format(" {:>22}", fmt::format("{:.1f} ({:.2f}x) {}", best * 1e6, best / t1, best_name));
        }
        fmt::print("{:<18} {:>9.1f} |{}\n", s.name, t1 * 1e6, cells);
      }
      continue;
    }
    const bool converts = *format != ops::DType::Q8_0;
    // Q4_1 and Q5_1 prefill (from 64 tokens) on the k-quant GEMM over expanded rows: its µs per token too.
    const bool expands = has_expanded_kquant(*format);
    const char* extra = expands ? "   conv  batch/t  xgemm/t (expand)" : converts ? "   conv  batch/t" : "";
    fmt::print("{:<18} {:>9} {:>8} {:>6} | {:>9} {:>8} {:>7}{} | {:>9} {:>8} {:>7}{}\n", "shape", "gemv us", "GB/s",
               "%bw", "n32 us/t", "GOP/s", "vs gemv", extra, "n512 us/t", "GOP/s", "vs gemv", extra);
    for (const Shape& s : shapes) {
      if (std::string(s.name).find(only) == std::string::npos) continue;
      if (s.k % ops::row(*format).block_elems != 0) {
        fmt::print("{:<18} skipped: K is not a multiple of {}'s {}-element block\n", s.name, format_name,
                   ops::row(*format).block_elems);
        continue;
      }
      // The GEMV streams `format` (cold). The GEMM of a converted format reads
      // the rows a task converted into its scratch, which stays in cache: one
      // Q8_0 copy stands in for it.
      const Weights native = converts ? make_weights(isa, s, cold_bytes, *format) : Weights{};
      const Weights w = make_weights(isa, s, converts ? 1 : cold_bytes);
      if (threads == thread_counts.front()) {
        fmt::print("{:<18} repack at load: {:.2f} GB/s, {:.1f} ms for {:.1f} MB, no extra memory\n", s.name,
                   w.pack_gbs, double(w.bytes) / w.pack_gbs / 1e6, double(w.bytes) / 1e6);
      }
      const int64_t max_n = 512;
      const std::vector<ActBlock> x = make_acts(max_n, s.k);
      std::vector<float> y(max_n * s.m, 0.0f), bias(s.m, 0.5f);
      const KernelId gemv = KernelId::gemv(s.epilogue, *format);
      KernelShape gemv_shape = codegen::kernel_shape(isa, gemv, tune);
      if (prefetch_next_tile == 0) {
        gemv_shape.prefetch_next_tile = false;
        gemv_shape.prefetch_bytes = codegen::kernel_shape(isa, gemv, CpuTune::Generic).prefetch_bytes;
      }
      if (prefetch_next_tile == 1) gemv_shape.prefetch_next_tile = true;
      if (prefetch >= 0) gemv_shape.prefetch_bytes = prefetch;
      if (gemv_groups > 0) gemv_shape.groups = gemv_groups;
      if (gemv_sequential >= 0) gemv_shape.sequential_groups = gemv_sequential == 1;
      if (gemv_acc_in_memory) gemv_shape.fp32_acc_in_memory = true;
      if (!tile_fits(isa, gemv_shape.groups * (s.epilogue == Epilogue::SiluMul ? 2 : 1), 1,
                     gemv_shape.fp32_acc_in_memory)) {
        fmt::print(stderr, "lumen-bench-kernels: {} GEMV groups{} do not fit {}'s registers\n", gemv_shape.groups,
                   gemv_shape.fp32_acc_in_memory ? " (fp32 accumulators in memory)" : "", to_string(isa));
        return 1;
      }
      JitKernel gemv_kernel(codegen::generate_matmul_kernel(isa, gemv, gemv_shape));
      const Weights& streamed = converts ? native : w;
      const double t_gemv = time_matmul(pool, gemv_kernel.fn(), streamed, s, x, y, bias, 1, 1, window);
      const double gbs = double(streamed.bytes) / t_gemv / 1e9;
      if (converts && threads == thread_counts.front()) {
        fmt::print("{:<18} {} repack at load: {:.2f} GB/s, {:.1f} MB\n", s.name, format_name, native.pack_gbs,
                   double(native.bytes) / 1e6);
      }
      // Prefill of a converted format: each thread converts its rows, one
      // 96-row task at a time (the m48n4 tile's multiple), into a scratch
      // that stays in L2, from the cold native copy; once per token task.
      // (Q4_1 and Q5_1 have no exact conversion: their prefill is the k-quant GEMM, below.)
      double t_convert = 0;
      if (converts && converts_exactly_to_q8_0(*format)) {
        const int64_t kb = s.k / 32, mult = s.epilogue == Epilogue::SiluMul ? 2 : 1, groups = (s.m + 15) / 16;
        const int64_t task_groups = 6 * mult;
        std::vector<std::vector<uint8_t>> scratch(size_t(pool.threads()),
                                                  std::vector<uint8_t>(size_t(task_groups * kb * kPackedBlockBytes)));
        t_convert = time_calls(
            [&](int64_t rep) {
              const uint8_t* base = native.copy(rep);
              pool.run([&](int id) {
                const int64_t g0 = groups * id / pool.threads(), g1 = groups * (id + 1) / pool.threads();
                for (int64_t g = g0 * mult; g < g1 * mult; g += task_groups) {
                  convert_packed_to_q8_0(*format, isa, base + g * kb * native.block_bytes,
                                         std::min(task_groups, g1 * mult - g), kb, scratch[size_t(id)].data());
                }
              });
            },
            window);
      }
      const KernelId gemm = gemm_id(s.epilogue).value();
      KernelShape gemm_shape = codegen::kernel_shape(isa, gemm, tune);
      if (gemm_prefetch >= 0) gemm_shape.prefetch_bytes = gemm_prefetch;
      JitKernel gemm_kernel(codegen::generate_matmul_kernel(isa, gemm, gemm_shape));
      const double macs_per_token = double(s.m) * double(s.k) * (s.epilogue == Epilogue::SiluMul ? 2 : 1);
      double per_token[2], gops[2], conv_share[2];
      const int64_t ns[2] = {32, 512};
      for (int i = 0; i < 2; ++i) {
        double t = time_matmul(pool, gemm_kernel.fn(), w, s, x, y, bias, ns[i], tokens_per_task, window);
        // The runtime's prefill token tasks (256 tokens): one conversion each.
        const double conv = t_convert * double((ns[i] + 255) / 256);
        conv_share[i] = conv / (conv + t);
        t += conv;
        per_token[i] = t / double(ns[i]);
        gops[i] = 2 * macs_per_token * double(ns[i]) / t / 1e9;
      }
      // What the runtime runs for these formats instead: their batch kernel
      // over the token tasks, on the cold native copy.
      double batch_per_token[2] = {0, 0};
      if (converts) {
        JitKernel batch_kernel(isa, KernelId::batch(s.epilogue, *format));
        for (int i = 0; i < 2; ++i)
          batch_per_token[i] =
              time_matmul(pool, batch_kernel.fn(), native, s, x, y, bias, ns[i], tokens_per_task, window) /
              double(ns[i]);
      }
      // Q4_1, Q5_1: the schedule's k-quant GEMM, each task (rows a multiple of its
      // tile, as the runtime's) expanding its rows of the cold native copy.
      double xgemm_per_token[2] = {0, 0}, expand_per_token[2] = {0, 0};
      if (expands) {
        const KernelId xgemm = passes::prefill_kernel(isa, s.epilogue, *format);
        const int64_t task_rows = std::max<int64_t>(xgemm.tile_m, (64 + xgemm.tile_m - 1) / xgemm.tile_m * xgemm.tile_m);
        JitKernel xgemm_kernel(isa, xgemm);
        for (int i = 0; i < 2; ++i) {
          xgemm_per_token[i] = time_expanded_gemm(pool, xgemm_kernel.fn(), *format, native, s, x, y, bias, ns[i],
                                                  task_rows, window) /
                               double(ns[i]);
          expand_per_token[i] =
              time_expanded_gemm(pool, nullptr, *format, native, s, x, y, bias, ns[i], task_rows, window) / double(ns[i]);
        }
      }
      auto share = [&](int i) {
        std::string cells =
            converts ? fmt::format(" {:>5.1f}% {:>8.2f}", 100 * conv_share[i], batch_per_token[i] * 1e6) : std::string();
        if (expands) cells += fmt::format(" {:>8.2f} ({:.2f})", xgemm_per_token[i] * 1e6, expand_per_token[i] * 1e6);
        return cells;
      };
      fmt::print("{:<18} {:>9.1f} {:>8.1f} {:>5.0f}% | {:>9.2f} {:>8.0f} {:>6.3f}x{} | {:>9.2f} {:>8.0f} {:>6.3f}x{}\n",
                 s.name, t_gemv * 1e6, gbs, 100 * gbs / bw_pass, per_token[0] * 1e6, gops[0], per_token[0] / t_gemv,
                 share(0), per_token[1] * 1e6, gops[1], per_token[1] / t_gemv, share(1));
    }
    if (sweep.empty()) continue;
    fmt::print("-- sweep ({} threads)\n", threads);
    // The down shape, or the first one --shape names.
    const Shape* picked = &shapes[3];
    for (const Shape& s : shapes) {
      if (!only.empty() && std::string(s.name).find(only) != std::string::npos) {
        picked = &s;
        break;
      }
    }
    const Shape& down = *picked;
    const Weights w = make_weights(isa, down, cold_bytes);
    const std::vector<ActBlock> x = make_acts(512, down.k);
    std::vector<float> y(512 * down.m, 0.0f), bias(down.m, 0.5f);
    for (int64_t pf : {0, 1088, 2176, 4352, 8704, 17408}) {
      if (sweep != "gemv") break;
      const KernelId gemv = KernelId::gemv(down.epilogue);
      KernelShape shape = codegen::kernel_shape(isa, gemv, tune);
      shape.prefetch_bytes = pf;
      JitKernel k(codegen::generate_matmul_kernel(isa, gemv, shape));
      const double t = time_matmul(pool, k.fn(), w, down, x, y, bias, 1, 1, window);
      fmt::print("gemv {} prefetch {:>5}: {:.1f} GB/s\n", down.name, pf, double(w.bytes) / t / 1e9);
    }
    for (int64_t groups : {1, 2, 3, 4, 6, 8}) {
      for (bool in_memory : {false, true}) {
        if (sweep != "gemv" || (in_memory && !is_ymm_isa(isa))) break;
        const KernelId gemv = KernelId::gemv(down.epilogue);
        KernelShape shape = codegen::kernel_shape(isa, gemv, tune);
        shape.groups = groups;
        shape.fp32_acc_in_memory = in_memory;
        if (!tile_fits(isa, groups * (down.epilogue == Epilogue::SiluMul ? 2 : 1), 1, in_memory)) continue;
        JitKernel k(codegen::generate_matmul_kernel(isa, gemv, shape));
        const double t = time_matmul(pool, k.fn(), w, down, x, y, bias, 1, 1, window);
        fmt::print("gemv {} groups {}{}: {:.1f} GB/s\n", down.name, groups, in_memory ? " (fp32 acc in memory)" : "",
                   double(w.bytes) / t / 1e9);
      }
    }
    for (int64_t chunk : {int64_t(0), int64_t(64) << 10, int64_t(256) << 10, int64_t(1) << 20}) {
      if (sweep != "gemm") break;
      const KernelId spec = gemm_id(Epilogue::Residual).value();
      KernelShape shape = codegen::kernel_shape(isa, spec, tune);
      shape.chunk_act_bytes = chunk;
      JitKernel k(codegen::generate_matmul_kernel(isa, spec, shape));
      const double t = time_matmul(pool, k.fn(), w, down, x, y, bias, 512, 512, window);
      fmt::print("gemm {} {} n512 in one call, token chunk {} KiB: {:.2f} us/token\n", down.name, tile_name(spec),
                 chunk >> 10, t / 512 * 1e6);
    }
    for (auto [groups, tokens] : {std::pair<int64_t, int64_t>{1, 2}, {1, 3}, {1, 4}, {1, 5}, {2, 2}}) {
      if (sweep != "gemm" || !is_ymm_isa(isa)) break;
      if (!tile_fits(isa, groups, tokens, true)) continue;
      const KernelId spec = gemm_id(Epilogue::Residual).value();
      KernelShape shape = codegen::kernel_shape(isa, spec, tune);
      shape.groups = groups;
      shape.tokens = tokens;
      shape.fp32_acc_in_memory = true;
      JitKernel k(codegen::generate_matmul_kernel(isa, spec, shape));
      const double t = time_matmul(pool, k.fn(), w, down, x, y, bias, 512, tokens_per_task, window);
      fmt::print("gemm {} m{}n{} (fp32 acc in memory) n512: {:.2f} us/token, {:.0f} GOP/s\n", down.name, 16 * groups,
                 tokens, t / 512 * 1e6, 2.0 * double(down.m) * double(down.k) * 512 / t / 1e9);
    }
    for (auto [tile_m, tile_n] : {std::pair<int64_t, int64_t>{16, 4}, {16, 8}, {32, 4}, {32, 5}, {32, 6}, {48, 4},
                                  {64, 3}}) {
      if (sweep != "gemm") break;
      const KernelId kernel = KernelId::gemm(Epilogue::Residual, tile_m, tile_n);
      if (!program::fits(kernel, isa)) continue;
      const std::string tile = tile_name(kernel);
      JitKernel k(isa, kernel);
      const double t = time_matmul(pool, k.fn(), w, down, x, y, bias, 512, tokens_per_task, window);
      fmt::print("gemm {} {} n512: {:.2f} us/token, {:.0f} GOP/s\n", down.name, tile, t / 512 * 1e6,
                 2.0 * double(down.m) * double(down.k) * 512 / t / 1e9);
    }
  }
  return 0;
}
