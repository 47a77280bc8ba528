// Every weight type llama-quantize writes without an importance matrix, end
// to end against llama.cpp (tests/data/weight-types, README there): per file
// type, `lumen-gguf quantize` of a synthetic base model must write the bytes
// llama-quantize wrote, and Lumen on that file (the program compiled for the
// file's types, as `lumen-run --gguf` does) must give llama.cpp's last-token
// logits within the quantized types' bound and its greedy tokens wherever
// llama.cpp's own margin is decisive (the harness:
// tests/support/llama_cpp_reference.h).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/model_for_gguf.h"
#include "lumen/common/cache.h"
#include "lumen/gguf/json.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/session.h"
#include "lumen/text/tokenizer.h"
#include "support/llama_cpp_reference.h"
#include "support/test_files.h"
#include "support/tolerances.h"
#include "synth/gguf_synth.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;

const std::string kData = LUMEN_SOURCE_DIR "/tests/data/weight-types";
constexpr int kPrompt = 2;  // of tests/data/models/prompts.txt: the one whose logits were kept

// One folder per process (ctest runs the tests in parallel), removed at exit;
// it is also the compiled-model and packed-weight cache of the process.
struct ScratchDir {
  fs::path path = fs::path(LUMEN_BINARY_DIR) / "tests" / "models" / ("weight-types-" + std::to_string(getpid()));
  ScratchDir() {
    fs::create_directories(path);
    setenv("LUMEN_CACHE_DIR", path.c_str(), 1);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

// A base model of the README's table, and the XXH3-64 of the file its
// command writes (so that a changed synthesizer shows as such, not as a
// quantizer that differs from llama-quantize).
struct Base {
  const char* name;
  uint32_t n_embd, n_head, n_ff;
  uint64_t seed;
  uint64_t xxh3_64;
};
constexpr Base kW256{"w256", 256, 4, 512, 1, 0xc39b6d2fb3a2b56fULL};
constexpr Base kW896{"w896", 896, 14, 512, 2, 0x490bca667f4b87d3ULL};

struct Case {
  const Base* base;
  const char* file_type;  // llama-quantize's and lumen-gguf quantize's name
  std::string name() const { return std::string(base->name) + "-" + file_type; }
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

uint64_t file_hash(const fs::path& path) {
  const std::string bytes = test_support::read_existing_file(path.string());
  return hash_bytes(bytes.data(), bytes.size(), 0);
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << std::hex;
  s.width(16);
  s.fill('0');
  s << v;
  return s.str();
}

// The base model, written once per process.
fs::path base_model(const Base& b) {
  const fs::path path = scratch_dir() / (std::string(b.name) + ".gguf");
  if (fs::exists(path)) return path;
  gguf::SynthConfig config = gguf::synth_preset("tiny");
  config.n_embd = b.n_embd;
  config.n_head = b.n_head;
  config.n_head_kv = 2;
  config.n_ff = b.n_ff;
  config.n_layer = 2;
  config.n_vocab = 32000;
  config.seed = b.seed;
  config.vocab_from = test_support::shared_reference_dir() + "/tokenizers/ggml-vocab-llama-spm.gguf";
  gguf::synthesize(config, path.string());
  return path;
}

// The recorded run: prompt kPrompt of tests/data/models/prompts.txt with
// this file's tokens, greedy steps and logits.
test_support::LlamaCppPrompt reference(const Case& c, std::string* xxh3_64) {
  using namespace test_support::reference_detail;
  std::istringstream lines(test_support::read_existing_file(LUMEN_SOURCE_DIR "/tests/data/models/prompts.txt"));
  std::string line;
  for (int i = 0; i <= kPrompt; ++i) std::getline(lines, line);
  test_support::LlamaCppPrompt r;
  for (size_t i = 0; i < line.size(); ++i) r.text += line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n' ? (++i, '\n') : line[i];
  const json::Value doc = json::parse(test_support::read_existing_file(kData + "/" + c.name() + ".expected.json"));
  *xxh3_64 = field(doc, "xxh3_64").as_string();
  const json::Value& p = field(doc, "prompts").as_array().at(kPrompt);
  r.tokens = ids_of(field(p, "tokens"));
  r.last_logits = all_ids(test_support::read_f32_file(kData + "/" + c.name() + "." + std::to_string(kPrompt) + ".last_logits.f32"));
  r.greedy = ids_of(field(p, "greedy"));
  r.greedy_margins = numbers_of(field(p, "greedy_margins"));
  return r;
}

class WeightTypes : public ::testing::TestWithParam<Case> {};

TEST_P(WeightTypes, QuantizeWritesLlamaQuantizesBytesAndRunsAsLlamaCpp) {
  const Case& c = GetParam();
  std::string want_hash;
  const test_support::LlamaCppPrompt ref = reference(c, &want_hash);
  const fs::path base = base_model(*c.base);
  ASSERT_EQ(hex(file_hash(base)), hex(c.base->xxh3_64)) << "the synthesizer no longer writes the README's base model";

  const fs::path file = scratch_dir() / (c.name() + ".gguf"), err = scratch_dir() / (c.name() + ".stderr");
  const std::string cmd = "'" LUMEN_BINARY_DIR "/tools/lumen-gguf' quantize '" + base.string() + "' '" + file.string() +
                          "' " + c.file_type + " --allow-requantize >/dev/null 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test_support::read_existing_file(err.string());
  EXPECT_EQ(hex(file_hash(file)), want_hash) << "lumen-gguf quantize and llama-quantize wrote different bytes";

  const std::string so_path = cli::model_for_gguf(file.string(), std::string(LUMEN_SOURCE_DIR "/dsl"), "weight_types_test");
  auto model = std::make_shared<const runtime::CompiledModel>(runtime::load_model_so(so_path));
  runtime::SessionOptions so;
  so.n_threads = 2;
  so.n_ctx = 128;
  runtime::Session session(model, file.string(), so);
  const Tokenizer tok = Tokenizer::from_gguf(session.gguf());
  std::vector<int32_t> ids;
  if (auto bos = tok.bos_to_add()) ids.push_back(*bos);
  for (int32_t id : tok.encode(ref.text, /*parse_special=*/true)) ids.push_back(id);
  ASSERT_EQ(ids, ref.tokens);
  const std::span<const float> logits = session.eval(ids);
  ASSERT_EQ(logits.size(), ref.last_logits.size());
  test_support::expect_last_logits_match(logits, ref, c.name(), tolerance::kMaxAbsLogitDiffQuantized);
  test_support::expect_teacher_forced_greedy(session, logits, ref, c.name());
}

INSTANTIATE_TEST_SUITE_P(
    FileTypes, WeightTypes,
    ::testing::Values(Case{&kW256, "F16"}, Case{&kW256, "BF16"}, Case{&kW256, "Q8_0"}, Case{&kW256, "Q4_0"},
                      Case{&kW256, "Q4_1"}, Case{&kW256, "Q5_0"}, Case{&kW256, "Q5_1"}, Case{&kW256, "Q2_K"},
                      Case{&kW256, "Q3_K_M"}, Case{&kW256, "Q4_K_M"}, Case{&kW256, "Q5_K_M"}, Case{&kW256, "Q6_K"},
                      Case{&kW256, "IQ4_NL"}, Case{&kW256, "IQ4_XS"}, Case{&kW896, "Q4_K_M"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string n = info.param.name();
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

}  // namespace
}  // namespace lumen
