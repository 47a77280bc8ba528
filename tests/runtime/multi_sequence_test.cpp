// Session::step: several sequences in one forward pass, each in its own KV
// slot. The point is batch invariance: a sequence's logits are bitwise the
// same alone (eval: prefill then N=1 decode) and inside batches of 2, 5 and 8
// sequences at mixed positions, with its prompt cut into other chunks.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "lumen/runtime/session.h"
#include "runtime_support.h"

namespace lumen::runtime {
namespace {

class MultiSequence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  static std::unique_ptr<Session> session(int n_seq, int64_t batch = 128, bool all_logits = false) {
    SessionOptions o;
    o.n_threads = 2;
    o.n_batch = batch;
    o.n_ctx = 256;
    o.n_seq = n_seq;
    o.all_logits = all_logits;
    return std::make_unique<Session>(model_, testing::tiny_gguf(), o);
  }

  static std::vector<int32_t> tokens(int64_t count, uint32_t seed, int64_t n_vocab) {
    return testing::tokens(count, seed, n_vocab);
  }

  static bool bitwise_equal(std::span<const float> a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), b.size() * sizeof(float)) == 0;
  }

  static std::shared_ptr<const CompiledModel> model_;
};
std::shared_ptr<const CompiledModel> MultiSequence::model_;

TEST_F(MultiSequence, LogitsAreBitwiseTheSameAloneAndInBatchesOf2And5And8) {
  auto alone = session(1, 512);
  const int64_t n_vocab = alone->n_vocab();
  const std::vector<int32_t> prompt = tokens(45, 1, n_vocab);
  const std::vector<int32_t> follow = tokens(6, 2, n_vocab);
  // Alone, as lumen-run does it: one prefill, then one token per eval.
  std::vector<std::vector<float>> expected;
  {
    auto l = alone->eval(prompt);
    expected.emplace_back(l.begin(), l.end());
    for (int32_t t : follow) {
      l = alone->eval(std::span<const int32_t>(&t, 1));
      expected.emplace_back(l.begin(), l.end());
    }
  }
  for (int others_plus_one : {1, 2, 5, 8}) {
    SCOPED_TRACE("batch of " + std::to_string(others_plus_one));
    auto s = session(8);
    const int target = others_plus_one - 1;  // the last slot in use, so its rows come after the others'
    // The other sequences start at different positions.
    std::vector<std::vector<int32_t>> other_tokens;
    for (int j = 0; j < target; ++j) {
      other_tokens.push_back(tokens(200, 10 + static_cast<uint32_t>(j), n_vocab));
      std::vector<int32_t> start(other_tokens.back().begin(), other_tokens.back().begin() + 3 + 11 * j);
      SeqTokens e{j, start, false};
      s->step(std::span<const SeqTokens>(&e, 1));
    }
    std::vector<int64_t> next(static_cast<size_t>(target), 0);
    auto step_with_others = [&](std::span<const int32_t> mine, bool others_first) {
      std::vector<SeqTokens> batch;
      SeqTokens me{target, mine, false};
      if (!others_first) batch.push_back(me);
      for (int j = 0; j < target; ++j) {
        const size_t at = static_cast<size_t>(s->position(j));
        batch.push_back(SeqTokens{j, std::span<const int32_t>(other_tokens[static_cast<size_t>(j)]).subspan(at, 1)});
      }
      if (others_first) batch.push_back(me);
      s->step(batch);
      return s->step_logits(others_first ? batch.size() - 1 : 0);
    };
    // The prompt in chunks of 13 (its attention blocks fall elsewhere than alone).
    std::span<const float> l;
    for (size_t at = 0; at < prompt.size(); at += 13)
      l = step_with_others(std::span<const int32_t>(prompt).subspan(at, std::min<size_t>(13, prompt.size() - at)),
                           at % 2 == 0);
    EXPECT_TRUE(bitwise_equal(l, expected[0])) << "after the prompt";
    for (size_t i = 0; i < follow.size(); ++i)
      EXPECT_TRUE(bitwise_equal(step_with_others(std::span<const int32_t>(&follow[i], 1), i % 2 == 1),
                                expected[i + 1]))
          << "decode step " << i;
    EXPECT_EQ(s->position(target), static_cast<int64_t>(prompt.size() + follow.size()));
  }
}

