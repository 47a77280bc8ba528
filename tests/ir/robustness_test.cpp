// Malformed IR text never crashes the parser or the verifier: every prefix
// of a golden file and 200 single-character mutations either
// parse or throw IrError, and whatever parses can be verified and printed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"

namespace lumen::ir {
namespace {

std::string golden(const std::string& name) {
  std::ifstream in(std::string(LUMEN_SOURCE_DIR) + "/tests/passes/golden/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses `text`; on success verifies and prints it. Returns whether it parsed.
bool survives(const std::string& text) {
  try {
    Module m = parse_module(text);
    (void)verify(m, /*require_types=*/false);
    (void)print_module(m);
    return true;
  } catch (const IrError&) {
    return false;
  }
}

TEST(IrRobustness, EveryPrefixParsesOrThrows) {
  std::string text = golden("fuse_qkv.out.ir");
  ASSERT_FALSE(text.empty());
  int parsed = 0;
  for (size_t n = 0; n <= text.rfind('}'); n += 3) parsed += survives(text.substr(0, n));
  EXPECT_TRUE(survives(text));
  EXPECT_EQ(parsed, 0);  // a prefix lacks the closing brace of the function
}

TEST(IrRobustness, MutationsParseOrThrow) {
  std::string text = golden("plan_memory.out.ir");
  ASSERT_FALSE(text.empty());
  const std::string replacements = "%@()[]{},:=?-0123456789Nxl \n\"";
  uint64_t state = 12345;  // fixed seed: the test is deterministic
  for (int i = 0; i < 200; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t at = static_cast<size_t>(state >> 33) % text.size();
    std::string mutated = text;
    mutated[at] = replacements[static_cast<size_t>(state >> 13) % replacements.size()];
    survives(mutated);
  }
}

}  // namespace
}  // namespace lumen::ir
