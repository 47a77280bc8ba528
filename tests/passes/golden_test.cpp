// Golden tests for every pass: each tests/passes/golden/<pass>[.<case>].in.ir
// is parsed, verified, run through <pass>, verified again, printed, and
// compared with the matching .out.ir exactly. <pass>.in.ir is the qwen2
// pipeline at that point; the <case> files cover what a pass must leave alone. LUMEN_UPDATE_GOLDEN=1 rewrites the .out.ir
// files (review the diff before committing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"
#include "lumen/passes/passes.h"

namespace {

std::string golden_path(const std::string& name) { return std::string(LUMEN_SOURCE_DIR) + "/tests/passes/golden/" + name; }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// The target of the schedule's golden kernels (the other passes ignore it).
constexpr lumen::Isa kTarget = lumen::Isa::Avx512Vnni;

class PassGolden : public testing::TestWithParam<std::string> {};

TEST_P(PassGolden, MatchesExpectedOutput) {
  const std::string stem = GetParam();  // "fuse_qkv" or "fuse_qkv.different_inputs"
  const std::string pass_name = stem.substr(0, stem.find('.'));
  const lumen::passes::PassInfo* pass = lumen::passes::find_pass(pass_name);
  ASSERT_NE(pass, nullptr);
  lumen::ir::Module m = lumen::ir::parse_module(read_file(golden_path(stem + ".in.ir")));
  // Types are open only before shape inference.
  bool typed_input = pass_name != "infer_shapes";
  ASSERT_EQ(join(lumen::ir::verify(m, typed_input)), "") << "input does not verify";
  pass->run(m, kTarget);
  ASSERT_EQ(join(lumen::ir::verify(m)), "") << "output does not verify";
  std::string actual = lumen::ir::print_module(m);
  std::string out_path = golden_path(stem + ".out.ir");
  if (const char* update = std::getenv("LUMEN_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(out_path) << actual;
  }
  EXPECT_EQ(actual, read_file(out_path));
  // The expected output is itself stable text.
  EXPECT_EQ(lumen::ir::print_module(lumen::ir::parse_module(actual)), actual);
}

// Every <stem>.in.ir in the golden folder, sorted.
std::vector<std::string> golden_stems() {
  std::vector<std::string> stems;
  for (const auto& entry : std::filesystem::directory_iterator(golden_path(""))) {
    std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.ends_with(".in.ir")) stems.push_back(name.substr(0, name.size() - 6));
  }
  std::sort(stems.begin(), stems.end());
  return stems;
}

TEST(PassGoldenFiles, CoverEveryPass) {
  auto stems = golden_stems();
  for (const auto& p : lumen::passes::pipeline())
    EXPECT_TRUE(std::find(stems.begin(), stems.end(), p.name) != stems.end()) << "no golden test for " << p.name;
  for (const auto& stem : stems)
    EXPECT_NE(lumen::passes::find_pass(stem.substr(0, stem.find('.'))), nullptr) << stem << " names no pass";
}

INSTANTIATE_TEST_SUITE_P(Golden, PassGolden, testing::ValuesIn(golden_stems()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '.') c = '_';
                           return name;
                         });

}  // namespace
