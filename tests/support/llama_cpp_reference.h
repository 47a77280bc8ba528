// The one harness that compares Lumen with llama.cpp: the recorded references
// (what llama.cpp computed for a prompt) and the checks every comparison makes,
// with the tolerances of tolerances.h. Used by the conformance test
// (tests/runtime), the Q8_0 KV cache's (tests/runtime), the end-to-end test
// (tests/e2e) and the architecture tests (tests/models).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "lumen/gguf/json.h"
#include "lumen/runtime/session.h"
#include "support/test_files.h"
#include "support/tolerances.h"

namespace lumen::test_support {

// One prompt as llama.cpp ran it.
struct LlamaCppPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<std::pair<int32_t, double>> last_logits;       // (id, logit) at the last position: all ids, or the highest
  std::vector<std::vector<std::pair<int32_t, double>>> top;  // per position, best first (at least two); empty: not recorded
  std::vector<int32_t> greedy;                               // the greedy continuation, each step fed back alone
  std::vector<double> greedy_margins;                        // top-1 minus top-2 at each greedy step
};

namespace reference_detail {

inline std::vector<int32_t> ids_of(const json::Value& v) {
  std::vector<int32_t> ids;
  for (const json::Value& t : v.as_array()) ids.push_back(static_cast<int32_t>(t.as_int()));
  return ids;
}

inline std::vector<double> numbers_of(const json::Value& v) {
  std::vector<double> out;
  for (const json::Value& x : v.as_array()) out.push_back(x.as_number());
  return out;
}

inline std::vector<std::pair<int32_t, double>> pairs_of(const json::Value& v) {
  std::vector<std::pair<int32_t, double>> out;
  for (const json::Value& pair : v.as_array())
    out.emplace_back(static_cast<int32_t>(pair.as_array()[0].as_int()), pair.as_array()[1].as_number());
  return out;
}

inline std::vector<std::pair<int32_t, double>> all_ids(const std::vector<float>& logits) {
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < logits.size(); ++i) out.emplace_back(static_cast<int32_t>(i), logits[i]);
  return out;
}

inline const json::Value& field(const json::Value& object, const char* name) {
  const json::Value* v = object.find(name);
  if (v == nullptr) throw std::runtime_error(std::string("reference without '") + name + "'");
  return *v;
}

}  // namespace reference_detail

// ../shared/reference/tiny-qwen2-a.expected.json: every last-position logit
// (in .f32 files beside it) and the top 10 at every position.
inline std::vector<LlamaCppPrompt> shared_qwen2_reference() {
  using namespace reference_detail;
  std::vector<LlamaCppPrompt> prompts;
  const json::Value doc = json::parse(read_existing_file(shared_reference_dir() + "/tiny-qwen2-a.expected.json"));
  for (const json::Value& p : field(doc, "prompts").as_array()) {
    LlamaCppPrompt r;
    r.text = field(p, "text").as_string();
    r.tokens = ids_of(field(p, "tokens"));
    r.last_logits = all_ids(read_f32_file(shared_reference_dir() + "/" + field(p, "last_logits_file").as_string()));
    for (const json::Value& pos : field(p, "top10").as_array()) r.top.push_back(pairs_of(pos));
    r.greedy = ids_of(field(p, "greedy"));
    r.greedy_margins = numbers_of(field(p, "greedy_margins"));
    prompts.push_back(std::move(r));
  }
  return prompts;
}

// tests/data/llama-tiny.reference.json (docs/testing.md): the 256 highest
// last-position logits and the top 2 at every position.
inline std::vector<LlamaCppPrompt> llama_tiny_reference() {
  using namespace reference_detail;
  std::vector<LlamaCppPrompt> prompts;
  const json::Value doc = json::parse(read_existing_file(LUMEN_SOURCE_DIR "/tests/data/llama-tiny.reference.json"));
  for (const json::Value& p : field(doc, "prompts").as_array()) {
    LlamaCppPrompt r;
    r.text = field(p, "text").as_string();
    r.tokens = ids_of(field(p, "tokens"));
    r.last_logits = pairs_of(field(p, "last_top256"));
    for (const json::Value& pos : field(p, "top2").as_array()) r.top.push_back(pairs_of(pos));
    r.greedy = ids_of(field(p, "greedy"));
    r.greedy_margins = numbers_of(field(p, "greedy_margins"));
    prompts.push_back(std::move(r));
  }
  return prompts;
}

