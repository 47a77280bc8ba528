// Memory read bandwidth probe (see include/lumen/target/membw.h).
#include "lumen/target/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lumen/target/kernel_abi.h"
#include "lumen/target/page_buffer.h"

namespace lumen {
namespace {

// Four independent chains so the loop is bound by loads, not by the adds.
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint8_t* p, size_t bytes) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t sum = 0;
  for (uint64_t lane : lanes) sum += lane;
  return sum;
}

__attribute__((target("avx2"))) uint64_t sum_avx2(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

namespace {

// Reads `bytes` in passes; each pass reads every thread's slice in steps of
// `segment_bytes`, the threads meeting at a barrier between steps. Returns
// {best whole-pass rate, best step rate} in GB/s.
std::pair<double, double> read_passes(size_t bytes, int threads, int repeats, size_t segment_bytes) {
  if (threads < 1 || repeats < 1 || bytes < size_t(4096) * threads || segment_bytes < 4096) {
    throw std::invalid_argument("measure_read_bandwidth: need threads >= 1, repeats >= 1, 4 KiB per thread");
  }
  bytes &= ~size_t(4095);
  // Huge pages, as the packed weights use: the ceiling is what the weights could be read at.
  PageBuffer mem(bytes, PageBuffer::Pages::Huge);
  uint8_t* buf = mem.data();
  std::memset(buf, 1, bytes);
  const bool avx512 = (cpu_features() & kCpuAvx512f) != 0;
  const size_t slice = (bytes / threads) & ~size_t(255);
  const size_t step = std::min(segment_bytes & ~size_t(255), slice);
  const size_t steps = slice / step;
  std::vector<uint64_t> sink(threads);
  std::atomic<size_t> arrived{0};
  double best_pass = 0.0, best_step = 0.0;
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<double> step_secs(steps, 0.0);
    arrived = 0;
    const auto start = std::chrono::steady_clock::now();
    auto worker = [&](int t) {
      auto step_start = std::chrono::steady_clock::now();
      for (size_t s = 0; s < steps; ++s) {
        const uint8_t* p = buf + t * slice + s * step;
        sink[t] += avx512 ? sum_avx512(p, step) : sum_avx2(p, step);
        // Barrier: the last thread to finish a step timestamps it.
        if (arrived.fetch_add(1) + 1 == (s + 1) * threads) {
          const auto now = std::chrono::steady_clock::now();
          step_secs[s] = std::chrono::duration<double>(now - step_start).count();
        }
        while (arrived.load() < (s + 1) * threads) _mm_pause();
        step_start = std::chrono::steady_clock::now();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
    worker(0);
    for (auto& th : pool) th.join();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_pass = std::max(best_pass, double(steps * step) * threads / secs / 1e9);
    for (double s : step_secs) {
      if (s > 0) best_step = std::max(best_step, double(step) * threads / s / 1e9);
    }
  }
  volatile uint64_t keep = 0;
  for (uint64_t s : sink) keep = keep + s;
  return {best_pass, best_step};
}

}  // namespace

double measure_read_bandwidth(size_t bytes, int threads, int repeats) {
  return read_passes(bytes, threads, repeats, bytes).first;
}

double measure_read_bandwidth_best_segment(size_t bytes, int threads, int repeats, size_t segment_bytes) {
  return read_passes(bytes, threads, repeats, segment_bytes).second;
}

}  // namespace lumen
