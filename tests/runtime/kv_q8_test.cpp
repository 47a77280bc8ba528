// The Q8_0 KV cache (--kv q8_0). The attention kernel against the scalar twin
// of llama.cpp's flash attention over Q8_0 K and V (attention_twin_q8_0,
// tests/support/attention_twin.h) on random data; then the tiny reference
// model with a q8_0 cache against llama.cpp's logits recorded with
// -ctk q8_0 -ctv q8_0 -fa (tests/data/kv-q8/README.md) and against Lumen's
// own f16 cache; the cache's size, batch invariance and the prefix
// operations with it. ctest also runs this binary with LUMEN_MAX_CPU_ISA=avx2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/runtime/kernels.h"
#include "lumen/runtime/session.h"
#include "runtime_support.h"
#include "support/attention_twin.h"
#include "support/llama_cpp_reference.h"
#include "support/tolerances.h"

namespace lumen::runtime {
namespace {

struct Shape {
  int64_t head_dim, n_kv_heads, kv_head, group, n_tokens, first_n_keys, window;
  float softcap;
};

// The kernel on kv head `kv_head` of a cache with n_kv_heads heads per row,
// against the twin head by head; bitwise, since both do the same operations
// in the same order. Also near the exact (float64) attention on the same
// dequantized K and V, so that the twin itself is attention.
void check_shape(const Shape& s, std::mt19937& rng) {
  SCOPED_TRACE("head_dim " + std::to_string(s.head_dim) + " kv heads " + std::to_string(s.n_kv_heads) + " group " +
               std::to_string(s.group) + " tokens " + std::to_string(s.n_tokens) + " first_n_keys " +
               std::to_string(s.first_n_keys) + " window " + std::to_string(s.window) + " softcap " +
               std::to_string(s.softcap));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t width = s.n_kv_heads * s.head_dim, keys = s.first_n_keys + s.n_tokens - 1;
  const int64_t q_stride = s.n_kv_heads * s.group * s.head_dim;
  std::vector<float> q(static_cast<size_t>(s.n_tokens * q_stride)), kf(static_cast<size_t>(keys * width)),
      vf(kf.size());
  for (float& x : q) x = 2.0f * normal(rng);
  for (float& x : kf) x = normal(rng);
  for (float& x : vf) x = normal(rng);
  std::vector<BlockQ8_0> k(static_cast<size_t>(keys * width / kQ8Block)), v(k.size());
  kernels::to_q8_0(kf.data(), k.data(), keys * width);
  kernels::to_q8_0(vf.data(), v.data(), keys * width);
  ASSERT_EQ(0, std::memcmp(k.data(), test_support::ggml_x86_quantize_row_q8_0(kf.data(), keys * width).data(),
                           k.size() * sizeof(BlockQ8_0)))
      << "to_q8_0 is not ggml's x86 quantize_row_q8_0";

  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t head0 = s.kv_head * s.group;  // the first query head of this kv head
  std::vector<float> out(q.size(), NAN);
  kernels::AttentionBlock b{};
  b.q = q.data() + head0 * s.head_dim;
  b.q_token_stride = q_stride;
  b.k = k.data() + s.kv_head * s.head_dim / kQ8Block;
  b.v = v.data() + s.kv_head * s.head_dim / kQ8Block;
  b.row_stride = width;
  b.n_tokens = s.n_tokens;
  b.n_heads = s.group;
  b.first_n_keys = s.first_n_keys;
  b.head_dim = s.head_dim;
  b.scale = scale;
  b.softcap = s.softcap;
  b.window = s.window;
  b.out = out.data() + head0 * s.head_dim;
  b.out_token_stride = q_stride;
  kernels::attention_block_q8_0(b);

  const int64_t stride = width / kQ8Block;
  for (int64_t t = 0; t < s.n_tokens; ++t)
    for (int64_t g = 0; g < s.group; ++g) {
      const int64_t end = s.first_n_keys + t, begin = s.window > 0 ? std::max<int64_t>(0, end - s.window) : 0;
      const int64_t at = t * q_stride + (head0 + g) * s.head_dim;
      test_support::AttentionTwinQ8Input twin;
      twin.q = q.data() + at;
      twin.k = static_cast<const BlockQ8_0*>(b.k);
      twin.v = static_cast<const BlockQ8_0*>(b.v);
      twin.row_blocks = stride;
      twin.head_dim = s.head_dim;
      twin.begin = begin;
      twin.end = end;
      twin.scale = scale;
      twin.softcap = s.softcap;
      const std::vector<float> want = test_support::attention_twin_q8_0(twin);
      ASSERT_EQ(0, std::memcmp(want.data(), out.data() + at, want.size() * sizeof(float)))
          << "token " << t << " head " << g << ": " << want[0] << " vs " << out[static_cast<size_t>(at)];
      // Exact attention on the dequantized K and V with the f32 query: the
      // query's Q8_0 rounding moves the scores by ~1%.
      std::vector<double> p;
      double max = -INFINITY, total = 0;
      std::vector<float> row(static_cast<size_t>(s.head_dim));
      for (int64_t j = begin; j < end; ++j) {
        dequantize_row_q8_0(static_cast<const BlockQ8_0*>(b.k) + j * stride, row.data(), row.size());
        double dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += double{q[static_cast<size_t>(at + d)]} * row[static_cast<size_t>(d)];
        dot *= scale;
        if (s.softcap > 0) dot = s.softcap * std::tanh(dot / s.softcap);
        p.push_back(dot);
        max = std::max(max, dot);
      }
      for (double& x : p) total += (x = std::exp(x - max));
      for (int64_t d = 0; d < s.head_dim; ++d) {
        double exact = 0;
        for (int64_t j = begin; j < end; ++j)
          exact += p[static_cast<size_t>(j - begin)] / total *
                   (f16_to_f32(v[static_cast<size_t>(j * stride + (s.kv_head * s.head_dim + d) / kQ8Block)].d) *
                    v[static_cast<size_t>(j * stride + (s.kv_head * s.head_dim + d) / kQ8Block)]
                        .qs[(s.kv_head * s.head_dim + d) % kQ8Block]);
        ASSERT_NEAR(exact, out[static_cast<size_t>(at + d)], tolerance::kQ8KvAttentionVsExact) << "dim " << d;
      }
    }
}

TEST(KvQ8Attention, MatchesLlamaCppFlashAttentionTwinBitwise) {
  std::mt19937 rng(20);
  // Head sizes of 1-4 blocks, odd kv head counts and GQA groups (Qwen2.5-0.5B:
  // 2 kv heads of 7), key counts that are not multiples of 32 or 8, blocks
  // shorter than 16 tokens, windows, soft-capping.
  const Shape shapes[] = {
      {32, 1, 0, 1, 1, 1, 0, 0},     {32, 2, 1, 2, 16, 1, 0, 0},   {64, 2, 0, 7, 1, 37, 0, 0},
      {64, 2, 1, 7, 16, 100, 0, 0},  {64, 3, 2, 5, 9, 33, 0, 0},   {96, 3, 1, 3, 5, 71, 0, 0},
      {128, 1, 0, 4, 3, 257, 0, 0},  {64, 2, 1, 7, 16, 200, 48, 0}, {64, 2, 0, 7, 7, 300, 5, 0},
      {128, 4, 3, 2, 11, 60, 0, 30}, {32, 5, 4, 1, 16, 1, 0, 50},  {96, 2, 0, 3, 2, 401, 100, 20},
  };
  for (const Shape& s : shapes) check_shape(s, rng);
}

TEST(KvQ8Attention, AZeroRowQuantizesToZeroAndAttendsToZero) {
  std::vector<float> zero(64, 0.0f);
  std::vector<BlockQ8_0> blocks(2);
  kernels::to_q8_0(zero.data(), blocks.data(), 64);
  for (const BlockQ8_0& b : blocks) {
    EXPECT_EQ(b.d, 0);
    for (int8_t x : b.qs) EXPECT_EQ(x, 0);
  }
  std::vector<float> q(64, 1.0f), out(64, NAN);
  kernels::AttentionBlock a{};
  a.q = q.data();
  a.q_token_stride = 64;
  a.k = a.v = blocks.data();
  a.row_stride = 64;
  a.n_tokens = 1;
  a.n_heads = 1;
  a.first_n_keys = 1;
  a.head_dim = 64;
  a.scale = 0.125f;
  a.out = out.data();
  a.out_token_stride = 64;
  kernels::attention_block_q8_0(a);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// ------------------------------------------------------ the tiny model

class KvQ8Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  static std::unique_ptr<Session> session(KvType type, int n_seq = 1, int64_t n_ctx = 1024) {
    SessionOptions o;
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    o.n_seq = n_seq;
    o.kv_type = type;
    return std::make_unique<Session>(model_, testing::tiny_gguf(), o);
  }

  static std::shared_ptr<const CompiledModel> model_;
};
std::shared_ptr<const CompiledModel> KvQ8Model::model_;

TEST_F(KvQ8Model, LogitsAndGreedyTokensMatchLlamaCppWithAQ8Cache) {
  for (const test_support::LlamaCppPrompt& p : test_support::kv_q8_reference()) {
    const std::string what = std::to_string(p.tokens.size()) + "-token prompt";
    auto q8 = session(KvType::Q8_0);
    const auto l = q8->eval(p.tokens);
    test_support::expect_last_logits_match(l, p, what);
    EXPECT_GT(test_support::expect_teacher_forced_greedy(*q8, l, p, what), 0) << what;
  }
}

// Lumen against itself: max |diff| and rms of two logit vectors.
struct Diff {
  double max = 0, rms = 0;
};
Diff diff(std::span<const float> a, std::span<const float> b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double x = double{a[i]} - b[i];
    d.max = std::max(d.max, std::fabs(x));
    d.rms += x * x;
  }
  d.rms = std::sqrt(d.rms / static_cast<double>(b.size()));
  return d;
}

TEST_F(KvQ8Model, LogitsStayNearTheF16CacheAndItsBytesAre17Of32) {
  const std::vector<test_support::LlamaCppPrompt> prompts = test_support::shared_qwen2_reference();
  auto f16 = session(KvType::F16);
  auto q8 = session(KvType::Q8_0);
  // A Q8_0 block holds 32 values in 34 bytes, f16 in 64.
  EXPECT_EQ(q8->kv_position_bytes() * 32, f16->kv_position_bytes() * 17);
  EXPECT_EQ(q8->load_stats().kv_bytes * 32, f16->load_stats().kv_bytes * 17);
  for (size_t index : {size_t{1}, size_t{3}, size_t{5}}) {
    SCOPED_TRACE("prompt " + std::to_string(index));
    f16->clear();
    q8->clear();
    const auto want = f16->eval(prompts.at(index).tokens);
    const std::vector<float> f16_logits(want.begin(), want.end());
    const Diff d = diff(q8->eval(prompts.at(index).tokens), f16_logits);
    EXPECT_LE(d.max, tolerance::kQ8KvVsF16MaxAbsLogitDiff);
    EXPECT_LE(d.rms, tolerance::kQ8KvVsF16RmsLogitDiff);
  }
}

bool bitwise_equal(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
}


// Alone (prefill, then one token per eval) and among 4 other sequences at
// other positions, its prompt in chunks of 11: bitwise the same logits.
TEST_F(KvQ8Model, ASequenceIsBitwiseTheSameAloneAndAmongOthers) {
  auto alone = session(KvType::Q8_0, 1, 256);
  const int64_t n_vocab = alone->n_vocab();
  const std::vector<int32_t> prompt = testing::tokens(45, 1, n_vocab), follow = testing::tokens(4, 2, n_vocab);
  std::vector<std::vector<float>> expected;
  auto l = alone->eval(prompt);
  expected.emplace_back(l.begin(), l.end());
  for (int32_t t : follow) {
    l = alone->eval(std::span<const int32_t>(&t, 1));
    expected.emplace_back(l.begin(), l.end());
  }
  auto s = session(KvType::Q8_0, 5, 256);
  std::vector<std::vector<int32_t>> others;
  for (int j = 0; j < 4; ++j) {
    others.push_back(testing::tokens(120, 10 + static_cast<uint32_t>(j), n_vocab));
    SeqTokens e{j, std::span<const int32_t>(others.back()).first(static_cast<size_t>(5 + 13 * j)), false};
    s->step(std::span<const SeqTokens>(&e, 1));
  }
  auto step = [&](std::span<const int32_t> mine) {
    std::vector<SeqTokens> batch;
    for (int j = 0; j < 4; ++j)
      batch.push_back({j, std::span<const int32_t>(others[static_cast<size_t>(j)]).subspan(
                              static_cast<size_t>(s->position(j)), 2),
                       false});
    batch.push_back({4, mine, false});
    s->step(batch);
    return s->step_logits(batch.size() - 1);
  };
  for (size_t at = 0; at < prompt.size(); at += 11)
    l = step(std::span<const int32_t>(prompt).subspan(at, std::min<size_t>(11, prompt.size() - at)));
  EXPECT_TRUE(bitwise_equal(l, expected[0])) << "after the prompt";
  for (size_t i = 0; i < follow.size(); ++i)
    EXPECT_TRUE(bitwise_equal(step(std::span<const int32_t>(&follow[i], 1)), expected[i + 1])) << "decode step " << i;
}

// The prefix cache's operations move Q8_0 blocks exactly: a copied,
// restored or truncated prefix continues bitwise as a fresh one.
TEST_F(KvQ8Model, CopiedRestoredAndTruncatedPrefixesContinueBitwiseAsFreshOnes) {
  auto s = session(KvType::Q8_0, 3, 256);
  const int64_t n_vocab = s->n_vocab();
  const std::vector<int32_t> prompt = testing::tokens(50, 11, n_vocab), rest = testing::tokens(5, 12, n_vocab);
  const int64_t keep = 37;
  auto fresh = session(KvType::Q8_0, 1, 256);
  fresh->eval(std::span<const int32_t>(prompt).first(static_cast<size_t>(keep)));
  auto l = fresh->eval(rest);
  const std::vector<float> want(l.begin(), l.end());
  auto continue_in = [&](int slot) {
    SeqTokens e{slot, rest, false};
    s->step(std::span<const SeqTokens>(&e, 1));
    return bitwise_equal(s->step_logits(0), want);
  };
  s->step(std::vector<SeqTokens>{{0, prompt, false}});
  std::vector<uint8_t> saved(prompt.size() * s->kv_position_bytes());
  s->save_prefix(0, static_cast<int64_t>(prompt.size()), saved);
  s->copy_prefix(0, 1, keep);
  EXPECT_TRUE(continue_in(1)) << "copied";
  s->restore_prefix(2, keep, saved);
  EXPECT_TRUE(continue_in(2)) << "restored";
  s->truncate(0, keep);
  EXPECT_TRUE(continue_in(0)) << "truncated";
}

TEST(KvQ8Names, TheFlagNamesQ8_0) {
  EXPECT_EQ(parse_kv_type("q8_0"), KvType::Q8_0);
  EXPECT_EQ(to_string(KvType::Q8_0), "q8_0");
  EXPECT_FALSE(parse_kv_type("q4_0").has_value());
}

}  // namespace
}  // namespace lumen::runtime
