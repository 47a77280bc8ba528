// `lumen-gguf quantize` against llama-quantize, whole files: for every file
// type, the XXH3 of the file lumen-gguf writes from the 3-layer model
// tests/data/quant/tiny3-q8_0.gguf equals that of llama-quantize's output
// (recorded in llama_quantize_types.json); and its one-line errors.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lumen/common/cache.h"

namespace {

const std::string kTool = std::string(LUMEN_BINARY_DIR) + "/tools/lumen-gguf";
const std::string kModel = std::string(LUMEN_SOURCE_DIR) + "/tests/data/quant/tiny3-q8_0.gguf";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ToolRun {
  int exit_code;
  std::string err;
};

class LumenGgufQuantize : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kTool)) << kTool << " is missing";
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("lumen-quantize-test-{}-{}", getpid(), testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ToolRun run(const std::string& args) {
    const std::string err = (dir_ / "err").string();
    const int status = std::system((kTool + " " + args + " >/dev/null 2>" + err).c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(err)};
  }
  std::string out(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

void expect_one_line_error(const ToolRun& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(r.err.starts_with("lumen-gguf: error: ")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST_F(LumenGgufQuantize, FilesAreLlamaQuantizes) {
  std::ifstream in(LUMEN_SOURCE_DIR "/tests/data/quant/llama_quantize_types.json");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json hashes = nlohmann::json::parse(text.str()).at("tiny3_llama_quantize_xxh3");
  ASSERT_EQ(hashes.size(), 19u);
  for (const auto& [file_type, hash] : hashes.items()) {
    const std::string path = out(file_type + ".gguf");
    const ToolRun r = run("quantize --allow-requantize " + kModel + " " + path + " " + file_type);
    ASSERT_EQ(r.exit_code, 0) << file_type << ": " << r.err;
    const std::string bytes = slurp(path);
    EXPECT_EQ(fmt::format("{:016x}", lumen::hash_bytes(bytes.data(), bytes.size(), 0)), hash.get<std::string>())
        << file_type;
    std::filesystem::remove(path);
  }
}

TEST_F(LumenGgufQuantize, TwoThreadsWriteTheSameBytes) {
  ASSERT_EQ(run("quantize --allow-requantize " + kModel + " " + out("a.gguf") + " Q4_K_M").exit_code, 0);
  ASSERT_EQ(run("quantize --allow-requantize --threads 2 " + kModel + " " + out("b.gguf") + " Q4_K_M").exit_code, 0);
  EXPECT_EQ(slurp(out("a.gguf")), slurp(out("b.gguf")));
}

TEST_F(LumenGgufQuantize, Errors) {
  expect_one_line_error(run("quantize " + kModel + " " + out("x.gguf") + " Q4_K_X"), "unknown file type 'Q4_K_X'");
  expect_one_line_error(run("quantize " + kModel + " " + out("x.gguf") + " IQ2_XS"),
                        "needs an importance matrix, which lumen-gguf does not compute");
  expect_one_line_error(run("quantize " + kModel + " " + out("x.gguf") + " IQ3_XXS"), "needs an importance matrix");
  expect_one_line_error(run("quantize " + out("missing.gguf") + " " + out("x.gguf") + " Q4_0"), "missing.gguf");
  // The input is Q8_0: converting it needs the flag, as in llama-quantize...
  expect_one_line_error(run("quantize " + kModel + " " + out("x.gguf") + " Q4_K_M"), "--allow-requantize");
  EXPECT_FALSE(std::filesystem::exists(out("x.gguf")));
  // ...but a file type that keeps every quantized tensor as it is does not.
  EXPECT_EQ(run("quantize " + kModel + " " + out("q8.gguf") + " Q8_0").exit_code, 0);
}

}  // namespace
