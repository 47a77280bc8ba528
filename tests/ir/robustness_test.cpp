// Malformed IR text never crashes the parser or the verifier: every prefix
// of a golden file and 200 single-character mutations either parse or throw
// IrError naming the line, and whatever parses verifies, prints and parses
// back to the same text.
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

// Each mutation has exactly one of two outcomes: parse_module throws IrError
// whose message names the line ("line L: ..."), or it returns a module whose
// printed form parses back to the same text (the printer and parser agree on
// whatever the parser accepts). Any other exception fails the test. The seed
// is fixed and both outcomes must occur, so the test exercises both.
TEST(IrRobustness, MutationsParseOrThrow) {
  std::string text = golden("plan_memory.out.ir");
  ASSERT_FALSE(text.empty());
  const std::string replacements = "%@()[]{},:=?-0123456789Nxl \n\"";
  uint64_t state = 12345;  // fixed seed: the test is deterministic
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 200; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t at = static_cast<size_t>(state >> 33) % text.size();
    std::string mutated = text;
    mutated[at] = replacements[static_cast<size_t>(state >> 13) % replacements.size()];
    const std::string what = "mutation " + std::to_string(i) + " at offset " + std::to_string(at);
    std::string printed;
    try {
      Module m = parse_module(mutated);
      (void)verify(m, /*require_types=*/false);
      printed = print_module(m);
    } catch (const IrError& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind("line ", 0), 0u) << what << ": " << e.what();
      continue;
    }
    ++parsed;
    try {
      EXPECT_EQ(print_module(parse_module(printed)), printed) << what;
    } catch (const IrError& e) {
      ADD_FAILURE() << what << ": the printed module does not parse back: " << e.what();
    }
  }
  EXPECT_EQ(parsed + rejected, 200);
  EXPECT_GT(parsed, 0) << "no mutation parsed: the round trip went untested";
  EXPECT_GT(rejected, 0) << "no mutation was rejected";
}

}  // namespace
}  // namespace lumen::ir
