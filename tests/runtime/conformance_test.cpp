// Conformance with llama.cpp on the reference model (shared/reference/README.md),
// through the harness of tests/support/llama_cpp_reference.h:
// prompt token ids, last-position logits, per-position top-1 and top-10
// logits, teacher-forced greedy steps, and the same results for any prefill
// batch size and KV cache type (any thread count: thread_invariance_test.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "lumen/runtime/session.h"
#include "lumen/text/tokenizer.h"
#include "runtime_support.h"
#include "support/llama_cpp_reference.h"

namespace lumen::runtime {
namespace {

using test_support::LlamaCppPrompt;

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::qwen2_model(std::getenv("LUMEN_TEST_REFERENCE_KERNELS") != nullptr);
    prompts_ = test_support::shared_qwen2_reference();
  }
  static void TearDownTestSuite() {
    model_.reset();
    prompts_.clear();
  }

  static std::unique_ptr<Session> session(int threads, int64_t batch, bool all_logits,
                                          KvType kv = KvType::F16) {
    SessionOptions o;
    o.n_threads = threads;
    o.n_batch = batch;
    o.n_ctx = 1024;
    o.all_logits = all_logits;
    o.kv_type = kv;
    return std::make_unique<Session>(model_, testing::tiny_gguf(), o);
  }

  static std::shared_ptr<const CompiledModel> model_;
  static std::vector<LlamaCppPrompt> prompts_;
};

std::shared_ptr<const CompiledModel> Conformance::model_;
std::vector<LlamaCppPrompt> Conformance::prompts_;

TEST_F(Conformance, PromptTokensEqualLlamaCpp) {
  gguf::File file = gguf::File::open(testing::tiny_gguf());
  Tokenizer tok = Tokenizer::from_gguf(file);
  ASSERT_EQ(prompts_.size(), 8u);
  for (const LlamaCppPrompt& p : prompts_) EXPECT_EQ(tok.encode(p.text, true), p.tokens) << p.text;
}

TEST_F(Conformance, LogitsAtEveryPromptPosition) {
  auto s = session(2, 512, /*all_logits=*/true);
  int decisive = 0;
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const LlamaCppPrompt& p = prompts_[k];
    const std::string what = "prompt " + std::to_string(k);
    s->clear();
    test_support::expect_last_logits_match(s->eval(p.tokens), p, what);
    decisive += test_support::expect_positions_match(*s, p, what);
  }
  EXPECT_GT(decisive, 100);
}

TEST_F(Conformance, TeacherForcedGreedySteps) {
  auto s = session(2, 512, false);
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const LlamaCppPrompt& p = prompts_[k];
    s->clear();
    EXPECT_GT(test_support::expect_teacher_forced_greedy(*s, s->eval(p.tokens), p, "prompt " + std::to_string(k)), 0)
        << "prompt " << k;
  }
}

// Prefill in batches of 1 (the decode path), 7 and 512 all agree with llama.cpp.
TEST_F(Conformance, PrefillBatchSizesAgree) {
  const LlamaCppPrompt& p = prompts_[5];  // 330 tokens
  for (int64_t batch : {1, 7, 512}) {
    auto s = session(2, batch, false);
    test_support::expect_last_logits_match(s->eval(p.tokens), p, "batch " + std::to_string(batch));
    EXPECT_EQ(s->position(), static_cast<int64_t>(p.tokens.size()));
  }
}

TEST_F(Conformance, F32CacheAlsoAgrees) {
  auto s = session(2, 512, false, KvType::F32);
  for (size_t k : {2u, 3u}) {
    s->clear();
    test_support::expect_last_logits_match(s->eval(prompts_[k].tokens), prompts_[k], "f32 kv, prompt " + std::to_string(k));
  }
}

}  // namespace
}  // namespace lumen::runtime
