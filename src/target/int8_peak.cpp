// The int8 dot-product peak probe (see include/lumen/target/int8_peak.h).
#include "lumen/target/int8_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace lumen {
namespace {

// Each loop is inline asm, so that no compiler hoists, shares or spills the
// chains: `iters` iterations of independent dot-product chains on registers
// only (12 for vpdpbusd, enough to cover its latency times its throughput on
// current cores; 6 of vpmaddubsw -> vpmaddwd (by ones) -> vpaddd without
// VNNI, the sequence the kernels use). The inputs are arbitrary bytes.
// Returns the int8 multiply-adds done.

__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t loop_avx512_vnni(int64_t iters) {
  int64_t n = iters;
  __asm__ volatile(
      "vpternlogd $0xFF, %%zmm30, %%zmm30, %%zmm30\n\t"
      "vpabsb %%zmm30, %%zmm31\n\t"
      "1:\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm0\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm1\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm2\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm3\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm4\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm5\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm6\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm7\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm8\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm9\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm10\n\t"
      "vpdpbusd %%zmm31, %%zmm30, %%zmm11\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm30", "xmm31", "cc");
  return iters * 12 * 64;
}

__attribute__((target("avx2,avxvnni"))) int64_t loop_avx_vnni(int64_t iters) {
  int64_t n = iters;
  __asm__ volatile(
      "vpcmpeqb %%ymm14, %%ymm14, %%ymm14\n\t"
      "vpabsb %%ymm14, %%ymm15\n\t"
      "1:\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm0\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm1\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm2\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm3\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm4\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm5\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm6\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm7\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm8\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm9\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm10\n\t"
      "%{vex%} vpdpbusd %%ymm15, %%ymm14, %%ymm11\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return iters * 12 * 32;
}

__attribute__((target("avx512f,avx512bw"))) int64_t loop_avx512(int64_t iters) {
  int64_t n = iters;
  __asm__ volatile(
      "vpternlogd $0xFF, %%zmm13, %%zmm13, %%zmm13\n\t"
      "vpabsb %%zmm13, %%zmm14\n\t"
      "vpsrlw $15, %%zmm13, %%zmm15\n\t"
      "1:\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm6\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm7\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm8\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm9\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm10\n\t"
      "vpmaddubsw %%zmm14, %%zmm13, %%zmm11\n\t"
      "vpmaddwd %%zmm15, %%zmm6, %%zmm6\n\t"
      "vpmaddwd %%zmm15, %%zmm7, %%zmm7\n\t"
      "vpmaddwd %%zmm15, %%zmm8, %%zmm8\n\t"
      "vpmaddwd %%zmm15, %%zmm9, %%zmm9\n\t"
      "vpmaddwd %%zmm15, %%zmm10, %%zmm10\n\t"
      "vpmaddwd %%zmm15, %%zmm11, %%zmm11\n\t"
      "vpaddd %%zmm6, %%zmm0, %%zmm0\n\t"
      "vpaddd %%zmm7, %%zmm1, %%zmm1\n\t"
      "vpaddd %%zmm8, %%zmm2, %%zmm2\n\t"
      "vpaddd %%zmm9, %%zmm3, %%zmm3\n\t"
      "vpaddd %%zmm10, %%zmm4, %%zmm4\n\t"
      "vpaddd %%zmm11, %%zmm5, %%zmm5\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return iters * 6 * 64;
}

__attribute__((target("avx2"))) int64_t loop_avx2(int64_t iters) {
  int64_t n = iters;
  __asm__ volatile(
      "vpcmpeqb %%ymm13, %%ymm13, %%ymm13\n\t"
      "vpabsb %%ymm13, %%ymm14\n\t"
      "vpsrlw $15, %%ymm13, %%ymm15\n\t"
      "1:\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm6\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm7\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm8\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm9\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm10\n\t"
      "vpmaddubsw %%ymm14, %%ymm13, %%ymm11\n\t"
      "vpmaddwd %%ymm15, %%ymm6, %%ymm6\n\t"
      "vpmaddwd %%ymm15, %%ymm7, %%ymm7\n\t"
      "vpmaddwd %%ymm15, %%ymm8, %%ymm8\n\t"
      "vpmaddwd %%ymm15, %%ymm9, %%ymm9\n\t"
      "vpmaddwd %%ymm15, %%ymm10, %%ymm10\n\t"
      "vpmaddwd %%ymm15, %%ymm11, %%ymm11\n\t"
      "vpaddd %%ymm6, %%ymm0, %%ymm0\n\t"
      "vpaddd %%ymm7, %%ymm1, %%ymm1\n\t"
      "vpaddd %%ymm8, %%ymm2, %%ymm2\n\t"
      "vpaddd %%ymm9, %%ymm3, %%ymm3\n\t"
      "vpaddd %%ymm10, %%ymm4, %%ymm4\n\t"
      "vpaddd %%ymm11, %%ymm5, %%ymm5\n\t"
      "dec %0\n\t"
      "jnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(n)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc");
  return iters * 6 * 32;
}

int64_t (*loop_for(Isa isa))(int64_t) {
  switch (isa) {
    case Isa::Avx512Vnni: return loop_avx512_vnni;
    case Isa::Avx512: return loop_avx512;
    case Isa::AvxVnni: return loop_avx_vnni;
    case Isa::Avx2: return loop_avx2;
  }
  return loop_avx2;
}

}  // namespace

double measure_int8_peak(Isa isa, int threads, int repeats, double pass_ms) {
  if (threads < 1 || repeats < 1 || !(pass_ms > 0))
    throw std::invalid_argument("measure_int8_peak: need threads >= 1, repeats >= 1, pass_ms > 0");
  if ((cpu_features() & required_features(isa)) != required_features(isa))
    throw std::invalid_argument(std::string("measure_int8_peak: this CPU cannot run ") + to_string(isa));
  using Clock = std::chrono::steady_clock;
  int64_t (*loop)(int64_t) = loop_for(isa);
  // Calibrate the iteration count to about pass_ms on one core.
  int64_t iters = 1 << 12;
  for (;;) {
    const auto t0 = Clock::now();
    loop(iters);
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ms >= pass_ms / 8 || iters > (int64_t(1) << 40)) {
      iters = std::max<int64_t>(1, int64_t(double(iters) * pass_ms / std::max(ms, 1e-3)));
      break;
    }
    iters *= 4;
  }
  double best = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<int64_t> macs(size_t(threads), 0);
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { macs[size_t(t)] = loop(iters); });
    macs[0] = loop(iters);
    for (auto& th : pool) th.join();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    double total = 0;
    for (int64_t m : macs) total += double(m);
    best = std::max(best, 2.0 * total / secs / 1e9);
  }
  return best;
}

}  // namespace lumen
