// Sampler tests: greedy, each filter of the chain on hand-made distributions,
// penalties, logit biases, seeded reproducibility, a full-size vocabulary, and streaming
// (stop strings, never half a UTF-8 character).
#include "lumen/gguf/gguf.h"
#include "lumen/runtime/sampler.h"
#include "lumen/text/tokenizer.h"
#include "support/tolerances.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

namespace lumen {
namespace {

// Sampling parameters with every filter off and temperature 1.
SamplerParams plain(uint64_t seed = 1) {
  SamplerParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.temp = 1.0f;
  p.seed = seed;
  return p;
}

std::vector<float> log_probs(std::vector<float> probs) {
  for (float& p : probs) p = std::log(p);
  return probs;
}

std::vector<int32_t> ids(const std::vector<Candidate>& c) {
  std::vector<int32_t> out;
  for (const Candidate& x : c) out.push_back(x.id);
  return out;
}

TEST(Sampler, DefaultsMatchLlamaCpp) {
  const SamplerParams p;
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.top_p, 0.95f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.temp, 0.8f);
  EXPECT_FLOAT_EQ(p.repeat_penalty, 1.0f);
  EXPECT_EQ(p.repeat_last_n, 64);
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  SamplerParams p;
  p.temp = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 3.0f}), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(s.sample(std::vector<float>{nan, -5.0f, nan}), 1);
}

TEST(Sampler, TopKKeepsTheKBest) {
  SamplerParams p = plain();
  p.top_k = 3;
  const Sampler s(p);
  const auto c = s.candidates(std::vector<float>{0.5f, 4.0f, 1.0f, 3.0f, 2.0f, 3.0f});
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 3, 5}));
  EXPECT_NEAR(c[0].p + c[1].p + c[2].p, 1.0f, tolerance::kSamplerProbability);
  EXPECT_FLOAT_EQ(c[1].p, c[2].p);
}

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  const std::vector<float> logits = log_probs({0.15f, 0.5f, 0.05f, 0.3f});
  SamplerParams p = plain();
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.5 + 0.3
  EXPECT_EQ(ids(Sampler(p).candidates(logits)), (std::vector<int32_t>{1, 3}));
  p.top_p = 0.85f;
  EXPECT_EQ(ids(Sampler(p).candidates(logits)), (std::vector<int32_t>{1, 3, 0}));
  p.top_p = 0.4f;
  EXPECT_EQ(ids(Sampler(p).candidates(logits)), (std::vector<int32_t>{1}));
}

TEST(Sampler, MinPKeepsTokensNearTheBest) {
  const std::vector<float> logits = log_probs({0.15f, 0.5f, 0.05f, 0.3f});
  SamplerParams p = plain();
  p.min_p = 0.2f;  // keep p >= 0.2 * 0.5 = 0.1
  const auto c = Sampler(p).candidates(logits);
  EXPECT_EQ(ids(c), (std::vector<int32_t>{1, 3, 0}));
  // Renormalised over the survivors.
  EXPECT_NEAR(c[0].p, 0.5f / 0.95f, tolerance::kSamplerProbability);
}

TEST(Sampler, FiltersRunBeforeTemperature) {
  // top-p sees temperature-1 probabilities: with temp 0.1 the kept set is the same.
  const std::vector<float> logits = log_probs({0.15f, 0.5f, 0.05f, 0.3f});
  SamplerParams p = plain();
  p.top_p = 0.75f;
  p.temp = 0.5f;
  const auto c = Sampler(p).candidates(logits);
  ASSERT_EQ(ids(c), (std::vector<int32_t>{1, 3}));
  // Temperature 0.5 squares the probabilities before renormalising.
  EXPECT_NEAR(c[0].p, 0.25f / (0.25f + 0.09f), tolerance::kSamplerProbability);
}

TEST(Sampler, RepeatPenaltyLowersRecentTokens) {
  SamplerParams p = plain();
  p.temp = 0.0f;
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  const std::vector<float> logits{3.0f, 2.0f, -1.0f, -1.5f};
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);  // 3 -> 1.5: token 1 wins now
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);  // 2 -> 1: token 0 (1.5) wins again
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(2);
  s.accept(3);  // the window of 2 forgets 0 and 1
  EXPECT_EQ(s.sample(logits), 0);

  // Negative logits are multiplied, so they also go down.
  SamplerParams q = plain();
  q.repeat_penalty = 2.0f;
  Sampler t(q);
  t.accept(2);
  const auto c = t.candidates(logits);
  const auto it = std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.id == 2; });
  ASSERT_NE(it, c.end());
  EXPECT_FLOAT_EQ(it->logit, -2.0f);
}

