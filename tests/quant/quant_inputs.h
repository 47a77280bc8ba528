// The fixed inputs the quantizer hashes of tests/data/quant/reference_quants.json
// were recorded on (its README): four rows of 512, six distributions, made
// with exact float arithmetic only so that any machine makes the same bits.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace lumen::quant::test {

inline constexpr int kRowElems = 512;
inline constexpr int kRows = 4;
inline constexpr std::array<std::string_view, 6> kCases = {"normal",   "outliers", "zeros",
                                                           "constant", "tiny",     "mixed_blocks"};

inline uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline float uniform01(uint64_t& s) { return static_cast<float>(splitmix(s) >> 40) * 0x1p-24f; }

// Irwin-Hall(4) - 2: bell-shaped in [-2, 2).
inline float bell(uint64_t& s) {
  const float a = uniform01(s), b = uniform01(s), c = uniform01(s), d = uniform01(s);
  return ((a + b) + (c + d)) - 2.0f;
}

// Case c of kCases: weights-like (0.02·bell), the same with every 37th value
// 2000× larger, zeros, ±0.75 per super-block, 1e-6·bell (scales under fp16's
// normal range), and blocks of 32 cycling zero / 3e-8·bell / 0.125 / 3·bell.
inline std::vector<float> make_case(int c) {
  std::vector<float> x(kRowElems * kRows);
  uint64_t s = 0x1234567ull + static_cast<uint64_t>(c);
  for (int i = 0; i < static_cast<int>(x.size()); ++i) {
    const float v = bell(s);
    switch (c) {
      case 0: x[i] = 0.02f * v; break;
      case 1: x[i] = (i % 37 == 5) ? 40.0f * v : 0.02f * v; break;
      case 2: x[i] = 0.0f; break;
      case 3: x[i] = (i / 256) % 2 ? -0.75f : 0.75f; break;
      case 4: x[i] = 1e-6f * v; break;
      default: {
        const int k = (i / 32) % 4;
        x[i] = k == 0 ? 0.0f : k == 1 ? 3e-8f * v : k == 2 ? 0.125f : 3.0f * v;
      }
    }
  }
  return x;
}

}  // namespace lumen::quant::test
