// The scheduler without sockets: admission and the bounded queue, prompt
// chunking beside generating sequences, cancellation, slot reuse, finish
// reasons, and batch invariance (the same tokens and log-probabilities alone
// and among 7 other requests).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../runtime/runtime_support.h"
#include "lumen/grammar/grammar.h"
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

// A control token shows as nothing unless the request lists it (a tool-call
// syntax's marker): forced by a bias, <|im_start|> shows only when listed.
TEST_F(SchedulerTest, ShownControlTokensAppearInTheText) {
  make(1);
  const std::optional<int32_t> im_start = tokenizer_->find_token("<|im_start|>");
  ASSERT_TRUE(im_start);
  ASSERT_EQ(tokenizer_->token_type(*im_start), TokenType::Control);
  GenerationParams p = greedy(kPrompts[0], 2);
  p.sampling.logit_bias = {{*im_start, static_cast<float>(kMaxLogitBias)}};
  const Outcome hidden = finish({scheduler_->submit(p)})[0];
  ASSERT_EQ(hidden.tokens, (std::vector<int32_t>{*im_start, *im_start}));
  EXPECT_EQ(hidden.text, "");
  p.shown_control = {*im_start};
  const Outcome shown = finish({scheduler_->submit(p)})[0];
  EXPECT_EQ(shown.tokens, hidden.tokens);
  EXPECT_EQ(shown.text, "<|im_start|><|im_start|>");
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

// ------------------------------------------------------------ prefix cache

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.logprobs, want.logprobs) << what;  // bitwise: doubles compared exactly
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.finish_reason, want.finish_reason) << what;
}

// Speculative decoding (prompt lookup) changes nothing a client sees: the same
// tokens, log-probabilities, text and finish reason with drafting off, on,
// and on among three other drafting requests; greedy and seeded, ended by
// max_tokens, by a stop string inside a verified draft, and under a grammar
// (its mask applied per verified row).
TEST_F(SchedulerTest, DraftingChangesNoOutputAloneOrAmongOthers) {
  make(4);
  // The prompt, its greedy continuation and the prompt again: drafts that the
  // model accepts (it repeats itself), and later ones it rejects.
  GenerationParams base = greedy("The quick brown fox jumps over the lazy dog. The quick brown fox", 12);
  base.draft.n_max = 0;
  const Outcome first = finish({scheduler_->submit(base)})[0];
  const std::vector<int32_t> head = base.prompt;
  base.prompt.insert(base.prompt.end(), first.tokens.begin(), first.tokens.end());
  base.prompt.insert(base.prompt.end(), head.begin(), head.end());
  base.max_tokens = 24;
  std::vector<GenerationParams> cases;
  cases.push_back(base);
  GenerationParams seeded = base;
  seeded.sampling.temp = 0.8f;
  seeded.sampling.top_p = 0.9f;
  seeded.sampling.seed = 99;
  cases.push_back(seeded);
  GenerationParams constrained = base;
  constrained.grammar = grammar::Grammar::parse("root ::= [^x]{1,20}");
  cases.push_back(constrained);
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    GenerationParams off = cases[c];
    const Outcome plain = finish({scheduler_->submit(off)})[0];
    ASSERT_GE(plain.tokens.size(), 4u);
    std::vector<GenerationParams> variants;
    GenerationParams on = off;
    on.draft.n_max = 7;
    variants.push_back(on);
    GenerationParams short_one = on;  // max_tokens ends inside a pass
    short_one.max_tokens = 3;
    variants.push_back(short_one);
    GenerationParams stopped = on;  // a stop string inside a verified draft
    stopped.stops = {tokenizer_->token_text(plain.tokens[2])};
    variants.push_back(stopped);
    for (size_t v = 0; v < variants.size(); ++v) {
      SCOPED_TRACE("variant " + std::to_string(v));
      GenerationParams reference = variants[v];
      reference.draft.n_max = 0;
      const Outcome want = finish({scheduler_->submit(reference)})[0];
      expect_same(finish({scheduler_->submit(variants[v])})[0], want, "alone");
      const uint64_t drafted = scheduler_->stats().drafted_tokens;
      std::vector<std::shared_ptr<Request>> mixed;
      for (size_t o = 1; o < 4; ++o) {
        GenerationParams other = greedy(kPrompts[o] + std::string(" ") + kPrompts[o], 10);
        other.draft.n_max = 7;
        mixed.push_back(scheduler_->submit(other));
      }
      mixed.push_back(scheduler_->submit(variants[v]));
      expect_same(finish(mixed).back(), want, "among three others");
      EXPECT_GT(scheduler_->stats().drafted_tokens, drafted);  // the others' drafts were in its passes
    }
  }
  EXPECT_GT(scheduler_->stats().accepted_tokens, 0u);
}

