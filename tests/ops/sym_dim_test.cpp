// Canonical symbolic dims and the facts of checks (ops/sym_dim.h).
#include "lumen/ops/sym_dim.h"

#include <gtest/gtest.h>

namespace {

using lumen::ops::DimFacts;
using lumen::ops::SymDim;

SymDim p(const char* name) { return SymDim::param(name); }
SymDim c(int64_t v) { return SymDim::constant(v); }

TEST(SymDim, ArithmeticIsCanonical) {
  DimFacts none;
  EXPECT_TRUE(none.equal(p("a") * p("b"), p("b") * p("a")));
  EXPECT_TRUE(none.equal(p("a") + p("b"), p("b") + p("a")));
  EXPECT_TRUE(none.equal(p("a") * (p("b") + p("c")), p("a") * p("b") + p("c") * p("a")));
  EXPECT_TRUE(none.equal(p("a") - p("a") + c(3), c(3)));
  EXPECT_TRUE(none.equal(c(6) * c(7), c(42)));
  EXPECT_FALSE(none.equal(p("a"), p("b")));
  EXPECT_FALSE(none.equal(p("a") * c(2), p("a") + c(2)));
}

TEST(SymDim, ConstantDivisionFloorsLikeTheRuntime) {
  EXPECT_EQ((c(7) / c(2)).as_constant(), 3);
  EXPECT_EQ((c(-7) / c(2)).as_constant(), -4);
  EXPECT_EQ((c(-7) % c(2)).as_constant(), 1);
}

TEST(SymDim, StructuralMultiplesDivideWithoutFacts) {
  DimFacts none;
  EXPECT_TRUE(none.equal((c(2) * p("a")) / c(2), p("a")));
  EXPECT_TRUE(none.equal((p("a") * p("b")) / p("b"), p("a")));
  EXPECT_EQ(((p("a") * p("b")) % p("b")).as_constant(), 0);
}

TEST(SymDim, ADivisibilityCheckMakesTheQuotientExact) {
  SymDim head_dim = p("n_embd") / p("n_head");
  DimFacts none;
  EXPECT_FALSE(none.equal(head_dim * p("n_head"), p("n_embd")));
  EXPECT_EQ(none.missing_facts(head_dim * p("n_head"), p("n_embd")),
            std::vector<std::string>{"n_embd % n_head == 0"});
  DimFacts facts;
  facts.assume_divides(p("n_head"), p("n_embd"));
  EXPECT_TRUE(facts.equal(head_dim * p("n_head"), p("n_embd")));
  EXPECT_TRUE(facts.equal(p("n_head_kv") * head_dim, head_dim * p("n_head_kv")));
  EXPECT_TRUE(facts.missing_facts(head_dim * p("n_head"), p("n_embd")).empty());
  // Unrelated sizes stay unequal with or without facts.
  EXPECT_FALSE(facts.equal(head_dim * p("n_head_kv"), p("n_embd")));
  EXPECT_TRUE(facts.missing_facts(head_dim * p("n_head_kv"), p("n_embd")).empty());
}

TEST(SymDim, DividesUsesFactsAndStructure) {
  SymDim head_dim = p("n_embd") / p("n_head");
  DimFacts facts;
  EXPECT_FALSE(facts.divides(c(2), head_dim));
  EXPECT_TRUE(facts.divides(c(2), c(2) * head_dim));
  EXPECT_TRUE(facts.divides(c(1), p("x")));
  facts.assume_divides(p("n_head"), p("n_embd"));
  facts.assume_divides(c(2), head_dim);
  facts.assume_divides(p("n_head_kv"), p("n_head"));
  EXPECT_TRUE(facts.divides(c(2), head_dim));
  EXPECT_TRUE(facts.divides(p("n_head_kv"), p("n_head")));
  EXPECT_FALSE(facts.divides(p("n_head"), p("n_head_kv")));
  EXPECT_FALSE(facts.divides(c(4), head_dim));
}

TEST(SymDim, AnEqualityCheckIsAFact) {
  DimFacts facts;
  EXPECT_FALSE(facts.equal(p("n_embd"), p("n_head") * p("head_dim")));
  facts.assume_equal(p("n_embd"), p("n_head") * p("head_dim"));
  EXPECT_TRUE(facts.equal(p("n_embd"), p("head_dim") * p("n_head")));
  EXPECT_TRUE(facts.equal(c(2) * p("n_embd"), c(2) * p("n_head") * p("head_dim")));
}

TEST(SymDim, MinMaxAndModAreOpaqueButCommute) {
  DimFacts none;
  EXPECT_TRUE(none.equal(SymDim::max(p("a"), p("b")), SymDim::max(p("b"), p("a"))));
  EXPECT_FALSE(none.equal(SymDim::max(p("a"), p("b")), SymDim::min(p("a"), p("b"))));
  EXPECT_TRUE(none.equal(SymDim::max(p("a"), p("a")), p("a")));
  EXPECT_EQ(SymDim::min(c(3), c(5)).as_constant(), 3);
  EXPECT_FALSE(none.equal(p("a") % p("b"), p("b") % p("a")));
}

TEST(SymDim, OverflowNeverEqualsAnything) {
  SymDim big = c(INT64_MAX / 2) * c(3) * p("x") * c(INT64_MAX / 3);
  DimFacts none;
  EXPECT_FALSE(none.equal(big * c(5), big * c(7)));
  EXPECT_FALSE(none.equal(c(INT64_MAX) * p("x") * c(4), c(INT64_MAX) * p("x") * c(8)));
}

}  // namespace
