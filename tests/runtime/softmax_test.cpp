// The standalone Softmax op: kernels::softmax_row against a plain double-precision
// reference (odd widths, large magnitudes, equal values, in place), and the
// op run by a Session at the end of the qwen2 program (probabilities instead
// of logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "lumen/runtime/kernels.h"
#include "lumen/runtime/session.h"
#include "runtime_support.h"
#include "support/tolerances.h"

namespace lumen::runtime {
namespace {

std::vector<double> reference_softmax(const std::vector<float>& x) {
  double max = -INFINITY;
  for (float v : x) max = std::max(max, static_cast<double>(v));
  std::vector<double> y(x.size());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += y[i] = std::exp(static_cast<double>(x[i]) - max);
  for (double& v : y) v /= sum;
  return y;
}

void expect_matches_reference(const std::vector<float>& x, const std::string& what) {
  std::vector<float> y(x.size(), -1.0f);
  kernels::softmax_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  std::vector<double> ref = reference_softmax(x);
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(y[i])) << what << " at " << i;
    // x - max is rounded to f32 (relative error 2^-24 of |x - max| in the
    // exponent), then f32 exp and one rounded reciprocal: a few ulps; plus
    // slack for results in the f32 denormal range.
    const double spread = std::fabs(static_cast<double>(x[i]) - max);
    const double bound =
        ref[i] * (tolerance::kVectorExpRelative + tolerance::kFp32Ulp * spread) + tolerance::kF32DenormalAbsolute;
    EXPECT_NEAR(y[i], ref[i], bound) << what << " at " << i;
    sum += y[i];
  }
  EXPECT_NEAR(sum, 1.0, tolerance::kProbabilitySum) << what;
  // In place gives the same bits.
  std::vector<float> inplace = x;
  kernels::softmax_row(inplace.data(), inplace.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(inplace, y) << what;
}

TEST(Softmax, MatchesTheReferenceOnRandomRowsOfOddWidths) {
  std::mt19937 rng(1234);
  for (int64_t n : {1, 3, 7, 17, 31, 33, 255, 1001}) {
    for (float scale : {1.0f, 30.0f, 1e4f}) {
      std::normal_distribution<float> dist(0.0f, scale);
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = dist(rng);
      expect_matches_reference(x, "n=" + std::to_string(n) + " scale=" + std::to_string(scale));
    }
  }
}

TEST(Softmax, LargeMagnitudesDoNotOverflow) {
  // Without max subtraction exp(1e30) is inf and every output NaN.
  std::vector<float> x = {1e30f, 1e30f - 1e24f, -1e30f, 3e38f, 3e38f, -3e38f, 0.0f};
  expect_matches_reference(x, "huge");
  std::vector<float> y(x.size());
  kernels::softmax_row(x.data(), y.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[4], 0.5f);
  EXPECT_EQ(y[0], 0.0f);
  expect_matches_reference({-88.0f, -87.5f, -100.0f, -1000.0f, -90.0f}, "all negative");
}

TEST(Softmax, EqualValuesGiveAUniformRow) {
  for (float value : {0.0f, -5.5f, 1e20f, -1e20f}) {
    for (int64_t n : {1, 5, 64, 97}) {
      std::vector<float> x(static_cast<size_t>(n), value), y(static_cast<size_t>(n));
      kernels::softmax_row(x.data(), y.data(), n);
      // exp(0) = 1 exactly, so every element is (float)(1.0/n).
      for (float v : y) EXPECT_EQ(v, static_cast<float>(1.0 / static_cast<double>(n))) << value << " n=" << n;
    }
  }
}

TEST(Softmax, RunsAsAProgramOpInASession) {
  program::Program plain = testing::qwen2_program(best_isa(cpu_features()));
  // The same program with a Softmax after the logits, into a buffer appended to the arena.
  program::Program with_softmax = plain;
  const program::Buffer& logits = plain.buffers.at(static_cast<size_t>(plain.logits_buffer));
  using program::Dim;
  program::Buffer probs{"probs", program::DType::F32, Dim::constant(1), logits.cols,
                        lumen::ops::align_up(plain.arena_bytes, 64)};
  with_softmax.arena_bytes = probs.offset + logits.cols * Dim::constant(4);
  with_softmax.buffers.push_back(probs);
  program::Op op;
  op.kind = ::lumen::ops::OpId::Softmax;
  op.inputs = {program::View{plain.logits_buffer, Dim::constant(0), logits.cols}};
  op.output = program::View{static_cast<int>(with_softmax.buffers.size() - 1), Dim::constant(0), logits.cols};
  with_softmax.post.push_back(op);
  with_softmax.logits_buffer = op.output.buffer;
  // Through the text form, as model.so carries it.
  with_softmax = program::deserialize(program::serialize(with_softmax));

  const Isa isa = best_isa(cpu_features());
  SessionOptions o;
  o.n_threads = 2;
  o.n_ctx = 64;
  Session reference(testing::in_process_model(plain, isa), testing::tiny_gguf(), o);
  Session session(testing::in_process_model(with_softmax, isa), testing::tiny_gguf(), o);
  const std::vector<int32_t> tokens = {1, 5, 42, 7, 300};
  for (int step = 0; step < 2; ++step) {  // prefill, then one decode step
    std::span<const int32_t> batch = step == 0 ? std::span<const int32_t>(tokens) : std::span<const int32_t>(&tokens[1], 1);
    std::span<const float> raw = reference.eval(batch);
    std::vector<float> expected(raw.begin(), raw.end());
    kernels::softmax_row(expected.data(), expected.data(), static_cast<int64_t>(expected.size()));
    std::span<const float> got = session.eval(batch);
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin())) << "step " << step;
    double sum = 0;
    for (float p : got) sum += p;
    EXPECT_NEAR(sum, 1.0, tolerance::kProbabilitySum);
  }
}

}  // namespace
}  // namespace lumen::runtime
