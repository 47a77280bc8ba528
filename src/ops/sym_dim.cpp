// Canonical symbolic dimensions and the facts that decide their equality.
#include "lumen/ops/sym_dim.h"

#include <algorithm>
#include <numeric>

namespace lumen::ops {

namespace {

using Rational = Poly::Rational;

// Normalises num/den into a Rational; false when a value does not fit.
bool make_rational(__int128 num, __int128 den, Rational* out) {
  if (den == 0) return false;
  if (den < 0) {
    num = -num;
    den = -den;
  }
  __int128 a = num < 0 ? -num : num, b = den;
  while (b != 0) {
    __int128 t = a % b;
    a = b;
    b = t;
  }
  if (a > 1) {
    num /= a;
    den /= a;
  }
  if (num > INT64_MAX || num < INT64_MIN || den > INT64_MAX) return false;
  *out = {static_cast<int64_t>(num), static_cast<int64_t>(den)};
  return true;
}

bool add(Rational a, Rational b, Rational* out) {
  return make_rational(static_cast<__int128>(a.num) * b.den + static_cast<__int128>(b.num) * a.den,
                       static_cast<__int128>(a.den) * b.den, out);
}
bool mul(Rational a, Rational b, Rational* out) {
  return make_rational(static_cast<__int128>(a.num) * b.num, static_cast<__int128>(a.den) * b.den, out);
}

Poly::Monomial multiply(const Poly::Monomial& a, const Poly::Monomial& b) {
  std::map<std::string, int> exps;
  for (const auto& [atom, e] : a) exps[atom] += e;
  for (const auto& [atom, e] : b) exps[atom] += e;
  Poly::Monomial out;
  for (const auto& [atom, e] : exps)
    if (e != 0) out.emplace_back(atom, e);
  return out;
}

}  // namespace

Poly Poly::constant(int64_t value) {
  Poly p;
  if (value != 0) p.terms_[{}] = {value, 1};
  return p;
}

Poly Poly::atom(std::string name) {
  Poly p;
  p.terms_[{{std::move(name), 1}}] = {1, 1};
  return p;
}

Poly Poly::operator+(const Poly& other) const {
  Poly out = *this;
  out.overflow_ = overflow_ || other.overflow_;
  for (const auto& [m, c] : other.terms_) {
    auto it = out.terms_.find(m);
    if (it == out.terms_.end()) {
      out.terms_.emplace(m, c);
      continue;
    }
    if (!add(it->second, c, &it->second)) out.overflow_ = true;
    if (it->second.num == 0) out.terms_.erase(it);
  }
  return out;
}

Poly Poly::operator-(const Poly& other) const { return *this + other.scaled({-1, 1}); }

Poly Poly::operator*(const Poly& other) const {
  Poly out;
  out.overflow_ = overflow_ || other.overflow_;
  for (const auto& [ma, ca] : terms_) {
    for (const auto& [mb, cb] : other.terms_) {
      Rational c;
      if (!mul(ca, cb, &c)) {
        out.overflow_ = true;
        continue;
      }
      Poly term;
      term.terms_[multiply(ma, mb)] = c;
      out = out + term;
    }
  }
  return out;
}

Poly Poly::scaled(Rational factor) const {
  Poly out;
  out.overflow_ = overflow_;
  if (factor.num == 0) return out;
  for (const auto& [m, c] : terms_) {
    Rational r;
    if (!mul(c, factor, &r)) out.overflow_ = true;
    else out.terms_[m] = r;
  }
  return out;
}

std::optional<int64_t> Poly::as_constant() const {
  if (overflow_) return std::nullopt;
  if (terms_.empty()) return 0;
  if (terms_.size() != 1 || !terms_.begin()->first.empty() || terms_.begin()->second.den != 1) return std::nullopt;
  return terms_.begin()->second.num;
}

std::optional<Poly> Poly::reciprocal() const {
  if (overflow_ || terms_.size() != 1) return std::nullopt;
  const auto& [m, c] = *terms_.begin();
  Rational r;
  if (!make_rational(c.den, c.num, &r)) return std::nullopt;
  Poly out;
  Monomial inv;
  for (const auto& [atom, e] : m) inv.emplace_back(atom, -e);
  out.terms_[inv] = r;
  return out;
}

bool Poly::divisible_by_term(const Poly& divisor) const {
  if (overflow_ || divisor.overflow_ || divisor.terms_.size() != 1) return false;
  const auto& [dm, dc] = *divisor.terms_.begin();
  if (dc.den != 1 || dc.num == 0) return false;
  for (const auto& [m, c] : terms_) {
    if (c.den != 1 || c.num % dc.num != 0) return false;
    for (const auto& [atom, e] : m)
      if (e < 0) return false;
    for (const auto& factor : dm) {  // (not a structured binding: clang 14 cannot capture one)
      auto it = std::find_if(m.begin(), m.end(), [&](const auto& p) { return p.first == factor.first; });
      if (factor.second < 0 || it == m.end() || it->second < factor.second) return false;
    }
  }
  return true;
}

std::optional<Rational> Poly::ratio_to(const Poly& other) const {
  if (overflow_ || other.overflow_ || terms_.empty() || terms_.size() != other.terms_.size()) return std::nullopt;
  const auto& [m0, c0] = *terms_.begin();
  auto it = other.terms_.find(m0);
  if (it == other.terms_.end()) return std::nullopt;
  Rational r;
  if (!make_rational(static_cast<__int128>(c0.num) * it->second.den, static_cast<__int128>(c0.den) * it->second.num,
                     &r))
    return std::nullopt;
  if (!(other.scaled(r) == *this)) return std::nullopt;
  return r;
}

std::string Poly::str() const {
  if (overflow_) return "<overflow>";
  if (terms_.empty()) return "0";
  std::string out;
  for (const auto& [m, c] : terms_) {
    std::string coef = std::to_string(c.num < 0 ? -c.num : c.num);
    if (c.den != 1) {
      coef += '/';
      coef += std::to_string(c.den);
    }
    std::string term;
    bool unit = c.num == 1 || c.num == -1;
    if (m.empty() || !unit || c.den != 1) term = coef;
    for (const auto& [atom, e] : m) {
      if (!term.empty()) term += "*";
      term += atom;
      if (e != 1) {
        term += '^';
        term += std::to_string(e);
      }
    }
    if (!out.empty()) out += c.num < 0 ? " - " : " + ";
    else if (c.num < 0) out += '-';
    out += term;
  }
  return out;
}

// ------------------------------------------------------------------ SymDim

SymDim SymDim::constant(int64_t value) {
  SymDim d;
  d.exact_ = d.floor_ = Poly::constant(value);
  return d;
}

SymDim SymDim::param(const std::string& name) {
  SymDim d;
  d.exact_ = d.floor_ = Poly::atom(name);
  return d;
}

SymDim SymDim::tokens() { return param("N"); }

SymDim SymDim::of(const Dim& d, const std::map<std::string, SymDim>& lets) {
  using K = Dim::Kind;
  switch (d.kind()) {
    case K::Const: return constant(d.value());
    case K::Tokens: return tokens();
    case K::Param: {
      auto it = lets.find(d.name());
      return it != lets.end() ? it->second : param(d.name());
    }
    default: break;
  }
  SymDim a = of(d.lhs(), lets), b = of(d.rhs(), lets);
  switch (d.kind()) {
    case K::Add: return a + b;
    case K::Sub: return a - b;
    case K::Mul: return a * b;
    case K::Div: return a / b;
    case K::Mod: return a % b;
    case K::Min: return min(a, b);
    default: return max(a, b);
  }
}

namespace {
void merge(std::vector<std::pair<Poly, Poly>>& into, const std::vector<std::pair<Poly, Poly>>& from) {
  for (const auto& o : from)
    if (std::find(into.begin(), into.end(), o) == into.end()) into.push_back(o);
}
}  // namespace

SymDim SymDim::operator+(const SymDim& other) const {
  SymDim d;
  d.exact_ = exact_ + other.exact_;
  d.floor_ = floor_ + other.floor_;
  d.obligations_ = obligations_;
  merge(d.obligations_, other.obligations_);
  return d;
}

SymDim SymDim::operator-(const SymDim& other) const {
  SymDim d;
  d.exact_ = exact_ - other.exact_;
  d.floor_ = floor_ - other.floor_;
  d.obligations_ = obligations_;
  merge(d.obligations_, other.obligations_);
  return d;
}

SymDim SymDim::operator*(const SymDim& other) const {
  SymDim d;
  d.exact_ = exact_ * other.exact_;
  d.floor_ = floor_ * other.floor_;
  d.obligations_ = obligations_;
  merge(d.obligations_, other.obligations_);
  return d;
}

SymDim SymDim::opaque(const std::string& fn, const SymDim& a, const SymDim& b, bool commutative) {
  auto text = [&](const Poly& x, const Poly& y) {
    std::string sx = x.str(), sy = y.str();
    if (commutative && sy < sx) std::swap(sx, sy);
    return fn + "(" + sx + ", " + sy + ")";
  };
  SymDim d;
  d.exact_ = Poly::atom(text(a.exact_, b.exact_));
  d.floor_ = Poly::atom(text(a.floor_, b.floor_));
  d.obligations_ = a.obligations_;
  merge(d.obligations_, b.obligations_);
  return d;
}

SymDim SymDim::operator/(const SymDim& other) const {
  auto a = floor_.as_constant(), b = other.floor_.as_constant();
  if (a && b)  // the value, as evaluation computes it (unless that is an error)
    if (auto q = fold(Dim::Kind::Div, *a, *b)) return constant(*q);
  if (b == 1) return *this;
  SymDim d = opaque("div", *this, other, false);
  if (floor_.divisible_by_term(other.floor_) && obligations_.empty() && other.obligations_.empty()) {
    // A structural multiple (2*x / 2, a*b / b): exact in both forms.
    auto inv = other.floor_.reciprocal();
    d.exact_ = d.floor_ = floor_ * *inv;
    return d;
  }
  if (auto inv = other.exact_.reciprocal()) {
    d.exact_ = exact_ * *inv;
    d.obligations_.emplace_back(other.exact_, exact_);
  }
  return d;
}

SymDim SymDim::operator%(const SymDim& other) const {
  auto a = floor_.as_constant(), b = other.floor_.as_constant();
  if (a && b)
    if (auto r = fold(Dim::Kind::Mod, *a, *b)) return constant(*r);
  if (floor_.divisible_by_term(other.floor_) && obligations_.empty()) return constant(0);
  return opaque("mod", *this, other, false);
}

SymDim SymDim::min(const SymDim& a, const SymDim& b) {
  auto x = a.as_constant(), y = b.as_constant();
  if (x && y) return constant(apply(Dim::Kind::Min, *x, *y));
  if (a.floor_ == b.floor_) return a;
  return opaque("min", a, b, true);
}

SymDim SymDim::max(const SymDim& a, const SymDim& b) {
  auto x = a.as_constant(), y = b.as_constant();
  if (x && y) return constant(apply(Dim::Kind::Max, *x, *y));
  if (a.floor_ == b.floor_) return a;
  return opaque("max", a, b, true);
}

// ---------------------------------------------------------------- DimFacts

void DimFacts::assume_divides(const SymDim& divisor, const SymDim& value) {
  divides_.emplace_back(divisor.exact(), value.exact());
}

void DimFacts::assume_equal(const SymDim& a, const SymDim& b) {
  Poly diff = a.exact() - b.exact();
  if (!diff.is_zero() && !diff.overflowed()) zero_.push_back(diff);
}

bool DimFacts::divides(const Poly& divisor, const Poly& value) const {
  if (value.is_zero() || divisor.as_constant() == 1 || (divisor == value && !value.is_zero())) return true;
  if (value.divisible_by_term(divisor)) return true;
  for (const auto& [d, v] : divides_) {
    if (!(d == divisor)) continue;
    // value is a whole multiple of a known multiple of the divisor.
    if (auto r = value.ratio_to(v); r && r->den == 1) return true;
  }
  return false;
}

bool DimFacts::obligations_hold(const SymDim& d) const {
  for (const auto& [divisor, value] : d.obligations())
    if (!divides(divisor, value)) return false;
  return true;
}

bool DimFacts::equal(const SymDim& a, const SymDim& b) const {
  if (a.floor() == b.floor()) return true;
  if (!obligations_hold(a) || !obligations_hold(b)) return false;
  Poly diff = a.exact() - b.exact();
  if (diff.is_zero()) return true;
  for (const Poly& z : zero_)
    if (diff.ratio_to(z)) return true;
  return false;
}

bool DimFacts::divides(const SymDim& divisor, const SymDim& value) const {
  if (value.floor().is_zero()) return true;
  if (value.floor().divisible_by_term(divisor.floor())) return true;
  if (!obligations_hold(divisor) || !obligations_hold(value)) return false;
  return divides(divisor.exact(), value.exact());
}

std::vector<std::string> DimFacts::missing_facts(const SymDim& a, const SymDim& b) const {
  std::vector<std::string> out;
  if (equal(a, b) || !((a.exact() - b.exact()).is_zero())) return out;
  for (const SymDim* d : {&a, &b})
    for (const auto& [divisor, value] : d->obligations())
      if (!divides(divisor, value)) {
        std::string text = value.str() + " % " + divisor.str() + " == 0";
        if (std::find(out.begin(), out.end(), text) == out.end()) out.push_back(text);
      }
  return out;
}

}  // namespace lumen::ops