// The same request cold, warm in its slot, warm from the RAM store and warm
// with a partial prefix (a chat's next turn): the same bytes, greedy and seeded.
TEST_F(SchedulerTest, PrefixCacheHitsGiveBitwiseTheOutputOfAMiss) {
  for (const bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "greedy");
    auto request = [&](const std::string& text) {
      GenerationParams p = greedy(text, 10);
      if (seeded) p.sampling.temp = 0.9f, p.sampling.seed = 77;
      return p;
    };
    const std::string first = "System: be brief. User: " + kPrompts[1];
    make(1);
    const Outcome cold = finish({scheduler_->submit(request(first))})[0];
    const std::string second = first + cold.text + " User: and then?";
    const std::string other = "Unrelated: " + kPrompts[6];
    make(1);
    const Outcome second_cold = finish({scheduler_->submit(request(second))})[0];

    make(1);
    EXPECT_EQ(finish({scheduler_->submit(request(first))})[0].tokens, cold.tokens);
    EXPECT_EQ(scheduler_->stats().prefix_misses, 1u);
    expect_same(finish({scheduler_->submit(request(first))})[0], cold, "warm in the same slot");
    EXPECT_EQ(scheduler_->stats().prefix_hits, 1u);
    const uint64_t prompt_size = request(first).prompt.size();
    EXPECT_EQ(scheduler_->stats().prefix_reused_tokens, prompt_size - 1);
    expect_same(finish({scheduler_->submit(request(second))})[0], second_cold, "a partial prefix");
    EXPECT_GT(scheduler_->stats().prefix_reused_tokens, prompt_size - 1);
    finish({scheduler_->submit(request(other))});  // the conversation goes to the RAM store
    EXPECT_EQ(scheduler_->stats().prefix_store_entries, 1u);
    const uint64_t reused = scheduler_->stats().prefix_reused_tokens;
    expect_same(finish({scheduler_->submit(request(second))})[0], second_cold, "from the RAM store");
    EXPECT_EQ(scheduler_->stats().prefix_reused_tokens, reused + request(second).prompt.size() - 1);
  }
}

TEST_F(SchedulerTest, PromptLogprobsAreNeverServedFromTheCache) {
  make(1);
  GenerationParams p = greedy(kPrompts[5], 3);
  p.prompt_logprobs = true;
  const Outcome cold = finish({scheduler_->submit(p)})[0];
  const Outcome again = finish({scheduler_->submit(p)})[0];
  expect_same(again, cold, "echo");
  ASSERT_EQ(again.prompt.size(), cold.prompt.size());
  for (size_t i = 0; i < cold.prompt.size(); ++i) EXPECT_EQ(again.prompt[i].logprob, cold.prompt[i].logprob) << i;
  EXPECT_EQ(scheduler_->stats().prefix_hits, 0u);
}

