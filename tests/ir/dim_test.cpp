// Symbolic dimensions: simplification, printing, parsing, evaluation.
#include <gtest/gtest.h>

#include <map>

#include "lumen/ir/dim.h"
#include "lumen/ir/text.h"

namespace lumen::ir {
namespace {

std::optional<int64_t> eval(const Dim& d, std::map<std::string, int64_t> params, int64_t n) {
  return d.eval([&](const std::string& name) -> std::optional<int64_t> {
    auto it = params.find(name);
    if (it == params.end()) return std::nullopt;
    return it->second;
  }, n);
}

TEST(Dim, FoldsConstantsAndIdentities) {
  Dim e = Dim::param("n_embd");
  EXPECT_EQ((Dim::constant(2) * Dim::constant(3)).str(), "6");
  EXPECT_EQ((e + Dim::constant(0)).str(), "n_embd");
  EXPECT_EQ((Dim::constant(1) * e).str(), "n_embd");
  EXPECT_EQ(max(e, e).str(), "n_embd");
  EXPECT_TRUE(e * Dim::tokens() == Dim::param("n_embd") * Dim::tokens());
  EXPECT_FALSE(e * Dim::tokens() == Dim::tokens() * e);
}

TEST(Dim, PrintsMinimalParentheses) {
  Dim a = Dim::param("a"), b = Dim::param("b"), c = Dim::param("c");
  EXPECT_EQ((a + b * c).str(), "a + b * c");
  EXPECT_EQ(((a + b) * c).str(), "(a + b) * c");
  EXPECT_EQ((a - (b - c)).str(), "a - (b - c)");
  EXPECT_EQ((a - b - c).str(), "a - b - c");
  EXPECT_EQ((a / (b * c)).str(), "a / (b * c)");
  EXPECT_EQ(max(a + b, Dim::tokens()).str(), "max(a + b, N)");
}

TEST(Dim, ParsesWhatItPrints) {
  for (const char* text : {"a + b * c", "(a + b) * c", "a - (b - c)", "max(0, (N * n_embd * 4 + 63) / 64 * 64)",
                           "min(a, b) % 7", "N", "-3", "a * (-3)"}) {
    Dim d = parse_dim(text);
    EXPECT_EQ(parse_dim(d.str()).str(), d.str()) << text;
  }
  EXPECT_EQ(parse_dim("a+b*c").str(), "a + b * c");
  EXPECT_THROW(parse_dim("a +"), IrError);
  EXPECT_THROW(parse_dim("max(a)"), IrError);
  EXPECT_THROW(parse_dim("(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
                         "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
                         "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a"),
               IrError);
}

TEST(Dim, Evaluates) {
  Dim d = parse_dim("(N * n_embd * 4 + 63) / 64 * 64");
  EXPECT_EQ(eval(d, {{"n_embd", 896}}, 1), 3584);
  EXPECT_EQ(eval(d, {{"n_embd", 3}}, 1), 64);
  EXPECT_EQ(eval(d, {}, 1), std::nullopt);
  EXPECT_EQ(eval(parse_dim("-7 / 2"), {}, 0), -4);  // floor division, as program::Expr
  EXPECT_THROW(eval(parse_dim("a / 0"), {{"a", 1}}, 0), std::domain_error);
  EXPECT_TRUE(parse_dim("n * N").uses_tokens());
  EXPECT_FALSE(parse_dim("n * 2").uses_tokens());
}

}  // namespace
}  // namespace lumen::ir
