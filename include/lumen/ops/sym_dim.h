// The one definition of dimension equality, shared by sema, the IR verifier,
// shape inference and the runtime's binding check: an analysis of the one
// language of sizes (ops/dim.h), not a language of its own.
//
// A SymDim is the canonical form of a Dim (SymDim::of): a Laurent polynomial with rational coefficients over atoms (a param name, N,
// or an opaque term such as min(a, b) or a non-monomial division). Two forms
// are kept:
//   exact - `a / b` by a single term b is a * b^-1, valid when b divides a;
//   floor - every division is an opaque atom (true for any values).
// `a / b` records the obligation "b divides a" unless it holds structurally.
// Two dims are equal when their floor forms agree, or when their exact forms
// agree and every obligation is established by the program's checks
// (DimFacts). Lets are substituted by their definitions by the callers, so
// `head_dim * n_head` equals `n_embd` under `check n_embd % n_head == 0`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lumen/ops/dim.h"

namespace lumen::ops {

// A Laurent polynomial with rational coefficients over named atoms.
class Poly {
 public:
  using Monomial = std::vector<std::pair<std::string, int>>;  // sorted atoms, nonzero exponents
  struct Rational {
    int64_t num = 0, den = 1;  // den > 0, gcd 1
    bool operator==(const Rational&) const = default;
  };

  static Poly constant(int64_t value);
  static Poly atom(std::string name);

  bool operator==(const Poly& other) const { return !overflow_ && !other.overflow_ && terms_ == other.terms_; }
  Poly operator+(const Poly& other) const;
  Poly operator-(const Poly& other) const;
  Poly operator*(const Poly& other) const;
  Poly scaled(Rational factor) const;

  bool is_zero() const { return !overflow_ && terms_.empty(); }
  std::optional<int64_t> as_constant() const;  // an integer constant
  // The reciprocal of a single nonzero term (c * x^e -> 1/c * x^-e).
  std::optional<Poly> reciprocal() const;
  // Whether `*this / divisor` is a polynomial with integer coefficients and
  // no negative exponents when *this has none (divisor: a single term).
  bool divisible_by_term(const Poly& divisor) const;
  // Rational r with *this == r * other (both nonzero), if any.
  std::optional<Rational> ratio_to(const Poly& other) const;
  bool overflowed() const { return overflow_; }
  // Canonical text, also the key of opaque atoms: "2*n_embd*n_head^-1 + 1".
  std::string str() const;

 private:
  std::map<Monomial, Rational> terms_;
  bool overflow_ = false;
};

class SymDim {
 public:
  SymDim() = default;  // the constant 0
  // The canonical form of `d`, a param that is a let (a key of `lets`)
  // replaced by its definition's canonical form.
  static SymDim of(const Dim& d, const std::map<std::string, SymDim>& lets = {});
  static SymDim constant(int64_t value);
  static SymDim param(const std::string& name);
  static SymDim tokens();  // N

  SymDim operator+(const SymDim& other) const;
  SymDim operator-(const SymDim& other) const;
  SymDim operator*(const SymDim& other) const;
  SymDim operator/(const SymDim& other) const;  // floor division
  SymDim operator%(const SymDim& other) const;
  static SymDim min(const SymDim& a, const SymDim& b);
  static SymDim max(const SymDim& a, const SymDim& b);

  const Poly& exact() const { return exact_; }
  const Poly& floor() const { return floor_; }
  // (divisor, dividend) pairs the exact form relies on.
  const std::vector<std::pair<Poly, Poly>>& obligations() const { return obligations_; }
  std::optional<int64_t> as_constant() const { return floor_.as_constant(); }
  std::string str() const { return floor_.str(); }

 private:
  static SymDim opaque(const std::string& fn, const SymDim& a, const SymDim& b, bool commutative);
  Poly exact_, floor_;
  std::vector<std::pair<Poly, Poly>> obligations_;
};

// The relations a program's checks establish: `check a % b == 0` (b divides
// a) and `check a == b`.
class DimFacts {
 public:
  void assume_divides(const SymDim& divisor, const SymDim& value);
  void assume_equal(const SymDim& a, const SymDim& b);

  bool equal(const SymDim& a, const SymDim& b) const;
  bool divides(const SymDim& divisor, const SymDim& value) const;
  // The divisibility facts `a` and `b` would need to compare equal (exact
  // forms agree, obligations unproven), as "a % b == 0" texts; empty when
  // they are equal or differ outright. For diagnostics.
  std::vector<std::string> missing_facts(const SymDim& a, const SymDim& b) const;

 private:
  bool divides(const Poly& divisor, const Poly& value) const;
  bool obligations_hold(const SymDim& d) const;
  std::vector<std::pair<Poly, Poly>> divides_;  // (divisor, value)
  std::vector<Poly> zero_;                      // a - b of `check a == b`
};

}  // namespace lumen::ops
