// Every numeric tolerance the tests use, with where it comes from. A test
// that compares floats takes its bound from here, so that loosening one is a
// visible, reviewed change (docs/testing.md lists them).
#pragma once

namespace lumen::tolerance {

// ---- against llama.cpp (../shared/reference/README.md, "What tolerance to use")
// Two independent float64 forward passes differ from llama.cpp's logits by
// max|d| 0.20-0.38 and rms 0.04-0.08 (logit std ~3); the bugs the README
// injected (wrong rope, GQA mapping, rope base) move them by 6-19 (rms 1.4-3.8).
inline constexpr double kMaxAbsLogitDiff = 0.5;
inline constexpr double kMaxRmsLogitDiff = 0.15;
// Top-1 (and teacher-forced greedy) tokens must agree where llama.cpp's own
// top1 - top2 margin exceeds this; below it rounding order alone can flip them.
inline constexpr double kDecisiveMargin = 0.5;

// ---- Lumen against itself
// The same model run as one batch or token by token: the prefill (M > 1)
// and decode (M = 1) kernels sum the same Q8_0 products in a different order,
// and attention sees the KV cache in f16 either way. On the binding tests'
// model (logits ~0.1-1) the measured difference is below 1e-4.
inline constexpr double kBatchVsTokenLogitDiff = 1e-3;

// ---- kernels and ops against their scalar twins (relative to the sum of
// the terms' magnitudes, i.e. to what fp32 rounding can lose)
// A dot product of k terms summed in a different order in fp32: each partial
// sum rounds at 2^-24; k <= ~64 blocks of accumulation gives < 4e-6.
inline constexpr double kFp32ReorderRelative = 4e-6;
// One fp32 rounding of a value (2^-23: one ulp at the value's magnitude).
inline constexpr double kFp32Ulp = 0x1p-23;
// One f16 rounding (2^-10 relative: one ulp of f16's 10-bit mantissa). The
// attention's probabilities are rounded to f16 for an f16 cache; a few-ulp
// fp32 difference before that rounding can move one by this much.
inline constexpr double kF16Ulp = 0x1p-10;
// A vectorized exp (polynomial after range reduction) against std::exp in
// double: a few ulps, plus the one rounding of the argument.
inline constexpr double kVectorExpRelative = 1e-6;
// A sum of probabilities that should be one, summed in fp32 over up to a few
// thousand terms.
inline constexpr double kProbabilitySum = 1e-5;
// Probabilities from the sampler (a handful of candidates, fp32).
inline constexpr float kSamplerProbability = 1e-6f;

// ---- quantization (ggml's Q8_0: round(x / d) with d = amax / 127)
// Dequantized values are within half a quantization step of the input;
// 0.51 leaves room for the f16 rounding of d.
inline constexpr float kQ8HalfStep = 0.51f;

// ---- statistics of random data (fixed seeds, so these are deterministic)
// The mean and standard deviation of >= 64 N(mean, std^2) samples, after Q8_0
// rounding: the mean within 0.35 std, the std within 30 % (both about 3 sigma
// of the sampling error at 64 values).
inline constexpr double kSampleMeanInStds = 0.35;
inline constexpr double kSampleStdRelative = 0.3;
// Counts of n draws with probability p: within this many binomial standard
// deviations sqrt(n p (1 - p)).
inline constexpr double kBinomialSigmas = 5.2;

}  // namespace lumen::tolerance
