// The scheduler without sockets: admission and the bounded queue, prompt
// chunking beside generating sequences, cancellation, slot reuse, finish
// reasons, and batch invariance (the same tokens and log-probabilities alone
// and among 7 other requests).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/runtime_support.h"
#include "lumen/runtime/session.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
  std::vector<TokenLogprob> prompt;
  std::string text, finish_reason;
};

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = runtime::testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  void make(int parallel, SchedulerOptions options = {}) {
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_batch = 128;
    so.n_seq = parallel;
    session_ = std::make_unique<runtime::Session>(model_, runtime::testing::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_, options);
  }

  GenerationParams greedy(const std::string& text, int64_t max_tokens = 6) const {
    GenerationParams p;
    p.prompt = tokenizer_->encode(text);
    p.sampling.temp = 0;
    p.max_tokens = max_tokens;
    p.top_logprobs = 2;
    return p;
  }

  // Steps until every request is done; events in order per request.
  std::vector<Outcome> finish(const std::vector<std::shared_ptr<Request>>& requests) {
    std::vector<Outcome> out(requests.size());
    std::vector<char> done(requests.size(), 0);
    for (int guard = 0; guard < 10000; ++guard) {
      bool all = true;
      for (size_t i = 0; i < requests.size(); ++i) {
        std::vector<Event> events;
        requests[i]->next(events, std::chrono::milliseconds(0));
        bool d = done[i] != 0;
        for (const Event& e : events) collect(out[i], e, d);
        done[i] = d;
        all = all && done[i];
      }
      if (all) return out;
      scheduler_->step();
    }
    ADD_FAILURE() << "requests never finished";
    return out;
  }

  static void collect(Outcome& o, const Event& e, bool& done) {
    switch (e.kind) {
      case Event::Kind::Prompt: o.prompt = e.prompt; break;
      case Event::Kind::Token:
        o.tokens.push_back(e.token.id);
        o.logprobs.push_back(e.token.logprob.value_or(1.0));
        o.text += e.text;
        break;
      case Event::Kind::Done:
        o.text += e.text;
        o.finish_reason = e.finish_reason;
        done = true;
        break;
    }
  }

  static std::shared_ptr<const runtime::CompiledModel> model_;
  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
};
std::shared_ptr<const runtime::CompiledModel> SchedulerTest::model_;

const std::vector<std::string> kPrompts = {
    "The quick brown fox", "Once upon a time there was", "1 2 3 4 5 6 7 8 9", "Hello",
    "A compiler turns programs into", "In the beginning", "def main():\n    print(", "Lorem ipsum dolor sit amet, consectetur"};

TEST_F(SchedulerTest, AdmitsUpToParallelQueuesUpToTheLimitAndRefusesBeyond) {
  SchedulerOptions o;
  o.max_queue = 1;
  make(2, o);
  std::vector<std::shared_ptr<Request>> accepted;
  for (int i = 0; i < 3; ++i) accepted.push_back(scheduler_->submit(greedy(kPrompts[static_cast<size_t>(i)])));
  for (const auto& r : accepted) ASSERT_NE(r, nullptr);
  EXPECT_EQ(scheduler_->submit(greedy("one too many")), nullptr);
  scheduler_->step();
  SchedulerStats st = scheduler_->stats();
  EXPECT_EQ(st.active, 2);
  EXPECT_EQ(st.queued, 1);
  EXPECT_EQ(st.rejected, 1u);
  EXPECT_EQ(scheduler_->submit(greedy("still full")), nullptr);  // 2 slots busy, 1 queued
  auto outcomes = finish(accepted);
  for (const Outcome& o1 : outcomes) EXPECT_EQ(o1.finish_reason, "length");
  EXPECT_EQ(scheduler_->stats().active, 0);
}

TEST_F(SchedulerTest, LongPromptGoesInChunksBesideGeneratingSequences) {
  SchedulerOptions o;
  o.prompt_chunk = 8;
  make(2, o);
  auto a = scheduler_->submit(greedy("Hi", 50));
  scheduler_->step();  // a's prompt
  std::string long_text;
  for (int i = 0; i < 12; ++i) long_text += "word" + std::to_string(i) + " ";
  GenerationParams long_prompt = greedy(long_text, 1);
  const size_t n = long_prompt.prompt.size();
  ASSERT_GT(n, 24u);
  auto b = scheduler_->submit(long_prompt);
  for (size_t done = 0; done < n; done += 8) {
    scheduler_->step();
    StepTrace t = scheduler_->last_step();
    ASSERT_EQ(t.entries.size(), 2u);
    EXPECT_EQ(t.entries[0].second, 1);  // a generates one token every step
    EXPECT_EQ(t.entries[1].second, static_cast<int64_t>(std::min<size_t>(8, n - done)));
  }
  scheduler_->cancel(a);
  finish({a, b});
}

