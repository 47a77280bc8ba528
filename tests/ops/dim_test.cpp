// The one language of sizes (ops/dim.h): simplification, the operators on
// values and their one error, evaluation, printing and parsing; and its
// canonical form with the facts of checks (ops/sym_dim.h).
#include <gtest/gtest.h>

#include <map>

#include "lumen/ops/dim.h"
#include "lumen/ops/sym_dim.h"

namespace lumen::ops {
namespace {

std::optional<int64_t> eval(const Dim& d, std::map<std::string, int64_t> params, int64_t n) {
  return d.eval([&](const std::string& name) -> std::optional<int64_t> {
    auto it = params.find(name);
    if (it == params.end()) return std::nullopt;
    return it->second;
  }, n);
}

Dim c(int64_t v) { return Dim::constant(v); }
Dim p(const char* name) { return Dim::param(name); }

// ------------------------------------------------------------- the type

TEST(Dim, FoldsConstantsAndIdentities) {
  Dim e = p("n_embd");
  EXPECT_EQ((c(2) * c(3)).str(), "6");
  EXPECT_EQ((e + c(0)).str(), "n_embd");
  EXPECT_EQ((c(1) * e).str(), "n_embd");
  EXPECT_EQ(max(e, e).str(), "n_embd");
  EXPECT_TRUE(e * Dim::tokens() == p("n_embd") * Dim::tokens());
  EXPECT_FALSE(e * Dim::tokens() == Dim::tokens() * e);
  // What evaluation refuses is left for evaluation to report.
  EXPECT_EQ((c(1) / c(0)).str(), "1 / 0");
  EXPECT_EQ((c(INT64_MAX) + c(1)).str(), "9223372036854775807 + 1");
}

TEST(Dim, OperatorsFloorDivideWithTheRemainderOfTheDivisorsSign) {
  using K = Dim::Kind;
  EXPECT_EQ(apply(K::Div, 7, 2), 3);
  EXPECT_EQ(apply(K::Div, -7, 2), -4);
  EXPECT_EQ(apply(K::Div, 7, -2), -4);
  EXPECT_EQ(apply(K::Div, -7, -2), 3);
  EXPECT_EQ(apply(K::Mod, -7, 2), 1);
  EXPECT_EQ(apply(K::Mod, 7, -2), -1);
  EXPECT_EQ(apply(K::Mod, -7, -2), -1);
  EXPECT_EQ(apply(K::Mod, INT64_MIN, -1), 0);
  EXPECT_EQ(apply(K::Div, INT64_MIN + 1, -1), INT64_MAX);
  EXPECT_EQ(apply(K::Min, -3, 5), -3);
  EXPECT_EQ(apply(K::Max, -3, 5), 5);
  for (int64_t a : {-7, -1, 0, 1, 7})
    for (int64_t b : {-3, -1, 1, 3}) EXPECT_EQ(apply(K::Div, a, b) * b + apply(K::Mod, a, b), a) << a << " " << b;
}

TEST(Dim, DivisionByZeroAndOverflowAreTheOneError) {
  using K = Dim::Kind;
  EXPECT_THROW(apply(K::Div, 1, 0), DimError);
  EXPECT_THROW(apply(K::Mod, 1, 0), DimError);
  EXPECT_THROW(apply(K::Add, INT64_MAX, 1), DimError);
  EXPECT_THROW(apply(K::Sub, INT64_MIN, 1), DimError);
  EXPECT_THROW(apply(K::Mul, int64_t{1} << 40, int64_t{1} << 40), DimError);
  EXPECT_THROW(apply(K::Div, INT64_MIN, -1), DimError);
  EXPECT_EQ(fold(K::Div, 1, 0), std::nullopt);
  EXPECT_EQ(fold(K::Add, INT64_MAX, 1), std::nullopt);
  EXPECT_EQ(fold(K::Add, 2, 3), 5);
  // Evaluation is apply() on each node.
  EXPECT_THROW(eval(p("a") / p("b"), {{"a", 1}, {"b", 0}}, 1), DimError);
  EXPECT_THROW(eval(p("a") * Dim::tokens(), {{"a", INT64_MAX}}, 2), DimError);
  EXPECT_THROW(eval(c(1) % c(0), {}, 1), DimError);
}

TEST(Dim, Evaluates) {
  Dim d = parse_dim("(N * n_embd * 4 + 63) / 64 * 64");
  EXPECT_EQ(eval(d, {{"n_embd", 896}}, 1), 3584);
  EXPECT_EQ(eval(d, {{"n_embd", 3}}, 1), 64);
  EXPECT_EQ(eval(d, {}, 1), std::nullopt);  // a param without a value
  EXPECT_EQ(eval(parse_dim("-7 / 2"), {}, 0), -4);
  EXPECT_EQ(eval(parse_dim("-7 % 2"), {}, 0), 1);
  EXPECT_EQ(eval(parse_dim("min(a, N) + max(a, N)"), {{"a", 3}}, 5), 8);
  EXPECT_EQ(eval(align_up(p("x"), 64), {{"x", 65}}, 0), 128);
  EXPECT_TRUE(parse_dim("n * N").uses_tokens());
  EXPECT_FALSE(parse_dim("n * 2").uses_tokens());
  std::vector<std::string> params;
  parse_dim("a * (b + N) - a").for_each_param([&](const std::string& n) { params.push_back(n); });
  EXPECT_EQ(params, (std::vector<std::string>{"a", "b", "a"}));
}

TEST(Dim, PrintsMinimalParentheses) {
  Dim a = p("a"), b = p("b"), x = p("c");
  EXPECT_EQ((a + b * x).str(), "a + b * c");
  EXPECT_EQ(((a + b) * x).str(), "(a + b) * c");
  EXPECT_EQ((a - (b - x)).str(), "a - (b - c)");
  EXPECT_EQ((a - b - x).str(), "a - b - c");
  EXPECT_EQ((a / (b * x)).str(), "a / (b * c)");
  EXPECT_EQ((a * c(-3)).str(), "a * (-3)");
  EXPECT_EQ(max(a + b, Dim::tokens()).str(), "max(a + b, N)");
}

TEST(Dim, ParsesWhatItPrints) {
  for (const char* text : {"a + b * c", "(a + b) * c", "a - (b - c)", "max(0, (N * n_embd * 4 + 63) / 64 * 64)",
                           "min(a, b) % 7", "N", "-3", "a * (-3)", "-9223372036854775808", "1 / 0"}) {
    Dim d = parse_dim(text);
    EXPECT_EQ(d.str(), text);
    EXPECT_TRUE(parse_dim(d.str()) == d) << text;
  }
  EXPECT_EQ(parse_dim("a+b*c").str(), "a + b * c");
  EXPECT_EQ(parse_dim(" ( a ) ").str(), "a");
}

TEST(Dim, ParseErrorsNameTheirOffset) {
  auto offset_of = [](const char* text) -> size_t {
    try {
      parse_dim(text);
    } catch (const DimParseError& e) {
      return e.offset;
    }
    ADD_FAILURE() << "accepted: " << text;
    return 0;
  };
  EXPECT_EQ(offset_of("a +"), 3u);
  EXPECT_EQ(offset_of("max(a)"), 5u);
  EXPECT_EQ(offset_of("a b"), 2u);
  EXPECT_EQ(offset_of("3x"), 0u);
  EXPECT_EQ(offset_of("99999999999999999999"), 0u);
  EXPECT_EQ(offset_of("9223372036854775808"), 0u);
  EXPECT_THROW(parse_dim(std::string(300, '(') + "a" + std::string(300, ')')), DimParseError);
}

TEST(Dim, APrefixEndsWhereTheSizeEnds) {
  size_t used = 0;
  EXPECT_EQ(parse_dim_prefix("n_embd + 1, N]", &used).str(), "n_embd + 1");
  EXPECT_EQ(used, 10u);
  EXPECT_EQ(parse_dim_prefix("n_layer iter(", &used).str(), "n_layer");
  EXPECT_EQ(used, 7u);
  EXPECT_EQ(parse_dim_prefix("a / b // a comment", &used).str(), "a / b");
  EXPECT_EQ(used, 5u);
}

// --------------------------------------------------- the canonical form

SymDim sp(const char* name) { return SymDim::param(name); }
SymDim sc(int64_t v) { return SymDim::constant(v); }

TEST(SymDim, IsComputedFromTheDimWithLetsSubstituted) {
  DimFacts none;
  std::map<std::string, SymDim> lets = {{"head_dim", sp("n_embd") / sp("n_head")}};
  EXPECT_TRUE(none.equal(SymDim::of(parse_dim("head_dim"), lets), sp("n_embd") / sp("n_head")));
  EXPECT_TRUE(none.equal(SymDim::of(parse_dim("(a + b) * 2 - min(a, b)")),
                         sp("b") * sc(2) + sc(2) * sp("a") - SymDim::min(sp("b"), sp("a"))));
  EXPECT_TRUE(none.equal(SymDim::of(parse_dim("N * 3")), SymDim::tokens() * sc(3)));
  // Constants fold as evaluation computes them.
  EXPECT_EQ(SymDim::of(parse_dim("-7 / 2")).as_constant(), apply(Dim::Kind::Div, -7, 2));
  EXPECT_EQ(SymDim::of(parse_dim("7 % -2")).as_constant(), apply(Dim::Kind::Mod, 7, -2));
}

TEST(SymDim, ArithmeticIsCanonical) {
  DimFacts none;
  EXPECT_TRUE(none.equal(sp("a") * sp("b"), sp("b") * sp("a")));
  EXPECT_TRUE(none.equal(sp("a") + sp("b"), sp("b") + sp("a")));
  EXPECT_TRUE(none.equal(sp("a") * (sp("b") + sp("c")), sp("a") * sp("b") + sp("c") * sp("a")));
  EXPECT_TRUE(none.equal(sp("a") - sp("a") + sc(3), sc(3)));
  EXPECT_TRUE(none.equal(sc(6) * sc(7), sc(42)));
  EXPECT_FALSE(none.equal(sp("a"), sp("b")));
  EXPECT_FALSE(none.equal(sp("a") * sc(2), sp("a") + sc(2)));
}

TEST(SymDim, ConstantDivisionFloorsLikeEvaluation) {
  EXPECT_EQ((sc(7) / sc(2)).as_constant(), 3);
  EXPECT_EQ((sc(-7) / sc(2)).as_constant(), -4);
  EXPECT_EQ((sc(-7) % sc(2)).as_constant(), 1);
  EXPECT_EQ((sc(1) / sc(0)).as_constant(), std::nullopt);  // an error for evaluation, not a value
}

TEST(SymDim, StructuralMultiplesDivideWithoutFacts) {
  DimFacts none;
  EXPECT_TRUE(none.equal((sc(2) * sp("a")) / sc(2), sp("a")));
  EXPECT_TRUE(none.equal((sp("a") * sp("b")) / sp("b"), sp("a")));
  EXPECT_EQ(((sp("a") * sp("b")) % sp("b")).as_constant(), 0);
}

TEST(SymDim, ADivisibilityCheckMakesTheQuotientExact) {
  SymDim head_dim = sp("n_embd") / sp("n_head");
  DimFacts none;
  EXPECT_FALSE(none.equal(head_dim * sp("n_head"), sp("n_embd")));
  EXPECT_EQ(none.missing_facts(head_dim * sp("n_head"), sp("n_embd")),
            std::vector<std::string>{"n_embd % n_head == 0"});
  DimFacts facts;
  facts.assume_divides(sp("n_head"), sp("n_embd"));
  EXPECT_TRUE(facts.equal(head_dim * sp("n_head"), sp("n_embd")));
  EXPECT_TRUE(facts.equal(sp("n_head_kv") * head_dim, head_dim * sp("n_head_kv")));
  EXPECT_TRUE(facts.missing_facts(head_dim * sp("n_head"), sp("n_embd")).empty());
  // Unrelated sizes stay unequal with or without facts.
  EXPECT_FALSE(facts.equal(head_dim * sp("n_head_kv"), sp("n_embd")));
  EXPECT_TRUE(facts.missing_facts(head_dim * sp("n_head_kv"), sp("n_embd")).empty());
}

TEST(SymDim, DividesUsesFactsAndStructure) {
  SymDim head_dim = sp("n_embd") / sp("n_head");
  DimFacts facts;
  EXPECT_FALSE(facts.divides(sc(2), head_dim));
  EXPECT_TRUE(facts.divides(sc(2), sc(2) * head_dim));
  EXPECT_TRUE(facts.divides(sc(1), sp("x")));
  facts.assume_divides(sp("n_head"), sp("n_embd"));
  facts.assume_divides(sc(2), head_dim);
  facts.assume_divides(sp("n_head_kv"), sp("n_head"));
  EXPECT_TRUE(facts.divides(sc(2), head_dim));
  EXPECT_TRUE(facts.divides(sp("n_head_kv"), sp("n_head")));
  EXPECT_FALSE(facts.divides(sp("n_head"), sp("n_head_kv")));
  EXPECT_FALSE(facts.divides(sc(4), head_dim));
}

TEST(SymDim, AnEqualityCheckIsAFact) {
  DimFacts facts;
  EXPECT_FALSE(facts.equal(sp("n_embd"), sp("n_head") * sp("head_dim")));
  facts.assume_equal(sp("n_embd"), sp("n_head") * sp("head_dim"));
  EXPECT_TRUE(facts.equal(sp("n_embd"), sp("head_dim") * sp("n_head")));
  EXPECT_TRUE(facts.equal(sc(2) * sp("n_embd"), sc(2) * sp("n_head") * sp("head_dim")));
}

TEST(SymDim, MinMaxAndModAreOpaqueButCommute) {
  DimFacts none;
  EXPECT_TRUE(none.equal(SymDim::max(sp("a"), sp("b")), SymDim::max(sp("b"), sp("a"))));
  EXPECT_FALSE(none.equal(SymDim::max(sp("a"), sp("b")), SymDim::min(sp("a"), sp("b"))));
  EXPECT_TRUE(none.equal(SymDim::max(sp("a"), sp("a")), sp("a")));
  EXPECT_EQ(SymDim::min(sc(3), sc(5)).as_constant(), 3);
  EXPECT_FALSE(none.equal(sp("a") % sp("b"), sp("b") % sp("a")));
}

TEST(SymDim, OverflowNeverEqualsAnything) {
  SymDim big = sc(INT64_MAX / 2) * sc(3) * sp("x") * sc(INT64_MAX / 3);
  DimFacts none;
  EXPECT_FALSE(none.equal(big * sc(5), big * sc(7)));
  EXPECT_FALSE(none.equal(sc(INT64_MAX) * sp("x") * sc(4), sc(INT64_MAX) * sp("x") * sc(8)));
}

}  // namespace
}  // namespace lumen::ops