TEST(Sampler, FixedSeedIsReproducible) {
  std::vector<float> logits(1000);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& l : logits) l = normal(gen);

  SamplerParams p;  // llama.cpp defaults
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> first, second;
  for (int i = 0; i < 50; ++i) {
    first.push_back(a.sample(logits));
    second.push_back(b.sample(logits));
  }
  EXPECT_EQ(first, second);
  a.reset();
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits), first[i]);
  // Draws come from the candidate set and are not all the same token.
  const auto candidates = ids(a.candidates(logits));
  for (int32_t id : first) EXPECT_NE(std::find(candidates.begin(), candidates.end(), id), candidates.end());
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 1u);

  p.seed = 4321;
  Sampler c(p);
  std::vector<int32_t> third;
  for (int i = 0; i < 50; ++i) third.push_back(c.sample(logits));
  EXPECT_NE(first, third);
}

TEST(Sampler, DrawFrequenciesFollowProbabilities) {
  const std::vector<float> logits = log_probs({0.2f, 0.5f, 0.3f});
  Sampler s(plain(42));
  std::vector<int> counts(3, 0);
  constexpr int kDraws = 4000;
  for (int i = 0; i < kDraws; ++i) ++counts[s.sample(logits)];
  // Fixed seed, so this is deterministic.
  const double probability[3] = {0.2, 0.5, 0.3};
  for (int i = 0; i < 3; ++i) {
    const double sigma = std::sqrt(kDraws * probability[i] * (1 - probability[i]));
    EXPECT_NEAR(counts[i], probability[i] * kDraws, tolerance::kBinomialSigmas * sigma) << i;
  }
}

TEST(Sampler, FullVocabularyTopK) {
  std::vector<float> logits(151936);
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : logits) l = normal(gen);
  SamplerParams p = plain();
  p.top_k = 40;
  const auto c = Sampler(p).candidates(logits);
  ASSERT_EQ(c.size(), 40u);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  order.resize(40);
  EXPECT_EQ(ids(c), order);

  Sampler defaults{SamplerParams{.seed = 5, .logit_bias = {}}};
  const int32_t id = defaults.sample(logits);
  EXPECT_NE(std::find(order.begin(), order.end(), id), order.end());
}

TEST(Sampler, RejectsBadInput) {
  Sampler s(plain());
  EXPECT_THROW(s.sample(std::vector<float>{}), std::invalid_argument);
  SamplerParams p = plain();
  p.repeat_last_n = -1;
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
  p = plain();
  p.temp = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
  // All logits -inf or NaN still yield a token.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.sample(std::vector<float>{-inf, -inf}), 0);
}

// ---------------------------------------------------------------------------
// Stop strings

// A +100 bias makes a token the greedy pick and all but certain when
// sampling; -100 and -inf take it out; biases of one id add; the bias comes
// before the penalties (a penalized token keeps its bias).
TEST(Sampler, LogitBiasForcesAndForbidsTokens) {
  const std::vector<float> logits = {3.0f, 1.0f, 0.5f, -2.0f};
  SamplerParams p = plain(7);
  p.temp = 0.0f;
  p.logit_bias = {{3, 100.0f}};
  EXPECT_EQ(Sampler(p).sample(logits), 3);
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Sampler(p).sample(logits), 1);
  p.logit_bias = {{0, -std::numeric_limits<float>::infinity()}, {1, -50.0f}, {1, -50.0f}};
  EXPECT_EQ(Sampler(p).sample(logits), 2);

  p = plain(7);
  p.logit_bias = {{3, 100.0f}};
  Sampler forced(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(forced.sample(logits), 3);
  p.logit_bias = {{0, -std::numeric_limits<float>::infinity()}};
  Sampler banned(p);
  for (int i = 0; i < 200; ++i) EXPECT_NE(banned.sample(logits), 0);
  // Biased, then penalized: the candidate's logit is (3 + 2) / 2.
  p.repeat_penalty = 2.0f;
  p.logit_bias = {{0, 2.0f}};
  Sampler both(p);
  both.accept(0);
  const std::vector<Candidate> c = both.candidates(logits);
  const auto it = std::find_if(c.begin(), c.end(), [](const Candidate& x) { return x.id == 0; });
  ASSERT_NE(it, c.end());
  EXPECT_FLOAT_EQ(it->logit, 2.5f);
}

TEST(Sampler, LogitBiasWithoutEffectChangesNothing) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> logits(1000);
  for (float& x : logits) x = normal(rng);
  SamplerParams p;
  p.seed = 11;
  p.repeat_penalty = 1.3f;
  Sampler plain_sampler(p);
  p.logit_bias = {{5, 0.0f}, {900, 0.0f}};
  Sampler zero_bias(p);
  for (int i = 0; i < 50; ++i) {
    const int32_t a = plain_sampler.sample(logits), b = zero_bias.sample(logits);
    ASSERT_EQ(a, b) << i;
    plain_sampler.accept(a);
    zero_bias.accept(b);
  }
}

