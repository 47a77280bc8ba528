// Symbolic dimensions: construction with simplification, printing, evaluation.
#include "lumen/ir/dim.h"

#include <stdexcept>

namespace lumen::ir {

Dim Dim::constant(int64_t value) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::Const;
  node->value = value;
  return Dim(std::move(node));
}

Dim Dim::param(std::string name) {
  auto node = std::make_shared<Node>();
  node->kind = Kind::Param;
  node->name = std::move(name);
  return Dim(std::move(node));
}

Dim Dim::tokens() {
  auto node = std::make_shared<Node>();
  node->kind = Kind::Tokens;
  return Dim(std::move(node));
}

namespace {

bool checked(Dim::Kind kind, int64_t a, int64_t b, int64_t* out) {
  switch (kind) {
    case Dim::Kind::Add: return !__builtin_add_overflow(a, b, out);
    case Dim::Kind::Sub: return !__builtin_sub_overflow(a, b, out);
    case Dim::Kind::Mul: return !__builtin_mul_overflow(a, b, out);
    case Dim::Kind::Div:
    case Dim::Kind::Mod: {
      if (b == 0 || (a == INT64_MIN && b == -1)) return false;
      // Floor division and modulo, like program::Expr.
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) { q -= 1; r += b; }
      *out = kind == Dim::Kind::Div ? q : r;
      return true;
    }
    case Dim::Kind::Min: *out = a < b ? a : b; return true;
    case Dim::Kind::Max: *out = a > b ? a : b; return true;
    default: return false;
  }
}

}  // namespace

Dim Dim::binary(Kind kind, Dim lhs, Dim rhs) {
  // Constant folding (left alone when it would divide by zero or overflow,
  // so that evaluation reports the error).
  int64_t folded = 0;
  if (lhs.is_constant() && rhs.is_constant() && checked(kind, lhs.value(), rhs.value(), &folded))
    return constant(folded);
  auto is = [](const Dim& d, int64_t v) { return d.is_constant() && d.value() == v; };
  switch (kind) {
    case Kind::Add:
      if (is(lhs, 0)) return rhs;
      if (is(rhs, 0)) return lhs;
      break;
    case Kind::Sub:
      if (is(rhs, 0)) return lhs;
      break;
    case Kind::Mul:
      if (is(lhs, 1)) return rhs;
      if (is(rhs, 1)) return lhs;
      break;
    case Kind::Div:
      if (is(rhs, 1)) return lhs;
      break;
    case Kind::Min:
    case Kind::Max:
      if (lhs == rhs) return lhs;
      break;
    default:
      break;
  }
  auto node = std::make_shared<Node>();
  node->kind = kind;
  node->lhs = std::make_shared<const Dim>(std::move(lhs));
  node->rhs = std::make_shared<const Dim>(std::move(rhs));
  return Dim(std::move(node));
}

bool Dim::operator==(const Dim& other) const {
  if (node_ == other.node_) return true;
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::Const: return value() == other.value();
    case Kind::Param: return name() == other.name();
    case Kind::Tokens: return true;
    default: return lhs() == other.lhs() && rhs() == other.rhs();
  }
}

namespace {

int precedence(Dim::Kind kind) {
  switch (kind) {
    case Dim::Kind::Add:
    case Dim::Kind::Sub: return 1;
    case Dim::Kind::Mul:
    case Dim::Kind::Div:
    case Dim::Kind::Mod: return 2;
    default: return 3;  // atoms and function calls
  }
}

const char* infix_symbol(Dim::Kind kind) {
  switch (kind) {
    case Dim::Kind::Add: return " + ";
    case Dim::Kind::Sub: return " - ";
    case Dim::Kind::Mul: return " * ";
    case Dim::Kind::Div: return " / ";
    case Dim::Kind::Mod: return " % ";
    default: return nullptr;
  }
}

}  // namespace

std::string Dim::str() const {
  switch (kind()) {
    case Kind::Const: return std::to_string(value());
    case Kind::Param: return name();
    case Kind::Tokens: return "N";
    case Kind::Min: return "min(" + lhs().str() + ", " + rhs().str() + ")";
    case Kind::Max: return "max(" + lhs().str() + ", " + rhs().str() + ")";
    default: break;
  }
  // Left-associative: the right operand needs parentheses at equal precedence.
  int prec = precedence(kind());
  std::string left = lhs().str(), right = rhs().str();
  if (precedence(lhs().kind()) < prec || (lhs().is_constant() && lhs().value() < 0))
    left = "(" + left + ")";
  if (precedence(rhs().kind()) <= prec || (rhs().is_constant() && rhs().value() < 0))
    right = "(" + right + ")";
  return left + infix_symbol(kind()) + right;
}

std::optional<int64_t> Dim::eval(
    const std::function<std::optional<int64_t>(const std::string&)>& param_value,
    int64_t n_tokens) const {
  switch (kind()) {
    case Kind::Const: return value();
    case Kind::Param: return param_value(name());
    case Kind::Tokens: return n_tokens;
    default: break;
  }
  auto a = lhs().eval(param_value, n_tokens);
  auto b = rhs().eval(param_value, n_tokens);
  if (!a || !b) return std::nullopt;
  int64_t out = 0;
  if (!checked(kind(), *a, *b, &out))
    throw std::domain_error("division by zero or overflow evaluating `" + str() + "`");
  return out;
}

bool Dim::uses_tokens() const {
  if (kind() == Kind::Tokens) return true;
  return is_binary() && (lhs().uses_tokens() || rhs().uses_tokens());
}

void Dim::for_each_param(const std::function<void(const std::string&)>& fn) const {
  if (kind() == Kind::Param) fn(name());
  if (is_binary()) {
    lhs().for_each_param(fn);
    rhs().for_each_param(fn);
  }
}

Dim operator+(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Add, a, b); }
Dim operator-(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Sub, a, b); }
Dim operator*(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Mul, a, b); }
Dim operator/(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Div, a, b); }
Dim operator%(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Mod, a, b); }
Dim max(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Max, a, b); }
Dim min(const Dim& a, const Dim& b) { return Dim::binary(Dim::Kind::Min, a, b); }

Dim align_up(const Dim& x, int64_t align) {
  Dim a = Dim::constant(align);
  return (x + Dim::constant(align - 1)) / a * a;
}

}  // namespace lumen::ir
