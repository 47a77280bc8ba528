// Speculative decoding by prompt lookup (runtime/speculative.h): the lookup,
// the back-off, the walk over a verify pass, and the point of it all: on every
// architecture in dsl/, generation with drafting gives bitwise the tokens and
// the logits (so the log-probabilities) of generation without it, greedy and
// seeded, because a verify pass computes each row as a decode step does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lumen/driver/driver.h"
#include "lumen/runtime/sampler.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/speculative.h"
#include "runtime_support.h"
#include "synth/gguf_synth.h"

namespace lumen::runtime {
namespace {

namespace fs = std::filesystem;

TEST(PromptLookup, DraftsWhatFollowedTheLatestOccurrenceOfTheLongestNgram) {
  // The last 2-gram (7 8) occurs at 1 and at 5; the latest is followed by 9 4.
  const std::vector<int32_t> h = {5, 7, 8, 1, 2, 7, 8, 9, 4, 7, 8};
  EXPECT_EQ(prompt_lookup(h, 2, 2), (std::vector<int32_t>{9, 4}));
  // Past the history's end the repetition goes on: 9 4 7 8, then 9 4 ...
  EXPECT_EQ(prompt_lookup(h, 2, 6), (std::vector<int32_t>{9, 4, 7, 8, 9, 4}));
  EXPECT_EQ(prompt_lookup(std::vector<int32_t>{3, 5, 5, 5}, 1, 4), (std::vector<int32_t>{5, 5, 5, 5}));
  // The 3-gram (4 7 8) never occurred before; (7 8) did.
  EXPECT_EQ(prompt_lookup(h, 3, 1), (std::vector<int32_t>{9}));
  // Only the 1-gram of the last token matches: 3 after 6.
  EXPECT_EQ(prompt_lookup(std::vector<int32_t>{6, 3, 1, 2, 6}, 3, 5), (std::vector<int32_t>{3, 1, 2, 6, 3}));
  EXPECT_TRUE(prompt_lookup(std::vector<int32_t>{1, 2, 3}, 3, 4).empty());
  EXPECT_TRUE(prompt_lookup(std::vector<int32_t>{1}, 3, 4).empty());
  EXPECT_TRUE(prompt_lookup(h, 2, 0).empty());
}

TEST(Drafter, BacksOffAfterPassesThatAcceptNothingAndAdaptsTheLength) {
  const std::vector<int32_t> h = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2};
  Drafter off({0, 1, 3});
  EXPECT_TRUE(off.draft(h, 8).empty());
  Drafter d({4, 1, 3});
  EXPECT_EQ(d.draft(h, 8), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(d.draft(h, 2), (std::vector<int32_t>{3, 4}));  // the caller's limit
  d.record(4, 0);                                          // a miss: skip 1 lookup
  EXPECT_TRUE(d.draft(h, 8).empty());
  EXPECT_EQ(d.draft(h, 8).size(), 3u);  // one shorter after a partial pass
  d.record(3, 0);                       // a second miss: skip 2
  EXPECT_TRUE(d.draft(h, 8).empty());
  EXPECT_TRUE(d.draft(h, 8).empty());
  EXPECT_EQ(d.draft(h, 8).size(), 2u);
  d.record(2, 2);  // fully accepted: no back-off, 2 longer
  EXPECT_EQ(d.draft(h, 8).size(), 4u);
  EXPECT_EQ(d.stats().passes, 3);
  EXPECT_EQ(d.stats().drafted, 9);
  EXPECT_EQ(d.stats().accepted, 2);
  // Fewer found than n_min: no draft.
  Drafter picky({4, 3, 3});
  EXPECT_TRUE(picky.draft(std::vector<int32_t>{4, 1, 2, 1}, 2).empty());
}

TEST(AcceptDraft, KeepsTheDraftsTheSamplerReproducesAndStopsAtTheFirstOther) {
  const std::vector<int32_t> draft = {10, 11, 12};
  auto walk = [&](std::vector<int32_t> emitted) {
    std::vector<int64_t> rows;
    const int64_t accepted = accept_draft(draft, [&](int64_t i) {
      rows.push_back(i);
      return emitted[static_cast<size_t>(i)];
    });
    return std::pair(accepted, rows.size());
  };
  using Walk = std::pair<int64_t, size_t>;
  EXPECT_EQ(walk({10, 11, 12, 13}), (Walk{3, 4}));  // all kept, the last row gives one more
  EXPECT_EQ(walk({10, 5, 0, 0}), (Walk{1, 2}));     // the second differs: it is emitted, nothing after
  EXPECT_EQ(walk({7, 0, 0, 0}), (Walk{0, 1}));
  EXPECT_EQ(walk({10, -1, 0, 0}), (Walk{1, 2}));  // the sequence ended at row 1
}

// ------------------------------------------------- bitwise, every architecture

struct Arch {
  const char* name;
  const char* preset;  // lumen-gguf synth --preset; "" = the shared tiny Qwen2 model
  const char* vocab;   // vocabulary GGUF in the shared tokenizers folder
  const char* program; // dsl/ file
  // Its greedy continuation of the prompt is the same the second time, so
  // drafts are accepted (tiny qwen3's is not: its drafts are all rolled back).
  bool greedy_repeats;
};

fs::path scratch_dir() {
  static const fs::path dir = [] {
    fs::path p = fs::path(LUMEN_BINARY_DIR) / "tests" / "runtime" / ("speculative-" + std::to_string(getpid()));
    fs::create_directories(p);
    return p;
  }();
  return dir;
}

struct Model {
  std::shared_ptr<const CompiledModel> compiled;
  std::string gguf;
};

Model make_model(const Arch& a) {
  if (std::string(a.preset).empty()) return {testing::qwen2_model(), testing::tiny_gguf()};
  gguf::SynthConfig config = gguf::synth_preset(a.preset);
  config.seed = 1;
  config.vocab_from = test_support::shared_reference_dir() + "/tokenizers/" + a.vocab;
  const std::string path = (scratch_dir() / (std::string(a.name) + ".gguf")).string();
  gguf::synthesize(config, path);
  driver::Options options;
  options.target = best_isa(cpu_features());
  const program::Program program =
      *driver::compile(driver::Source::read(LUMEN_SOURCE_DIR "/dsl/" + std::string(a.program)), options).program;
  return {testing::in_process_model(program, best_isa(cpu_features())), path};
}

// Compiled and synthesized once per architecture for both tests.
const Model& model_for(const Arch& a) {
  static std::map<std::string, Model> models;
  auto found = models.find(a.name);
  if (found == models.end()) found = models.emplace(a.name, make_model(a)).first;
  return found->second;
}

std::unique_ptr<Session> open(const Model& m, int n_seq = 1) {
  SessionOptions o;
  o.n_threads = 2;
  o.n_ctx = 160;
  o.n_seq = n_seq;
  return std::make_unique<Session>(m.compiled, m.gguf, o);
}

// A prompt that repeats a span, so that the lookup finds drafts at once.
std::vector<int32_t> repetitive_prompt(int64_t n_vocab) {
  std::vector<int32_t> span;
  for (int32_t i = 0; i < 9; ++i) span.push_back(static_cast<int32_t>((i * 7919 + 13) % n_vocab));
  std::vector<int32_t> p;
  for (int r = 0; r < 3; ++r) p.insert(p.end(), span.begin(), span.end());
  return p;
}

struct Generation {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // the row each token was sampled from
  DraftStats stats;
};

// Generates `n` tokens after the prompt through decode_step, as lumen-run does.
Generation generate(Session& s, std::span<const int32_t> prompt, const SamplerParams& sp, DraftParams dp, int64_t n) {
  Generation g;
  Sampler sampler(sp);
  for (int32_t t : prompt) sampler.accept(t);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  auto emit = [&](std::span<const float> row) {
    const int32_t t = sampler.sample(row);
    sampler.accept(t);
    g.tokens.push_back(t);
    g.logits.emplace_back(row.begin(), row.end());
    history.push_back(t);
    return static_cast<int64_t>(g.tokens.size()) < n ? t : -1;
  };
  int32_t pending = emit(s.eval(prompt));
  Drafter drafter(dp);
  while (pending >= 0) {
    int32_t next = -1;
    decode_step(s, 0, pending, history, drafter, n - static_cast<int64_t>(g.tokens.size()) - 1,
                [&](int64_t, std::span<const float> row) { return next = emit(row); });
    pending = next;
  }
  g.stats = drafter.stats();
  return g;
}

void expect_bitwise_equal(const Generation& plain, const Generation& drafted) {
  ASSERT_EQ(plain.tokens, drafted.tokens);
  ASSERT_EQ(plain.logits.size(), drafted.logits.size());
  for (size_t i = 0; i < plain.logits.size(); ++i)
    ASSERT_EQ(std::memcmp(plain.logits[i].data(), drafted.logits[i].data(), plain.logits[i].size() * sizeof(float)), 0)
        << "logits of generated token " << i;
}

class SpeculativeBitwise : public ::testing::TestWithParam<Arch> {};

TEST_P(SpeculativeBitwise, GreedyAndSeededOutputsAreTheSameWithAndWithoutDrafting) {
  const Model& m = model_for(GetParam());
  auto s = open(m);
  SamplerParams greedy;
  greedy.temp = 0;
  SamplerParams seeded;
  seeded.temp = 0.8f;
  seeded.top_p = 0.9f;
  seeded.seed = 1234;
  // The prompt, the model's own greedy continuation and the prompt again (a
  // user pasting back what the model wrote): the lookup drafts that continuation.
  std::vector<int32_t> prompt = repetitive_prompt(s->n_vocab());
  const std::vector<int32_t> head = prompt;
  const Generation first = generate(*s, head, greedy, {}, 12);
  prompt.insert(prompt.end(), first.tokens.begin(), first.tokens.end());
  prompt.insert(prompt.end(), head.begin(), head.end());
  constexpr int64_t kTokens = 20;
  for (const SamplerParams& sp : {greedy, seeded}) {
    SCOPED_TRACE(sp.temp == 0 ? "greedy" : "seeded");
    s->clear();
    const Generation plain = generate(*s, prompt, sp, {}, kTokens);
    const int64_t plain_end = s->position();
    for (int64_t n_max : {2, 7}) {
      SCOPED_TRACE("draft " + std::to_string(n_max));
      s->clear();
      const Generation drafted = generate(*s, prompt, sp, {n_max, 1, 3}, kTokens);
      expect_bitwise_equal(plain, drafted);
      EXPECT_EQ(s->position(), plain_end);  // the rejected drafts were rolled back
      EXPECT_GT(drafted.stats.passes, 0);   // drafting did happen
      if (GetParam().greedy_repeats && sp.temp == 0) {
        EXPECT_GT(drafted.stats.accepted, 0);
      }
    }
  }
}

// The premise: k tokens of one sequence in one pass give, row by row, the
// logits of k decode steps, in the batch kernels' range and beyond it.
TEST_P(SpeculativeBitwise, APassOfKTokensGivesTheLogitsOfKDecodeSteps) {
  const Model& m = model_for(GetParam());
  auto a = open(m), b = open(m);
  const std::vector<int32_t> prompt = repetitive_prompt(a->n_vocab());
  const std::span<const int32_t> head(prompt.data(), 10);
  for (int64_t k : {1, 2, 4, 8, 9, 16}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    a->clear();
    b->clear();
    (void)a->eval(head);
    (void)b->eval(head);
    const std::span<const int32_t> more(prompt.data() + 10, static_cast<size_t>(k));
    const SeqTokens entry{0, more, true};
    b->step(std::span<const SeqTokens>(&entry, 1));
    for (int64_t i = 0; i < k; ++i) {
      const std::span<const float> one = a->eval(more.subspan(static_cast<size_t>(i), 1));
      const std::span<const float> row = b->step_logits(0, i);
      ASSERT_EQ(std::memcmp(one.data(), row.data(), one.size_bytes()), 0) << "row " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Programs, SpeculativeBitwise,
    ::testing::Values(Arch{"qwen2", "", "", "qwen2.dsl", true},
                      Arch{"qwen3", "qwen3", "ggml-vocab-gpt-2.gguf", "qwen3.dsl", false},
                      Arch{"llama3", "llama3", "ggml-vocab-deepseek-coder.gguf", "llama.dsl", true},
                      Arch{"gemma2", "gemma2", "ggml-vocab-llama-spm.gguf", "gemma2.dsl", true}),
    [](const ::testing::TestParamInfo<Arch>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lumen::runtime
