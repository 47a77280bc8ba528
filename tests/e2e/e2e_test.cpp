// The whole toolchain as a user runs it: `lumenc compile dsl/<arch>.dsl -o
// model.so` (the lumenc binary itself), then the runtime loads model.so
// (load_model_so, as lumen-run does) and runs it on a GGUF, compared with
// llama.cpp's outputs for the same file:
//  - qwen2.dsl on ../shared/reference/tiny-qwen2-a.gguf (tokens, last-position
//    logits, top-1 at every decisive position, teacher-forced greedy steps);
//  - llama.dsl on the synthetic `lumen-gguf synth --preset llama` model, against
//    tests/data/llama-tiny.reference.json (recorded with llama.cpp, see
//    docs/testing.md): the 256 highest last-position logits, top-1 at each
//    decisive prompt position, teacher-forced greedy steps.
// Tolerances: tests/support/tolerances.h.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/gguf/json.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/session.h"
#include "lumen/text/tokenizer.h"
#include "support/tolerances.h"
#include "synth/gguf_synth.h"

namespace lumen::runtime {
namespace {

namespace fs = std::filesystem;
using tolerance::kDecisiveMargin;
using tolerance::kMaxAbsLogitDiff;
using tolerance::kMaxRmsLogitDiff;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const std::string kReferenceDir = LUMEN_SHARED_DIR "/reference";
const std::string kQwenGguf = kReferenceDir + "/tiny-qwen2-a.gguf";

// One prompt of a llama.cpp reference: the prompt's ids, (id, logit) pairs
// of the last position (all of them or the highest ones), top-1 and top-2 at
// every position, and greedy tokens with their margins.
struct ReferencePrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<std::pair<int32_t, double>> last_logits;
  std::vector<std::pair<std::pair<int32_t, double>, double>> top1_and_second;  // per position
  std::vector<int32_t> greedy;
  std::vector<double> greedy_margins;
};

std::vector<int32_t> ids_of(const json::Value& v) {
  std::vector<int32_t> ids;
  for (const json::Value& t : v.as_array()) ids.push_back(static_cast<int32_t>(t.as_int()));
  return ids;
}

std::pair<int32_t, double> pair_of(const json::Value& v) {
  return {static_cast<int32_t>(v.as_array()[0].as_int()), v.as_array()[1].as_number()};
}

// tiny-qwen2-a.expected.json: full last logits in .f32 files, top10 per position.
std::vector<ReferencePrompt> qwen_reference() {
  std::vector<ReferencePrompt> prompts;
  const json::Value doc = json::parse(read_file(kReferenceDir + "/tiny-qwen2-a.expected.json"));
  for (const json::Value& p : doc.find("prompts")->as_array()) {
    ReferencePrompt r;
    r.text = p.find("text")->as_string();
    r.tokens = ids_of(*p.find("tokens"));
    const std::string raw = read_file(kReferenceDir + "/" + p.find("last_logits_file")->as_string());
    std::vector<float> logits(raw.size() / sizeof(float));
    std::memcpy(logits.data(), raw.data(), logits.size() * sizeof(float));
    for (size_t i = 0; i < logits.size(); ++i) r.last_logits.emplace_back(static_cast<int32_t>(i), logits[i]);
    for (const json::Value& pos : p.find("top10")->as_array())
      r.top1_and_second.emplace_back(pair_of(pos.as_array()[0]), pair_of(pos.as_array()[1]).second);
    r.greedy = ids_of(*p.find("greedy"));
    for (const json::Value& m : p.find("greedy_margins")->as_array()) r.greedy_margins.push_back(m.as_number());
    prompts.push_back(std::move(r));
  }
  return prompts;
}

// tests/data/llama-tiny.reference.json: last_top256, top2 per position.
std::vector<ReferencePrompt> llama_reference() {
  std::vector<ReferencePrompt> prompts;
  const json::Value doc = json::parse(read_file(LUMEN_SOURCE_DIR "/tests/data/llama-tiny.reference.json"));
  for (const json::Value& p : doc.find("prompts")->as_array()) {
    ReferencePrompt r;
    r.text = p.find("text")->as_string();
    r.tokens = ids_of(*p.find("tokens"));
    for (const json::Value& pair : p.find("last_top256")->as_array()) r.last_logits.push_back(pair_of(pair));
    for (const json::Value& pos : p.find("top2")->as_array())
      r.top1_and_second.emplace_back(pair_of(pos.as_array()[0]), pair_of(pos.as_array()[1]).second);
    r.greedy = ids_of(*p.find("greedy"));
    for (const json::Value& m : p.find("greedy_margins")->as_array()) r.greedy_margins.push_back(m.as_number());
    prompts.push_back(std::move(r));
  }
  return prompts;
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

class EndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "e2e" / "e2e_test_files" / std::to_string(getpid());
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // `lumenc compile dsl/<arch>.dsl -o <dir>/<arch>.so`, then load it.
  static std::shared_ptr<const CompiledModel> compile(const std::string& arch) {
    const std::string so = (dir_ / (arch + ".so")).string();
    const std::string cmd = std::string(LUMEN_BINARY_DIR "/tools/lumenc compile ") + LUMEN_SOURCE_DIR "/dsl/" + arch +
                            ".dsl -o " + so + " 2>" + (dir_ / "lumenc.err").string();
    const int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << read_file((dir_ / "lumenc.err").string());
    return std::make_shared<CompiledModel>(load_model_so(so));
  }

  // Tokens, last-position logits, decisive top-1s and teacher-forced greedy
  // steps of every prompt, the way llama.cpp's reference was recorded.
  static void expect_matches(const std::shared_ptr<const CompiledModel>& model, const std::string& gguf_path,
                             const std::vector<ReferencePrompt>& prompts) {
    ASSERT_FALSE(prompts.empty());
    const Tokenizer tok = Tokenizer::from_gguf(gguf::File::open(gguf_path));
    SessionOptions o;
    o.n_threads = 2;
    o.n_ctx = 1024;
    o.all_logits = true;
    Session s(model, gguf_path, o);
    int decisive_positions = 0, decisive_steps = 0;
    for (size_t k = 0; k < prompts.size(); ++k) {
      const ReferencePrompt& p = prompts[k];
      const std::string what = "prompt " + std::to_string(k);
      EXPECT_EQ(tok.encode(p.text, /*parse_special=*/true), p.tokens) << what;
      s.clear();
      std::span<const float> logits = s.eval(p.tokens);
      ASSERT_EQ(logits.size(), static_cast<size_t>(s.n_vocab())) << what;
      double max_diff = 0, sum_sq = 0;
      for (const auto& [id, ref] : p.last_logits) {
        const double d = std::fabs(static_cast<double>(logits[static_cast<size_t>(id)]) - ref);
        max_diff = std::max(max_diff, d);
        sum_sq += d * d;
      }
      EXPECT_LE(max_diff, kMaxAbsLogitDiff) << what;
      EXPECT_LE(std::sqrt(sum_sq / static_cast<double>(p.last_logits.size())), kMaxRmsLogitDiff) << what;
      for (size_t t = 0; t < p.tokens.size(); ++t) {
        const auto& [top1, second] = p.top1_and_second[t];
        if (top1.second - second <= kDecisiveMargin) continue;
        EXPECT_EQ(argmax(s.logits_at(static_cast<int64_t>(t))), top1.first) << what << " position " << t;
        ++decisive_positions;
      }
      for (size_t step = 0; step < p.greedy.size(); ++step) {
        if (p.greedy_margins[step] > kDecisiveMargin) {
          EXPECT_EQ(argmax(logits), p.greedy[step]) << what << " step " << step;
          ++decisive_steps;
        }
        logits = s.eval(std::span<const int32_t>(&p.greedy[step], 1));  // teacher forcing
      }
    }
    EXPECT_GT(decisive_positions, 0);
    EXPECT_GT(decisive_steps, 0);
  }

  static fs::path dir_;
};

fs::path EndToEnd::dir_;

TEST_F(EndToEnd, Qwen2DslMatchesLlamaCpp) {
  expect_matches(compile("qwen2"), kQwenGguf, qwen_reference());
}

TEST_F(EndToEnd, LlamaDslMatchesLlamaCpp) {
  // The model the reference was recorded on: regenerated here (deterministic
  // for a seed, whatever the thread count) rather than kept in the repository.
  gguf::SynthConfig c = gguf::synth_preset("llama");
  c.seed = 1;
  c.vocab_from = kQwenGguf;
  const std::string gguf_path = (dir_ / "llama-tiny.gguf").string();
  gguf::synthesize(c, gguf_path);
  expect_matches(compile("llama"), gguf_path, llama_reference());
}

}  // namespace
}  // namespace lumen::runtime
