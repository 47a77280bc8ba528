// Qwen3, Llama 3 and Gemma 2 from their dsl/ programs alone: tiny synthetic models written by the synthesizer must give
// llama.cpp's last-token logits and its greedy tokens wherever llama.cpp's own
// top-1 margin is decisive (teacher forcing; the harness and its tolerances:
// tests/support/llama_cpp_reference.h). Each architecture is also run
// on a second seed. Then lumen-run's one-command form: --gguf without a
// model.so compiles the program of the file's architecture into a cache.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "synth/gguf_synth.h"
#include "lumen/driver/driver.h"
#include "lumen/gguf/gguf.h"
#include "lumen/gguf/json.h"
#include "lumen/ops/op_table.h"
#include "lumen/program/program.h"
#include "lumen/runtime/session.h"
#include "lumen/text/tokenizer.h"
#include "runtime_support.h"
#include "support/llama_cpp_reference.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;

const std::string kData = LUMEN_SOURCE_DIR "/tests/data/models";
const std::string kVocabs = test_support::shared_reference_dir() + "/tokenizers";

// One folder per process (ctest runs the tests in parallel), removed at exit.
struct ScratchDir {
  fs::path path = fs::path(LUMEN_BINARY_DIR) / "tests" / "models" / ("files-" + std::to_string(getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

program::Program compile(const std::string& dsl_path) {
  driver::Options options;
  options.target = best_isa(cpu_features());  // the kernels the in-process model runs
  return *driver::compile(driver::Source::read(dsl_path), options).program;
}

using test_support::argmax;

struct Case {
  const char* name;    // reference files: <name>.expected.json, <name>.<k>.last_logits.f32
  const char* preset;  // lumen-gguf synth --preset
  uint64_t seed;
  const char* vocab;   // vocabulary GGUF in the shared tokenizers folder
  const char* program; // dsl/ file
  std::vector<int> prompts;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ModelReference : public ::testing::TestWithParam<Case> {};

TEST_P(ModelReference, MatchesLlamaCppLogitsAndGreedyTokens) {
  const Case& c = GetParam();
  const std::string vocab = kVocabs + "/" + c.vocab;
  if (!fs::exists(vocab)) GTEST_SKIP() << "no shared vocabulary " << vocab;
  gguf::SynthConfig config = gguf::synth_preset(c.preset);
  config.seed = c.seed;
  config.vocab_from = vocab;
  const std::string gguf_path = (scratch_dir() / (std::string(c.name) + ".gguf")).string();
  gguf::synthesize(config, gguf_path);
  const program::Program program = compile(LUMEN_SOURCE_DIR "/dsl/" + std::string(c.program));
  auto model = runtime::testing::in_process_model(program, best_isa(cpu_features()));

  for (int k : c.prompts) {
    SCOPED_TRACE("prompt " + std::to_string(k));
    const test_support::LlamaCppPrompt ref = test_support::model_reference(c.name, k);
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    runtime::Session session(model, gguf_path, so);
    const Tokenizer tok = Tokenizer::from_gguf(session.gguf());
    std::vector<int32_t> ids;
    if (auto bos = tok.bos_to_add()) ids.push_back(*bos);
    for (int32_t id : tok.encode(ref.text, /*parse_special=*/true)) ids.push_back(id);
    ASSERT_EQ(ids, ref.tokens);

    const std::span<const float> logits = session.eval(ids);
    ASSERT_EQ(logits.size(), ref.last_logits.size());  // every id was recorded
    test_support::expect_last_logits_match(logits, ref, c.name);
    test_support::expect_teacher_forced_greedy(session, logits, ref, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Programs, ModelReference,
    ::testing::Values(Case{"qwen3-a", "qwen3", 1, "ggml-vocab-gpt-2.gguf", "qwen3.dsl", {0, 2}},
                      Case{"qwen3-b", "qwen3", 2, "ggml-vocab-gpt-2.gguf", "qwen3.dsl", {2}},
                      Case{"llama3-a", "llama3", 1, "ggml-vocab-deepseek-coder.gguf", "llama.dsl", {0, 2}},
                      Case{"llama3-b", "llama3", 2, "ggml-vocab-deepseek-coder.gguf", "llama.dsl", {2}},
                      Case{"gemma2-a", "gemma2", 1, "ggml-vocab-llama-spm.gguf", "gemma2.dsl", {0, 2}},
                      Case{"gemma2-b", "gemma2", 2, "ggml-vocab-llama-spm.gguf", "gemma2.dsl", {2}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string n = info.param.name;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// Every op of the one list (ops/op_list.h), so that a new op is covered the
// day its row is added: it has a type rule; the program text carries exactly
// the ops the list marks `in_program` (each round-trips, the others are
// refused); and the runtime dispatches every program op: a dsl/ program uses
// it and a session runs it (the session's profile counts its calls). No
// dsl/ program applies softmax, and fuse_gate_up leaves them no silu or
// silu_mul op, so a variant of qwen2 ends in all three.
TEST(OpList, EveryOpHasARuleRoundTripsThroughTheProgramTextAndIsRunByTheRuntime) {
  for (const ops::OpRow& row : ops::kOps) {
    EXPECT_EQ(ops::op_info(row.id).id, row.id) << row.name;
    EXPECT_NE(ops::op_info(row.id).rule, nullptr) << row.name;
  }

  const program::Program base = program::deserialize(runtime::testing::read_file(runtime::testing::qwen2_program_path()));
  for (const ops::OpRow& row : ops::kOps) {
    program::Program p = base;
    program::Op op;
    op.kind = row.in_program ? row.id : ops::OpId::Add;
    op.schedule.formats = {{ops::DType::Q8_0, program::KernelId::gemv(op.epilogue), program::KernelId::batch(op.epilogue),
                            program::KernelId::gemm(op.epilogue, 16, 1)}};
    p.post.push_back(op);
    std::string text = program::serialize(p);
    if (row.in_program) {
      EXPECT_EQ(program::deserialize(text).post.back().kind, row.id) << row.name;
      continue;
    }
    const std::string add = std::string("op=") + ops::id_name(ops::OpId::Add);
    text.replace(text.rfind(add), add.size(), std::string("op=") + row.id_name);
    EXPECT_THROW(program::deserialize(text), program::ParseError) << row.name;
  }

  struct Model {
    const char* preset;  // lumen-gguf synth --preset; empty: the shared reference tiny-qwen2-a
    const char* vocab;   // in the shared tokenizers folder
  };
  const std::map<std::string, Model> models = {{"qwen2.dsl", {"", ""}},
                                               {"qwen3.dsl", {"qwen3", "ggml-vocab-gpt-2.gguf"}},
                                               {"llama.dsl", {"llama3", "ggml-vocab-deepseek-coder.gguf"}},
                                               {"gemma2.dsl", {"gemma2", "ggml-vocab-llama-spm.gguf"}}};
  std::vector<std::pair<fs::path, Model>> runs;
  for (const auto& entry : fs::directory_iterator(LUMEN_SOURCE_DIR "/dsl")) {
    auto it = models.find(entry.path().filename().string());
    ASSERT_NE(it, models.end()) << entry.path() << ": add its synth preset to this test";
    runs.emplace_back(entry.path(), it->second);
  }
  const fs::path variant = scratch_dir() / "qwen2-unfused-tail.dsl";
  {
    std::string text = runtime::testing::read_file(LUMEN_SOURCE_DIR "/dsl/qwen2.dsl");
    const std::string logits = "return matmul(h, output)";
    ASSERT_NE(text.find(logits), std::string::npos);
    // silu(y) * softmax(y) of two computed values is one silu_mul op; the other silu stays one.
    text.replace(text.find(logits), logits.size(),
                 "y = matmul(h, output)\n  return softmax(silu(y) * softmax(y) + silu(y))");
    std::ofstream(variant) << text;
  }
  runs.emplace_back(variant, models.at("qwen2.dsl"));

  std::set<std::string> ran;  // profile keys: the op's id_name (a matmul's is followed by its kernel)
  for (const auto& [dsl_path, m] : runs) {
    SCOPED_TRACE(dsl_path.string());
    std::string gguf_path = runtime::testing::tiny_gguf();
    if (*m.preset) {
      gguf::SynthConfig config = gguf::synth_preset(m.preset);
      config.vocab_from = kVocabs + "/" + m.vocab;
      gguf_path = (scratch_dir() / (dsl_path.stem().string() + "-ops.gguf")).string();
      gguf::synthesize(config, gguf_path);
    }
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 32;
    so.profile = true;
    runtime::Session session(runtime::testing::in_process_model(compile(dsl_path.string()), best_isa(cpu_features())),
                             gguf_path, so);
    const std::vector<int32_t> tokens = {1, 5, 7};
    session.eval(tokens);                                    // prefill
    session.eval(std::span<const int32_t>(&tokens[1], 1));  // a decode step
    std::istringstream report(session.profile_report());
    std::string line;
    std::getline(report, line);  // the header
    while (std::getline(report, line)) ran.insert(line.substr(0, line.find(' ')));
  }
  for (const ops::OpRow& row : ops::kOps) {
    if (!row.in_program) continue;
    EXPECT_TRUE(ran.count(row.id_name)) << row.name << ": no dsl/ program runs it";
  }
}

// Three attention ops in one layer, each with its own KV cache: the average
// of two identical attentions, (a + a) * 0.5 == a exactly, plus 0 times a
// third one whose cache rows are wider (K = Q: n_head heads) must give the
// logits of the one-attention program bit for bit, over a prefill and decode
// steps. A shared cache would mix the third op's rows into the others'.
TEST(KvCache, SeveralAttentionOpsInALayerKeepACacheEach) {
  const std::string vocab = kVocabs + "/ggml-vocab-gpt-2.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "no shared vocabulary " << vocab;
  gguf::SynthConfig config = gguf::synth_preset("qwen3");
  config.vocab_from = vocab;
  const fs::path gguf_path = scratch_dir() / "two-attention.gguf";
  gguf::synthesize(config, gguf_path.string());
  const std::string one = runtime::testing::read_file(LUMEN_SOURCE_DIR "/dsl/qwen3.dsl");
  const std::string call = "a = attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim)";
  const size_t at = one.find(call);
  ASSERT_NE(at, std::string::npos);
  const std::string two = one.substr(0, at) +
                          "a = scale(attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim) + "
                          "attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim), 0.5) + "
                          "scale(attention(q, q, q, heads = n_head, kv_heads = n_head, dim = head_dim), 0.0)" +
                          one.substr(at + call.size());
  const fs::path two_path = scratch_dir() / "qwen3-two-attention.dsl";
  std::ofstream(two_path) << two;
  std::vector<std::vector<float>> logits[2];
  const std::vector<int32_t> prompt = {15496, 995, 11, 314, 716, 257, 1332, 13};
  for (int k = 0; k < 2; ++k) {
    auto model = runtime::testing::in_process_model(compile(k == 0 ? LUMEN_SOURCE_DIR "/dsl/qwen3.dsl" : two_path.string()),
                                                    best_isa(cpu_features()));
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 64;
    runtime::Session session(model, gguf_path.string(), so);
    std::span<const float> l = session.eval(prompt);
    logits[k].emplace_back(l.begin(), l.end());
    for (int step = 0; step < 4; ++step) {
      const int32_t next = static_cast<int32_t>(argmax(l));
      l = session.eval(std::span<const int32_t>(&next, 1));
      logits[k].emplace_back(l.begin(), l.end());
    }
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  for (size_t i = 0; i < logits[0].size(); ++i) EXPECT_EQ(logits[0][i], logits[1][i]) << "eval " << i;
}

// ------------------------------------------------ lumen-run --gguf FILE, no model.so

struct Result {
  int exit_code = -1;
  std::string err;
};

Result run_lumen_run(const std::string& args, const fs::path& cache) {
  const fs::path err = scratch_dir() / "stderr.txt";
  const std::string cmd = "LUMEN_CACHE_DIR='" + cache.string() + "' '" LUMEN_BINARY_DIR "/tools/lumen-run' " + args +
                          " >/dev/null 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  return Result{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), runtime::testing::read_file(err.string())};
}

size_t count_files(const fs::path& dir, const std::string& extension) {
  size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.path().extension() == extension;
  return n;
}

TEST(OneCommand, CompilesTheProgramOfTheArchitectureOnceIntoTheCacheAndRunsIt) {
  const std::string vocab = kVocabs + "/ggml-vocab-gpt-2.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "no shared vocabulary " << vocab;
  gguf::SynthConfig config = gguf::synth_preset("qwen3");
  config.vocab_from = vocab;
  const fs::path gguf_path = scratch_dir() / "one-command.gguf", cache = scratch_dir() / "cache";
  gguf::synthesize(config, gguf_path.string());
  const fs::path logits = scratch_dir() / "one-command.f32";
  const std::string args = "--gguf '" + gguf_path.string() + "' --dsl-dir '" LUMEN_SOURCE_DIR "/dsl' -p 'Hello world' -n 0 -t 1 --dump-logits '" + logits.string() + "'";

  Result first = run_lumen_run(args, cache);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("compiled"), std::string::npos) << first.err;
  EXPECT_EQ(count_files(cache, ".so"), 1u);
  const std::vector<float> got = test_support::read_f32_file(logits.string()),
                           want = test_support::read_f32_file(kData + "/qwen3-a.0.last_logits.f32");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(argmax(got), argmax(want));

  Result second = run_lumen_run(args, cache);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.err.find("compiled"), std::string::npos) << "the cached model.so was not reused: " << second.err;
  EXPECT_EQ(count_files(cache, ".so"), 1u);
}

TEST(OneCommand, AnArchitectureNoProgramDescribesIsAnErrorListingThePrograms) {
  gguf::Writer w;
  w.set_string("general.architecture", "mamba");
  const fs::path path = scratch_dir() / "mamba.gguf";
  w.write(path.string());
  Result r = run_lumen_run("--gguf '" + path.string() + "' --dsl-dir '" LUMEN_SOURCE_DIR "/dsl' -p hi", scratch_dir() / "cache-err");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("lumen-run: error: no model program describes architecture 'mamba'", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("gemma2, llama, qwen2, qwen3"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(OneCommand, AnExplicitModelSoStillWorks) {
  const std::string vocab = kVocabs + "/ggml-vocab-gpt-2.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "no shared vocabulary " << vocab;
  gguf::SynthConfig config = gguf::synth_preset("qwen3");
  config.vocab_from = vocab;
  const fs::path gguf_path = scratch_dir() / "explicit.gguf", so = scratch_dir() / "qwen3.so";
  gguf::synthesize(config, gguf_path.string());
  driver::Options options;
  options.stage = driver::Stage::ModelSo;
  options.target = best_isa(cpu_features());
  options.output = so.string();
  driver::compile(driver::Source::read(LUMEN_SOURCE_DIR "/dsl/qwen3.dsl"), options);
  Result r = run_lumen_run("'" + so.string() + "' --gguf '" + gguf_path.string() + "' -p hi -n 2 -t 1", scratch_dir() / "cache-unused");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("compiled"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace lumen