TEST_F(SchedulerTest, CancelledSequenceFreesItsSlotForTheQueue) {
  make(1);
  auto a = scheduler_->submit(greedy("Hello", 100));
  auto b = scheduler_->submit(greedy("Hello", 3));
  scheduler_->step();
  scheduler_->step();
  EXPECT_EQ(scheduler_->stats().queued, 1);
  scheduler_->cancel(a);
  scheduler_->step();
  EXPECT_EQ(scheduler_->stats().queued, 0);
  auto outcomes = finish({a, b});
  EXPECT_EQ(outcomes[0].finish_reason, "cancelled");
  EXPECT_EQ(outcomes[1].finish_reason, "length");
  EXPECT_EQ(outcomes[1].tokens.size(), 3u);
}

TEST_F(SchedulerTest, ReusedSlotGivesTheSameResultAsAFreshOne) {
  make(1);
  auto first = finish({scheduler_->submit(greedy(kPrompts[1], 10))});
  auto second = finish({scheduler_->submit(greedy(kPrompts[4], 10))});
  make(1);
  auto fresh = finish({scheduler_->submit(greedy(kPrompts[4], 10))});
  EXPECT_EQ(second[0].tokens, fresh[0].tokens);
  EXPECT_EQ(second[0].logprobs, fresh[0].logprobs);
}

TEST_F(SchedulerTest, TokensAndLogprobsAreTheSameAloneAndAmongSevenOthers) {
  make(8);
  std::vector<Outcome> alone;
  for (const std::string& p : kPrompts) alone.push_back(finish({scheduler_->submit(greedy(p, 12))})[0]);
  // All eight at once, arriving over the first steps (mixed positions).
  std::vector<std::shared_ptr<Request>> together;
  for (const std::string& p : kPrompts) {
    together.push_back(scheduler_->submit(greedy(p, 12)));
    scheduler_->step();
  }
  std::vector<Outcome> batched = finish(together);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(batched[i].tokens, alone[i].tokens) << kPrompts[i];
    EXPECT_EQ(batched[i].logprobs, alone[i].logprobs) << kPrompts[i];  // bitwise: doubles compared exactly
  }
}

TEST_F(SchedulerTest, SeededSamplingIsTheSameAloneAndInABatch) {
  make(4);
  GenerationParams p = greedy(kPrompts[0], 10);
  p.sampling.temp = 0.9f;
  p.sampling.seed = 1234;
  auto alone = finish({scheduler_->submit(p)})[0];
  std::vector<std::shared_ptr<Request>> four;
  for (int i = 0; i < 3; ++i) four.push_back(scheduler_->submit(greedy(kPrompts[static_cast<size_t>(i + 1)], 10)));
  four.push_back(scheduler_->submit(p));
  auto batched = finish(four);
  EXPECT_EQ(batched[3].tokens, alone.tokens);
}

TEST_F(SchedulerTest, PromptLogprobsDoNotDependOnTheChunkSize) {
  std::map<int64_t, std::vector<TokenLogprob>> by_chunk;
  for (int64_t chunk : {3, 64}) {
    SchedulerOptions o;
    o.prompt_chunk = chunk;
    make(2, o);
    GenerationParams p = greedy(kPrompts[7], 0);
    p.prompt_logprobs = true;
    auto out = finish({scheduler_->submit(p)})[0];
    EXPECT_EQ(out.finish_reason, "length");
    EXPECT_TRUE(out.tokens.empty());
    ASSERT_EQ(out.prompt.size(), p.prompt.size());
    EXPECT_FALSE(out.prompt[0].logprob.has_value());
    by_chunk[chunk] = out.prompt;
  }
  for (size_t i = 1; i < by_chunk[3].size(); ++i) {
    EXPECT_EQ(by_chunk[3][i].logprob, by_chunk[64][i].logprob) << i;
    EXPECT_EQ(by_chunk[3][i].top, by_chunk[64][i].top) << i;
  }
}

TEST_F(SchedulerTest, StopStringEndsGenerationWithoutShowingIt) {
  make(1);
  auto first = finish({scheduler_->submit(greedy(kPrompts[2], 8))})[0];
  ASSERT_GE(first.text.size(), 4u);
  GenerationParams p = greedy(kPrompts[2], 8);
  const std::string stop = first.text.substr(first.text.size() / 2, 2);
  p.stops = {stop};
  auto stopped = finish({scheduler_->submit(p)})[0];
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(stopped.text, first.text.substr(0, first.text.find(stop)));
}

TEST_F(SchedulerTest, StopRefusesNewRequestsAndCancelsTheRest) {
  make(1);
  auto a = scheduler_->submit(greedy("Hello", 200));
  auto b = scheduler_->submit(greedy("Hello", 200));
  scheduler_->step();
  scheduler_->stop(std::chrono::milliseconds(0));
  EXPECT_EQ(scheduler_->submit(greedy("late")), nullptr);
  auto outcomes = finish({a, b});
  EXPECT_EQ(outcomes[0].finish_reason, "cancelled");
  EXPECT_EQ(outcomes[1].finish_reason, "cancelled");
}

}  // namespace
}  // namespace lumen::server