// tests/data/models (its README): prompt k of prompts.txt (`\n` there stands
// for a newline) with NAME.expected.json's tokens and greedy steps and every
// last-position logit from NAME.k.last_logits.f32; no per-position tops.
inline LlamaCppPrompt model_reference(const std::string& name, int k) {
  using namespace reference_detail;
  const std::string dir = LUMEN_SOURCE_DIR "/tests/data/models/";
  std::istringstream lines(read_existing_file(dir + "prompts.txt"));
  std::string line;
  for (int i = 0; i <= k; ++i)
    if (!std::getline(lines, line)) throw std::runtime_error(dir + "prompts.txt has no prompt " + std::to_string(k));
  LlamaCppPrompt r;
  for (size_t i = 0; i < line.size(); ++i) r.text += line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n' ? (++i, '\n') : line[i];
  const json::Value doc = json::parse(read_existing_file(dir + name + ".expected.json"));
  const json::Value& p = doc.as_array().at(static_cast<size_t>(k));
  r.tokens = ids_of(field(p, "tokens"));
  r.last_logits = all_ids(read_f32_file(dir + name + "." + std::to_string(k) + ".last_logits.f32"));
  r.greedy = ids_of(field(p, "greedy"));
  r.greedy_margins = numbers_of(field(p, "greedy_margins"));
  return r;
}

// tests/data/kv-q8 (its README): llama.cpp with a Q8_0 K and V cache and flash
// attention on the shared reference model, for some of its prompts (text and
// tokens from the shared reference): every last-position logit and the greedy
// steps; no per-position tops.
inline std::vector<LlamaCppPrompt> kv_q8_reference() {
  using namespace reference_detail;
  const std::string dir = LUMEN_SOURCE_DIR "/tests/data/kv-q8/";
  const std::vector<LlamaCppPrompt> shared = shared_qwen2_reference();
  std::vector<LlamaCppPrompt> prompts;
  const json::Value doc = json::parse(read_existing_file(dir + "expected.json"));
  for (const json::Value& p : field(doc, "prompts").as_array()) {
    LlamaCppPrompt r;
    const LlamaCppPrompt& same = shared.at(static_cast<size_t>(field(p, "index").as_int()));
    r.text = same.text;
    r.tokens = same.tokens;
    r.last_logits = all_ids(read_f32_file(dir + field(p, "last_logits_file").as_string()));
    r.greedy = ids_of(field(p, "greedy"));
    r.greedy_margins = numbers_of(field(p, "greedy_margins"));
    prompts.push_back(std::move(r));
  }
  return prompts;
}

inline int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The last-position logits against the recorded ones: max |diff| and rms over
// the recorded ids within the shared reference README's bounds (max |diff|:
// max_abs, for the quantized weight types' looser bound).
inline void expect_last_logits_match(std::span<const float> logits, const LlamaCppPrompt& p, const std::string& what,
                                     double max_abs = tolerance::kMaxAbsLogitDiff) {
  ASSERT_FALSE(p.last_logits.empty()) << what;
  double max_diff = 0, sum_sq = 0;
  for (const auto& [id, ref] : p.last_logits) {
    ASSERT_LT(static_cast<size_t>(id), logits.size()) << what;
    const float got = logits[static_cast<size_t>(id)];
    ASSERT_TRUE(std::isfinite(got)) << what << " logit " << id;
    const double d = std::fabs(static_cast<double>(got) - ref);
    max_diff = std::max(max_diff, d);
    sum_sq += d * d;
  }
  EXPECT_LE(max_diff, max_abs) << what;
  EXPECT_LE(std::sqrt(sum_sq / static_cast<double>(p.last_logits.size())), tolerance::kMaxRmsLogitDiff) << what;
}

// Every prompt position of a session that kept all logits (after eval of
// p.tokens): the recorded top logits within the bound, and the top-1 wherever
// llama.cpp's own margin is decisive. Returns how many positions were decisive.
inline int expect_positions_match(const runtime::Session& s, const LlamaCppPrompt& p, const std::string& what) {
  EXPECT_EQ(p.top.size(), p.tokens.size()) << what;
  int decisive = 0;
  for (size_t t = 0; t < p.top.size() && t < p.tokens.size(); ++t) {
    const std::span<const float> logits = s.logits_at(static_cast<int64_t>(t));
    const auto& top = p.top[t];
    for (const auto& [id, ref] : top)
      EXPECT_NEAR(logits[static_cast<size_t>(id)], ref, tolerance::kMaxAbsLogitDiff) << what << " position " << t;
    if (top[0].second - top[1].second > tolerance::kDecisiveMargin) {
      EXPECT_EQ(argmax(logits), top[0].first) << what << " position " << t;
      ++decisive;
    }
  }
  return decisive;
}

// Teacher forcing from the logits after the prompt: llama.cpp's greedy token
// at every decisive step, each fed back whatever Lumen would have picked.
// Returns how many steps were decisive.
inline int expect_teacher_forced_greedy(runtime::Session& s, std::span<const float> logits, const LlamaCppPrompt& p,
                                        const std::string& what) {
  EXPECT_EQ(p.greedy.size(), p.greedy_margins.size()) << what;
  int decisive = 0;
  for (size_t step = 0; step < p.greedy.size() && step < p.greedy_margins.size(); ++step) {
    if (p.greedy_margins[step] > tolerance::kDecisiveMargin) {
      EXPECT_EQ(argmax(logits), p.greedy[step]) << what << " step " << step;
      ++decisive;
    }
    if (step + 1 < p.greedy.size()) logits = s.eval(std::span<const int32_t>(&p.greedy[step], 1));
  }
  return decisive;
}

}  // namespace lumen::test_support
