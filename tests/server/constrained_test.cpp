// Constrained sequences through the scheduler on the tiny model (random
// weights, the real Qwen vocabulary): whenever finish is "stop" the text is a
// complete match (JSON parses as an object), greedy and over many seeds; a
// constrained sequence among unconstrained ones gives bitwise what it gives
// alone; grammars that force their end stop at once; and stop strings count
// only after a complete match.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../runtime/runtime_support.h"
#include "lumen/grammar/grammar.h"
#include "lumen/runtime/session.h"
#include "lumen/server/constrained_streamer.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
};

class ConstrainedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = runtime::testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  void make(int parallel) {
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_batch = 128;
    so.n_seq = parallel;
    session_ = std::make_unique<runtime::Session>(model_, runtime::testing::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_);
  }

  GenerationParams params(const std::string& text, std::shared_ptr<const grammar::Grammar> g, int64_t max_tokens,
                          uint64_t seed = 0) const {
    GenerationParams p;
    p.prompt = tokenizer_->encode(text);
    p.sampling.temp = seed == 0 ? 0.0f : 1.0f;
    p.sampling.seed = seed;
    p.max_tokens = max_tokens;
    p.grammar = std::move(g);
    return p;
  }

  std::vector<Outcome> run(const std::vector<GenerationParams>& all) {
    std::vector<std::shared_ptr<Request>> requests;
    for (const auto& p : all) requests.push_back(scheduler_->submit(p));
    std::vector<Outcome> out(requests.size());
    std::vector<char> done(requests.size(), 0);
    for (int guard = 0; guard < 5000; ++guard) {
      bool all_done = true;
      for (size_t i = 0; i < requests.size(); ++i) {
        std::vector<Event> events;
        requests[i]->next(events, std::chrono::milliseconds(0));
        for (const Event& e : events) {
          if (e.kind == Event::Kind::Token) out[i].tokens.push_back(e.token.id);
          out[i].text += e.text;
          if (e.kind == Event::Kind::Done) {
            out[i].finish_reason = e.finish_reason;
            done[i] = 1;
          }
        }
        all_done = all_done && done[i];
      }
      if (all_done) return out;
      scheduler_->step();
    }
    ADD_FAILURE() << "requests never finished";
    return out;
  }

  std::shared_ptr<const grammar::TokenTrie> trie() {
    if (!trie_) trie_ = grammar::TokenTrie::build(*tokenizer_);
    return trie_;
  }
  bool matches(const std::shared_ptr<const grammar::Grammar>& g, const std::string& text, bool whole) {
    grammar::Matcher m(g, trie());
    return m.accept_bytes(text) && (!whole || m.accepting());
  }

  static std::shared_ptr<const runtime::CompiledModel> model_;
  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
};
std::shared_ptr<const runtime::CompiledModel> ConstrainedTest::model_;

TEST_F(ConstrainedTest, JsonObjectOutputParsesWheneverFinishIsStop) {
  make(4);
  const auto g = grammar::json_object_grammar();
  std::vector<GenerationParams> all;
  for (uint64_t seed = 0; seed < 8; ++seed) all.push_back(params("Reply in JSON:", g, 40, seed));
  int stopped = 0;
  for (const Outcome& o : run(all)) {
    ASSERT_TRUE(o.finish_reason == "stop" || o.finish_reason == "length") << o.finish_reason;
    EXPECT_TRUE(matches(g, o.text, false)) << o.text;
    if (o.finish_reason != "stop") continue;
    ++stopped;
    EXPECT_TRUE(matches(g, o.text, true)) << o.text;
    const auto j = nlohmann::json::parse(o.text, nullptr, false);
    EXPECT_TRUE(j.is_object()) << o.text;
  }
  // A small grammar ends within the budget: the "stop" path is exercised.
  const auto small = grammar::Grammar::parse(
      "root ::= \"{\" ws \"\\\"k\\\"\" ws \":\" ws ([0-9]{1,3} | \"true\" | \"\\\"\" [a-z]{0,4} \"\\\"\") ws \"}\"\n"
      "ws ::= \" \"?");
  all.clear();
  for (uint64_t seed = 0; seed < 8; ++seed) all.push_back(params("Reply in JSON:", small, 40, seed));
  for (const Outcome& o : run(all)) {
    EXPECT_EQ(o.finish_reason, "stop") << o.text;
    EXPECT_TRUE(matches(small, o.text, true)) << o.text;
    EXPECT_TRUE(nlohmann::json::parse(o.text, nullptr, false).is_object()) << o.text;
    ++stopped;
  }
  EXPECT_GE(stopped, 8);  // at least the small grammar's 8
}