TEST_F(MultiSequence, AllLogitsOfAStepMatchEvalWithAllLogits) {
  auto alone = session(1, 512, /*all_logits=*/true);
  const std::vector<int32_t> prompt = tokens(20, 3, alone->n_vocab());
  alone->eval(prompt);
  auto s = session(2);
  const std::vector<int32_t> other = tokens(9, 4, alone->n_vocab());
  std::vector<SeqTokens> batch{{1, other, false}, {0, prompt, true}};
  s->step(batch);
  for (int64_t i = 0; i < static_cast<int64_t>(prompt.size()); ++i) {
    auto want = alone->logits_at(i);
    EXPECT_TRUE(bitwise_equal(s->step_logits(1, i), std::vector<float>(want.begin(), want.end()))) << i;
  }
  EXPECT_THROW(s->step_logits(0, 0), std::out_of_range);  // only the last token of entry 0 was kept
}

TEST_F(MultiSequence, ClearedSlotIsReusedFromPositionZero) {
  auto s = session(2);
  const std::vector<int32_t> a = tokens(17, 5, s->n_vocab()), b = tokens(8, 6, s->n_vocab());
  SeqTokens first{1, a, false};
  s->step(std::span<const SeqTokens>(&first, 1));
  s->clear(1);
  EXPECT_EQ(s->position(1), 0);
  SeqTokens second{1, b, false};
  s->step(std::span<const SeqTokens>(&second, 1));
  auto got = s->step_logits(0);
  auto fresh = session(1);
  auto want = fresh->eval(b);
  EXPECT_TRUE(bitwise_equal(got, std::vector<float>(want.begin(), want.end())));
}

TEST_F(MultiSequence, BadStepsAreRefusedAndChangeNothing) {
  auto s = session(2, 16);
  const std::vector<int32_t> a = tokens(10, 7, s->n_vocab()), big = tokens(17, 8, s->n_vocab());
  std::vector<int32_t> bad_id{0, static_cast<int32_t>(s->n_vocab())};
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{0, a, false}, {0, a, false}}), EvalError);  // slot twice
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{2, a, false}}), EvalError);                 // no such slot
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{0, big, false}}), EvalError);               // above n_batch
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{1, bad_id, false}}), EvalError);            // token id
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{0, {}, false}}), EvalError);                // no tokens
  EXPECT_EQ(s->position(0), 0);
  EXPECT_EQ(s->position(1), 0);
  // Context overflow: 256 positions per slot.
  for (int i = 0; i < 25; ++i) s->step(std::vector<SeqTokens>{{1, a, false}});
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{1, a, false}}), EvalError);
  EXPECT_EQ(s->position(1), 250);
}

// The prefix cache's operations: a prefix copied to another slot, truncated
// in place, or saved to a host buffer and restored (wholly or its first part)
// continues with bitwise the logits of evaluating that prefix from scratch.
TEST_F(MultiSequence, CopiedTruncatedAndRestoredPrefixesContinueBitwiseAsFreshOnes) {
  auto s = session(3);
  const int64_t n_vocab = s->n_vocab();
  const std::vector<int32_t> prompt = tokens(40, 11, n_vocab), rest = tokens(5, 12, n_vocab);
  for (int64_t keep : {int64_t{40}, int64_t{23}}) {
    SCOPED_TRACE("prefix of " + std::to_string(keep));
    auto fresh = session(1);
    fresh->eval(std::span<const int32_t>(prompt).first(static_cast<size_t>(keep)));
    auto l = fresh->eval(rest);
    const std::vector<float> want(l.begin(), l.end());
    auto continue_in = [&](int slot) {
      SeqTokens e{slot, rest, false};
      s->step(std::span<const SeqTokens>(&e, 1));
      return bitwise_equal(s->step_logits(0), want);
    };
    s->clear(0);
    s->step(std::vector<SeqTokens>{{0, prompt, false}});
    std::vector<uint8_t> saved(prompt.size() * s->kv_position_bytes());
    s->save_prefix(0, static_cast<int64_t>(prompt.size()), saved);
    s->copy_prefix(0, 1, keep);
    EXPECT_EQ(s->position(1), keep);
    EXPECT_TRUE(continue_in(1)) << "copied";
    s->restore_prefix(2, keep, saved);
    EXPECT_EQ(s->position(2), keep);
    EXPECT_TRUE(continue_in(2)) << "restored";
    s->truncate(0, keep);
    EXPECT_TRUE(continue_in(0)) << "truncated";
  }
  EXPECT_GT(s->kv_position_bytes(), 0u);
  std::vector<uint8_t> small(3 * s->kv_position_bytes());
  EXPECT_THROW(s->save_prefix(0, 4, small), std::out_of_range);          // buffer too small
  EXPECT_THROW(s->copy_prefix(0, 1, s->position(0) + 1), std::out_of_range);  // more than it holds
  EXPECT_THROW(s->truncate(3, 0), std::out_of_range);                    // no such slot
  EXPECT_THROW(s->restore_prefix(1, 4, small), std::out_of_range);       // more than the buffer holds
}

}  // namespace
}  // namespace lumen::runtime
