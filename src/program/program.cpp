// The scheduled program's behaviour-free helpers: symbolic size expressions
// (construction, checked evaluation, infix printing), section names and
// kernel names. The infix form (fully parenthesized) is also what serialize() writes,
// so printing and parsing round-trip.
#include <cmath>
#include <string>
#include <vector>

#include "lumen/program/program.h"

namespace lumen::program {

Expr Expr::constant(int64_t v) { return Expr{{ExprTerm{ExprOp::Const, v}}}; }
Expr Expr::hparam(int index) { return Expr{{ExprTerm{ExprOp::HParam, index}}}; }
Expr Expr::tokens() { return Expr{{ExprTerm{ExprOp::Tokens, 0}}}; }

namespace {

Expr binary(Expr a, const Expr& b, ExprOp op) {
  a.terms.insert(a.terms.end(), b.terms.begin(), b.terms.end());
  a.terms.push_back(ExprTerm{op, 0});
  return a;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw EvalError("division by zero");
  if (a == INT64_MIN && b == -1) throw EvalError("overflow in division");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw EvalError("modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

bool is_binary(ExprOp op) { return op >= ExprOp::Add; }

const char* infix_symbol(ExprOp op) {
  switch (op) {
    case ExprOp::Add: return "+";
    case ExprOp::Sub: return "-";
    case ExprOp::Mul: return "*";
    case ExprOp::Div: return "/";
    case ExprOp::Mod: return "%";
    case ExprOp::Min: return "min";
    case ExprOp::Max: return "max";
    default: return "?";
  }
}

}  // namespace

Expr operator+(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Add); }
Expr operator-(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Sub); }
Expr operator*(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Mul); }
Expr operator/(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Div); }
Expr operator%(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Mod); }
Expr max(Expr a, const Expr& b) { return binary(std::move(a), b, ExprOp::Max); }

int64_t Expr::eval(std::span<const double> hparams, int64_t n_tokens) const {
  std::vector<int64_t> stack;
  stack.reserve(terms.size());
  for (const ExprTerm& t : terms) {
    switch (t.op) {
      case ExprOp::Const: stack.push_back(t.value); continue;
      case ExprOp::Tokens: stack.push_back(n_tokens); continue;
      case ExprOp::HParam: {
        if (t.value < 0 || t.value >= static_cast<int64_t>(hparams.size()))
          throw EvalError("hparam index " + std::to_string(t.value) + " out of range");
        double v = hparams[static_cast<size_t>(t.value)];
        // 9.2e18 is below INT64_MAX as a double, so the cast below is defined.
        if (!std::isfinite(v) || std::fabs(v) >= 9.2e18)
          throw EvalError("hparam value not representable as an integer");
        stack.push_back(static_cast<int64_t>(v));
        continue;
      }
      default: break;
    }
    if (!is_binary(t.op)) throw EvalError("unknown expression operator");
    if (stack.size() < 2) throw EvalError("malformed expression (operand missing)");
    int64_t b = stack.back();
    stack.pop_back();
    int64_t a = stack.back();
    int64_t r = 0;
    switch (t.op) {
      case ExprOp::Add:
        if (__builtin_add_overflow(a, b, &r)) throw EvalError("overflow in addition");
        break;
      case ExprOp::Sub:
        if (__builtin_sub_overflow(a, b, &r)) throw EvalError("overflow in subtraction");
        break;
      case ExprOp::Mul:
        if (__builtin_mul_overflow(a, b, &r)) throw EvalError("overflow in multiplication");
        break;
      case ExprOp::Div: r = floor_div(a, b); break;
      case ExprOp::Mod: r = floor_mod(a, b); break;
      case ExprOp::Min: r = a < b ? a : b; break;
      case ExprOp::Max: r = a > b ? a : b; break;
      default: break;
    }
    stack.back() = r;
  }
  if (stack.size() != 1) throw EvalError(terms.empty() ? "empty expression" : "malformed expression");
  return stack.back();
}

std::string Expr::str(std::span<const std::string> hparam_names) const {
  std::vector<std::string> stack;
  for (const ExprTerm& t : terms) {
    switch (t.op) {
      case ExprOp::Const: stack.push_back(std::to_string(t.value)); continue;
      case ExprOp::Tokens: stack.push_back("N"); continue;
      case ExprOp::HParam:
        if (t.value >= 0 && t.value < static_cast<int64_t>(hparam_names.size()))
          stack.push_back(hparam_names[static_cast<size_t>(t.value)]);
        else
          stack.push_back(std::string(1, '#').append(std::to_string(t.value)));
        continue;
      default: break;
    }
    if (!is_binary(t.op) || stack.size() < 2) return "<malformed>";
    std::string b = std::move(stack.back());
    stack.pop_back();
    std::string& a = stack.back();
    if (t.op == ExprOp::Min || t.op == ExprOp::Max)
      a = std::string(infix_symbol(t.op)) + "(" + a + "," + b + ")";
    else
      a = "(" + a + infix_symbol(t.op) + b + ")";
  }
  if (stack.size() != 1) return terms.empty() ? "_" : "<malformed>";
  return stack.back();
}

const char* to_string(Section s) {
  switch (s) {
    case Section::Pre: return "pre";
    case Section::Layer: return "layer";
    case Section::Post: return "post";
  }
  return "?";
}

}  // namespace lumen::program