TEST(Sampler, LogitBiasErrors) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(logit_bias_error(std::vector<LogitBias>{{0, 100.0f}, {9, -100.0f}, {3, -inf}}, 10), "");
  EXPECT_NE(logit_bias_error(std::vector<LogitBias>{{10, 1.0f}}, 10).find("token id 10 is outside"), std::string::npos);
  EXPECT_NE(logit_bias_error(std::vector<LogitBias>{{-1, 1.0f}}, 10).find("token id -1"), std::string::npos);
  EXPECT_NE(logit_bias_error(std::vector<LogitBias>{{1, 100.5f}}, 10).find("[-100, 100]"), std::string::npos);
  EXPECT_NE(logit_bias_error(std::vector<LogitBias>{{1, inf}}, 10), "");
  EXPECT_NE(logit_bias_error(std::vector<LogitBias>{{1, std::nanf("")}}, 10), "");
  SamplerParams p;
  p.logit_bias = {{1, std::nanf("")}};
  EXPECT_THROW(Sampler{p}, std::invalid_argument);
  p.logit_bias = {{4, 1.0f}};
  Sampler s(p);
  EXPECT_THROW(s.sample(std::vector<float>{0.0f, 1.0f, 2.0f}), std::invalid_argument);
}

TEST(StopStrings, FindsTheEarliestCompleteMatch) {
  const std::vector<std::string> stops{"User:", "\n\n"};
  StopScan scan = scan_stop_strings("Hi.\n\nUser: x", stops);
  EXPECT_EQ(scan.stop_at, 3u);
  EXPECT_EQ(scan.safe, 3u);
  scan = scan_stop_strings("Hello Us", stops);
  EXPECT_EQ(scan.stop_at, StopScan::npos);
  EXPECT_EQ(scan.safe, 6u);  // "Us" may become "User:"
  scan = scan_stop_strings("Hello", stops);
  EXPECT_EQ(scan.safe, 5u);
  scan = scan_stop_strings("a\n", stops);
  EXPECT_EQ(scan.safe, 1u);
}

TEST(TextStreamer, HoldsBackPossibleStopAndCutsAtIt) {
  TextStreamer s({"<END>"});
  EXPECT_EQ(s.push("Hello <"), "Hello ");
  EXPECT_EQ(s.push("EN"), "");
  EXPECT_EQ(s.push("X"), "<ENX");  // not a stop after all
  EXPECT_EQ(s.push(" bye<E"), " bye");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("ND> ignored"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.push("more"), "");
  EXPECT_EQ(s.finish(), "");
  EXPECT_EQ(s.text(), "Hello <ENX bye");
}

TEST(TextStreamer, NeverSplitsUtf8AndFlushesAtTheEnd) {
  TextStreamer s;
  EXPECT_EQ(s.push("a\xE4\xBD"), "a");
  EXPECT_EQ(s.push("\xA0" "b"), "\xE4\xBD\xA0" "b");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.finish(), "\xF0\x9F");
}

TEST(TextStreamer, HoldsIncompleteSequences) {
  TextStreamer s;
  // U+1F680 (4 bytes) arriving one byte at a time.
  EXPECT_EQ(s.push("a\xF0"), "a");
  EXPECT_EQ(s.push("\x9F"), "");
  EXPECT_EQ(s.push("\x9A"), "");
  EXPECT_EQ(s.push("\x80" "b"), "\xF0\x9F\x9A\x80" "b");
  // Two characters split across pushes.
  EXPECT_EQ(s.push("\xC3"), "");
  EXPECT_EQ(s.push("\xB1\xE4\xB8"), "\xC3\xB1");
  EXPECT_EQ(s.push("\xAD"), "\xE4\xB8\xAD");
  EXPECT_EQ(s.finish(), "");
}

TEST(TextStreamer, PassesInvalidBytesAndFinishesWithTheRest) {
  TextStreamer s;
  EXPECT_EQ(s.push("\x80\xFF"), "\x80\xFF");  // can never complete: not held
  EXPECT_EQ(s.push("x\xE4"), "x");
  EXPECT_EQ(s.finish(), "\xE4");
  EXPECT_EQ(s.finish(), "");
}

// Each emoji spans several byte-level tokens of the Qwen vocabulary; the
// streamed output is the same text and every chunk is whole characters.
TEST(TextStreamer, StreamsTokensOfMultiByteCharacters) {
  const gguf::File file = gguf::File::open(std::string(LUMEN_SHARED_DIR) + "/reference/tiny-qwen2-a.gguf");
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const std::string text = "🚀🔥👍🏽 ñ 你好";
  TextStreamer s;
  std::string streamed;
  for (int32_t id : tok.encode(text)) {
    const std::string chunk = s.push(tok.token_text(id));
    EXPECT_EQ(unicode::decode_utf8(chunk).size(),
              static_cast<size_t>(std::count_if(chunk.begin(), chunk.end(),
                                                [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; })));
    streamed += chunk;
  }
  streamed += s.finish();
  EXPECT_EQ(streamed, text);
}

TEST(TextStreamer, StopStringSplitAcrossManyPieces) {
  TextStreamer s({"stop here"});
  std::string shown;
  for (char c : std::string("we never stop; we stop here at last")) shown += s.push(std::string(1, c));
  shown += s.finish();
  EXPECT_EQ(shown, "we never stop; we ");
  EXPECT_TRUE(s.stopped());
}

}  // namespace
}  // namespace lumen