TEST_F(ConstrainedTest, ConstrainedSequenceIsTheSameAloneAndAmongOthers) {
  make(4);
  const auto g = grammar::Grammar::parse("root ::= [a-z ]{1,30} \".\"");
  const GenerationParams constrained = params("Once upon a time", g, 24, 7);
  const Outcome alone = run({constrained})[0];
  make(4);
  std::vector<GenerationParams> mixed = {params("The quick brown fox", nullptr, 24), constrained,
                                         params("Hello", nullptr, 24, 3), params("1 2 3", g, 24)};
  const std::vector<Outcome> together = run(mixed);
  EXPECT_EQ(together[1].tokens, alone.tokens);
  EXPECT_EQ(together[1].text, alone.text);
  EXPECT_EQ(together[1].finish_reason, alone.finish_reason);
  EXPECT_TRUE(matches(g, alone.text, alone.finish_reason == "stop")) << alone.text;
}

TEST_F(ConstrainedTest, AMatchThatCannotGrowEndsAtOnce) {
  make(2);
  const auto choice = grammar::Grammar::parse("root ::= \"yes\" | \"no\"");
  const auto empty = grammar::Grammar::parse("root ::= \"\"");
  const std::vector<Outcome> out = run({params("Answer:", choice, 50), params("Answer:", empty, 50)});
  EXPECT_EQ(out[0].finish_reason, "stop");
  EXPECT_TRUE(out[0].text == "yes" || out[0].text == "no") << out[0].text;
  EXPECT_EQ(out[1].finish_reason, "stop");
  EXPECT_EQ(out[1].text, "");
  EXPECT_TRUE(out[1].tokens.empty());
}

TEST_F(ConstrainedTest, IgnoreEosKeepsGoingWithinTheGrammar) {
  make(1);
  GenerationParams p = params("Count:", grammar::Grammar::parse("root ::= [0-9]{0,100}"), 12, 5);
  p.ignore_eos = true;
  const Outcome o = run({p})[0];
  EXPECT_EQ(o.finish_reason, "length");
  EXPECT_EQ(o.tokens.size(), 12u);
  EXPECT_TRUE(matches(p.grammar, o.text, true)) << o.text;
}

TEST(ConstrainedStreamerTest, StopStringsCountOnlyAfterACompleteMatch) {
  // "X" inside the match is text; after a complete match it stops.
  ConstrainedStreamer s({"X"}, false);
  std::string shown = s.push("aX", {false, false});
  EXPECT_FALSE(s.stopped());
  shown += s.push("b", {true});
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(shown, "aXb");
  shown += s.push("XY", {false, false});
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(shown, "aXb");
  EXPECT_EQ(s.text(), "aXb");
  EXPECT_EQ(s.finish(), "");
}

TEST(ConstrainedStreamerTest, HoldsBackAPossibleStopAndIncompleteCharacters) {
  ConstrainedStreamer s({"END"}, false);
  EXPECT_EQ(s.push("ok", {false, true}), "ok");  // "END" may start after "ok"
  EXPECT_EQ(s.push("EN", {false, false}), "");   // so this may be its start
  EXPECT_EQ(s.push("x\xc3", {false, false}), "ENx");  // not a stop after all; half of é held
  EXPECT_EQ(s.push("\xa9", {true}), "\xc3\xa9");
  EXPECT_EQ(s.finish(), "");
  EXPECT_FALSE(s.stopped());
  ConstrainedStreamer at_start({"\n"}, true);
  EXPECT_EQ(at_start.push("\nabc", {false, false, false, false}), "");
  EXPECT_TRUE(at_start.stopped());
  EXPECT_EQ(at_start.text(), "");
}

}  // namespace
}  // namespace lumen::server
