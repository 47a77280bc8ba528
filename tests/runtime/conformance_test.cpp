// Conformance with llama.cpp on the reference model (shared/reference/README.md):
// prompt token ids, last-position logits, per-position top-1 and top-10
// logits, teacher-forced greedy steps, and the same results for any thread
// count, prefill batch size and KV cache type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lumen/gguf/json.h"
#include "lumen/runtime/session.h"
#include "lumen/text/tokenizer.h"
#include "runtime_support.h"
#include "support/tolerances.h"

namespace lumen::runtime {
namespace {

using tolerance::kDecisiveMargin;
using tolerance::kMaxAbsLogitDiff;
using tolerance::kMaxRmsLogitDiff;

struct ReferencePrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<float> last_logits;
  std::vector<std::vector<std::pair<int32_t, double>>> top10;  // per position
  std::vector<int32_t> greedy;
  std::vector<double> greedy_margins;
};

class Conformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = testing::qwen2_model(std::getenv("LUMEN_TEST_REFERENCE_KERNELS") != nullptr);
    json::Value doc = json::parse(testing::read_file(testing::reference_dir() + "/tiny-qwen2-a.expected.json"));
    for (const json::Value& p : doc.find("prompts")->as_array()) {
      ReferencePrompt r;
      r.text = p.find("text")->as_string();
      for (const json::Value& t : p.find("tokens")->as_array()) r.tokens.push_back(static_cast<int32_t>(t.as_int()));
      std::string raw = testing::read_file(testing::reference_dir() + "/" + p.find("last_logits_file")->as_string());
      r.last_logits.resize(raw.size() / sizeof(float));
      std::memcpy(r.last_logits.data(), raw.data(), r.last_logits.size() * sizeof(float));
      for (const json::Value& pos : p.find("top10")->as_array()) {
        auto& list = r.top10.emplace_back();
        for (const json::Value& pair : pos.as_array())
          list.emplace_back(static_cast<int32_t>(pair.as_array()[0].as_int()), pair.as_array()[1].as_number());
      }
      for (const json::Value& t : p.find("greedy")->as_array()) r.greedy.push_back(static_cast<int32_t>(t.as_int()));
      for (const json::Value& m : p.find("greedy_margins")->as_array()) r.greedy_margins.push_back(m.as_number());
      prompts_.push_back(std::move(r));
    }
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

  static void expect_close_to_reference(std::span<const float> logits, const std::vector<float>& ref,
                                        const std::string& what) {
    ASSERT_EQ(logits.size(), ref.size()) << what;
    double max_diff = 0, sum_sq = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(std::isfinite(logits[i])) << what << " logit " << i;
      double d = std::fabs(static_cast<double>(logits[i]) - ref[i]);
      max_diff = std::max(max_diff, d);
      sum_sq += d * d;
    }
    double rms = std::sqrt(sum_sq / static_cast<double>(ref.size()));
    EXPECT_LE(max_diff, kMaxAbsLogitDiff) << what;
    EXPECT_LE(rms, kMaxRmsLogitDiff) << what;
  }

  static int32_t argmax(std::span<const float> logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  static std::shared_ptr<const CompiledModel> model_;
  static std::vector<ReferencePrompt> prompts_;
};

std::shared_ptr<const CompiledModel> Conformance::model_;
std::vector<ReferencePrompt> Conformance::prompts_;

TEST_F(Conformance, PromptTokensEqualLlamaCpp) {
  gguf::File file = gguf::File::open(testing::tiny_gguf());
  Tokenizer tok = Tokenizer::from_gguf(file);
  ASSERT_EQ(prompts_.size(), 8u);
  for (const ReferencePrompt& p : prompts_) EXPECT_EQ(tok.encode(p.text, true), p.tokens) << p.text;
}

TEST_F(Conformance, LogitsAtEveryPromptPosition) {
  auto s = session(2, 512, /*all_logits=*/true);
  int decisive = 0;
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const ReferencePrompt& p = prompts_[k];
    s->clear();
    std::span<const float> last = s->eval(p.tokens);
    expect_close_to_reference(last, p.last_logits, "prompt " + std::to_string(k));
    int checked = 0;
    for (size_t t = 0; t < p.tokens.size(); ++t) {
      std::span<const float> logits = s->logits_at(static_cast<int64_t>(t));
      const auto& top = p.top10[t];
      for (const auto& [id, ref] : top)
        EXPECT_NEAR(logits[static_cast<size_t>(id)], ref, kMaxAbsLogitDiff) << "prompt " << k << " pos " << t;
      if (top[0].second - top[1].second > kDecisiveMargin) {
        EXPECT_EQ(argmax(logits), top[0].first) << "prompt " << k << " pos " << t;
        ++checked;
      }
    }
    decisive += checked;
  }
  EXPECT_GT(decisive, 100);
}

TEST_F(Conformance, TeacherForcedGreedySteps) {
  auto s = session(2, 512, false);
  for (size_t k = 0; k < prompts_.size(); ++k) {
    const ReferencePrompt& p = prompts_[k];
    s->clear();
    std::span<const float> logits = s->eval(p.tokens);
    int checked = 0;
    for (size_t step = 0; step < p.greedy.size(); ++step) {
      if (p.greedy_margins[step] > kDecisiveMargin) {
        EXPECT_EQ(argmax(logits), p.greedy[step]) << "prompt " << k << " step " << step;
        ++checked;
      }
      // Teacher forcing: feed llama.cpp's token whatever we would have picked.
      logits = s->eval(std::span<const int32_t>(&p.greedy[step], 1));
    }
    EXPECT_GT(checked, 0) << "prompt " << k;
  }
}

// Same logits, bit for bit, for any thread count, through prefill and decode.
TEST_F(Conformance, ThreadCountDoesNotChangeResults) {
  const ReferencePrompt& p = prompts_[3];
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 3}) {
    auto s = session(threads, 16, false);
    std::span<const float> logits = s->eval(p.tokens);
    std::vector<float> all(logits.begin(), logits.end());
    for (int step = 0; step < 3; ++step) {
      logits = s->eval(std::span<const int32_t>(&p.greedy[static_cast<size_t>(step)], 1));
      all.insert(all.end(), logits.begin(), logits.end());
    }
    results.push_back(std::move(all));
  }
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_EQ(std::memcmp(results[0].data(), results[i].data(), results[0].size() * sizeof(float)), 0)
        << "threads " << i + 1 << " differ from 1 thread";
}

// Prefill in batches of 1 (the decode path), 7 and 512 all agree with llama.cpp.
TEST_F(Conformance, PrefillBatchSizesAgree) {
  const ReferencePrompt& p = prompts_[5];  // 330 tokens
  for (int64_t batch : {1, 7, 512}) {
    auto s = session(2, batch, false);
    expect_close_to_reference(s->eval(p.tokens), p.last_logits, "batch " + std::to_string(batch));
    EXPECT_EQ(s->position(), static_cast<int64_t>(p.tokens.size()));
  }
}

TEST_F(Conformance, F32CacheAlsoAgrees) {
  auto s = session(2, 512, false, KvType::F32);
  for (size_t k : {2u, 3u}) {
    s->clear();
    expect_close_to_reference(s->eval(prompts_[k].tokens), prompts_[k].last_logits, "f32 kv, prompt " + std::to_string(k));
  }
}

}  // namespace
}  // namespace lumen::runtime
