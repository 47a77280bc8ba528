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
// Quantized weight types (tests/data/weight-types, issue 20): llama.cpp
// quantizes every matmul's activations too (Q8_0 blocks, Q8_K for the
// k-quants), and on the 2-layer synthetic models of each type it is itself
// max|d| 0.23-0.38 (rms 0.055-0.089) from a float64 forward over the
// dequantized weights (that README), as far as an independent forward may
// be on the other side; rms keeps kMaxRmsLogitDiff.
inline constexpr double kMaxAbsLogitDiffQuantized = 0.6;

// ---- embeddings against llama-server --embeddings (tests/data/embeddings/)
// The pooled, L2-normalized final-norm outputs of the reference model, 6
// inputs x 3 poolings, measured 2026-12-02 (Zen 5, AVX-512 VNNI): last and
// cls bit-identical to llama-server's, mean within 4.5e-8 (Lumen sums the
// rows in double, ggml in float); cosine 1 - 1e-7 or closer. The bounds leave
// room for other ISAs' few-ulp differences carried through the layers; a
// wrong pooling moves elements by 0.15-0.47 (cosine 0.03-0.82).
inline constexpr double kEmbeddingMinCosine = 0.999;
inline constexpr double kEmbeddingMaxAbsDiff = 1e-4;

// ---- Lumen against itself
// The same model run as one batch or token by token: the prefill (M > 1)
// and decode (M = 1) kernels sum the same Q8_0 products in a different order,
// and attention sees the KV cache in f16 either way. On the binding tests'
// model (logits ~0.1-1) the measured difference is below 1e-4.
inline constexpr double kBatchVsTokenLogitDiff = 1e-3;
// A k-quant file run in its own packed format (exact weights) against an F32
// file of its dequantized values (requantized to Q8_0 by the fallback),
// relative to the spread of the logits: the Q8_0 rounding of the weights is
// what differs, worst for Q6_K, whose random int8 sub-block scales put a
// small and a large 16-block into one 32-block. Measured on the binding
// tests' model (Xeon, AVX-512 VNNI, 2026-12-02): Q4_K 0.10%, Q5_K 0.07%,
// Q6_K 2.3%; packing a sub-block or a row group wrong moves them by the
// whole spread.
inline constexpr double kNativeVsRequantizedLogitSpread = 0.04;

// ---- the Q8_0 KV cache (tests/runtime/kv_q8_test.cpp)
// Against llama.cpp with -ctk q8_0 -ctv q8_0 -fa the llama.cpp bounds above
// apply (measured on an AVX-512 VNNI host: bit-identical on both recorded
// prompts). Against Lumen's own f16 cache the logits move by what quantizing
// K and V costs: measured max|d| 0.30-0.32 / rms 0.064-0.068 on prompts 1, 3
// and 5 of the reference model (llama.cpp's q8_0 cache moves its own logits
// by 0.30-0.31 / 0.064-0.066 from its f16 one).
inline constexpr double kQ8KvVsF16MaxAbsLogitDiff = 0.5;
inline constexpr double kQ8KvVsF16RmsLogitDiff = 0.15;
// The q8_0 attention kernel against exact attention on the same dequantized
// K and V: the query's own Q8_0 rounding (up to 1/254 of its largest element
// per block) moves the scores; measured at most 0.032 on the kernel test's
// random shapes (outputs of magnitude ~1).
inline constexpr double kQ8KvAttentionVsExact = 0.05;

// ---- kernels and ops against their scalar twins (relative to the sum of
// the terms' magnitudes, i.e. to what fp32 rounding can lose)
// A dot product of k terms summed in a different order in fp32: each partial
// sum rounds at 2^-24; k <= ~64 blocks of accumulation gives < 4e-6.
inline constexpr double kFp32ReorderRelative = 4e-6;
// One fp32 rounding of a value (2^-23: one ulp at the value's magnitude).
inline constexpr double kFp32Ulp = 0x1p-23;
// rms_norm against its twin, in fp32 ulps of the result: the double sum of
// squares in another order can move the float mean by one ulp, and the scale
// and weight products round once more.
inline constexpr double kRmsNormUlps = 2;
// silu(x) = x / (1 + exp(-x)) with a vector exp (a few ulps) and one division,
// in fp32 ulps of the true value; the matmul epilogue's worst over gates in
// [-80, 90] (printed by MatMulKernels.SiluIsAccurateToAFewUlp) measured 1.99 on
// all four ISAs (Zen 5, 2026-12-01).
inline constexpr double kSiluUlps = 4;
// One f16 rounding (2^-10 relative: one ulp of f16's 10-bit mantissa). The
// attention's probabilities are rounded to f16 for an f16 cache; a few-ulp
// fp32 difference before that rounding can move one by this much.
inline constexpr double kF16Ulp = 0x1p-10;
// A vectorized exp (polynomial after range reduction) against std::exp in
// double: a few ulps, plus the one rounding of the argument.
inline constexpr double kVectorExpRelative = 1e-6;
// An attention output element (probabilities summing to one times unit-normal
// V) beyond its relative bound: the vector exp's error on the probabilities
// (kVectorExpRelative) times values of order one.
inline constexpr double kAttentionOutputAbsolute = 1e-6;
// The blocked attention kernels against the twin (tests/support/attention_twin.h)
// over up to 400 keys, relative to 1 + |value|: scores and outputs summed in
// tile order, the vector exp, and for an f16 cache probabilities whose f16
// rounding (kF16Ulp) those fp32 differences can flip; two f16 ulps. Measured
// worst over AttentionKernels' shapes (Zen 5, AVX-512 and AVX2 paths,
// 2026-12-01): 6.8e-5 with an f16 cache, 6.5e-7 with f32.
inline constexpr double kAttentionBlockRelative = 2e-3;

// ---- absolute floors beside relative bounds
// For an expected value of zero (silu(0), a zero row): far below any nonzero
// value the tests produce, so only a result within rounding of zero passes.
inline constexpr double kZeroFloor = 1e-30;
// Below f32's normal range (1.2e-38) results are denormal, or zero where the
// exponential is clamped (below about -87.3, as in ggml): compared absolutely.
inline constexpr double kF32DenormalAbsolute = 1e-37;
// A sum of probabilities that should be one, summed in fp32 over up to a few
// thousand terms.
inline constexpr double kProbabilitySum = 1e-5;
// Probabilities from the sampler (a handful of candidates, fp32).
inline constexpr float kSamplerProbability = 1e-6f;

// ---- quantization (ggml's Q8_0: round(x / d) with d = amax / 127)
// Dequantized values are within half a quantization step d of the input, plus
// the f16 rounding of d (2^-11 relative) times up to 127 quants:
// 0.5 + 127 * 2^-11 = 0.562 steps, rounded up.
inline constexpr float kQ8HalfStep = 0.57f;

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