// A flood of distinct prompts through one slot: the RAM store never holds
// more than its bound, keeps the most recent prefixes, and a hit still works.
TEST_F(SchedulerTest, FloodOfDistinctPromptsKeepsTheStoreWithinItsBound) {
  SchedulerOptions o;
  o.cache_ram_bytes = 64 * 1024;  // ~128 positions of the tiny model
  make(1, o);
  const uint64_t per_position = session_->kv_position_bytes();
  ASSERT_GT(per_position, 0u);
  std::vector<std::string> prompts;
  for (int i = 0; i < 30; ++i) prompts.push_back("Prompt number " + std::to_string(i * 7919) + " says " + kPrompts[static_cast<size_t>(i) % kPrompts.size()]);
  for (const std::string& text : prompts) {
    finish({scheduler_->submit(greedy(text, 4))});
    const SchedulerStats st = scheduler_->stats();
    EXPECT_LE(st.prefix_store_bytes, o.cache_ram_bytes);
    EXPECT_EQ(st.prefix_store_bytes % per_position, 0u);
  }
  const SchedulerStats st = scheduler_->stats();
  EXPECT_GT(st.prefix_store_entries, 1u);
  EXPECT_LT(st.prefix_store_entries, prompts.size() - 1);
  // The one before last is in the store (most recent); the first is long gone.
  const uint64_t hits = st.prefix_hits;
  finish({scheduler_->submit(greedy(prompts[prompts.size() - 2], 4))});
  EXPECT_EQ(scheduler_->stats().prefix_hits, hits + 1);
  // A prompt larger than the whole store is never kept.
  o.cache_ram_bytes = per_position;
  make(1, o);
  finish({scheduler_->submit(greedy(kPrompts[0], 2))});
  finish({scheduler_->submit(greedy(kPrompts[3], 2))});
  EXPECT_EQ(scheduler_->stats().prefix_store_bytes, 0u);
}

// ------------------------------------------------------------ n choices

TEST_F(SchedulerTest, ChoicesShareThePromptAndChoiceIIsTheN1AnswerWithSeedPlusI) {
  make(4);
  GenerationParams p = greedy(kPrompts[4], 8);
  p.sampling.temp = 1.0f;
  p.sampling.seed = 99;
  std::vector<Outcome> single;
  for (int i = 0; i < 3; ++i) {
    GenerationParams one = p;
    one.sampling.seed = p.sampling.seed + static_cast<uint64_t>(i);
    single.push_back(finish({scheduler_->submit(one)})[0]);
  }
  make(4);
  p.n = 3;
  auto request = scheduler_->submit(p);
  ASSERT_NE(request, nullptr);
  std::vector<Outcome> choices(3);
  std::vector<int> prompt_entries;
  for (int guard = 0; guard < 1000 && prompt_entries.size() < 100; ++guard) {
    std::vector<Event> events;
    request->next(events, std::chrono::milliseconds(0));
    bool unused = false;
    for (const Event& e : events) collect(choices[static_cast<size_t>(e.choice)], e, unused);
    if (std::all_of(choices.begin(), choices.end(), [](const Outcome& o1) { return !o1.finish_reason.empty(); })) break;
    if (!scheduler_->step()) break;
    for (const auto& [slot, tokens] : scheduler_->last_step().entries)
      if (tokens > 1) prompt_entries.push_back(slot);
  }
  EXPECT_EQ(prompt_entries.size(), 1u);  // the prompt is evaluated once
  EXPECT_EQ(scheduler_->stats().prompt_tokens, p.prompt.size());
  for (size_t i = 0; i < 3; ++i) expect_same(choices[i], single[i], "choice " + std::to_string(i));
  EXPECT_NE(choices[0].tokens, choices[1].tokens);
}

TEST_F(SchedulerTest, ARequestOfNChoicesWaitsForNFreeSlots) {
  make(2);
  auto a = scheduler_->submit(greedy(kPrompts[0], 5));
  scheduler_->step();
  GenerationParams p = greedy(kPrompts[1], 2);
  p.n = 2;
  auto b = scheduler_->submit(p);
  scheduler_->step();
  EXPECT_EQ(scheduler_->stats().queued, 1);
  auto outcomes = finish({a});
  std::vector<Event> events;
  for (int guard = 0; guard < 100; ++guard) {
    scheduler_->step();
    b->next(events, std::chrono::milliseconds(0));
    if (std::count_if(events.begin(), events.end(), [](const Event& e) { return e.kind == Event::Kind::Done; }) == 2) break;
  }
  EXPECT_EQ(std::count_if(events.begin(), events.end(), [](const Event& e) { return e.kind == Event::Kind::Token; }), 4);
}

}  // namespace
}  // namespace lumen::server
