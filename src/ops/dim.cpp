// The one language of sizes (see ops/dim.h): construction with
// simplification, the operators on values, evaluation, printing, parsing.
#include "lumen/ops/dim.h"

namespace lumen::ops {

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

// ------------------------------------------------------------- operators

std::optional<int64_t> fold(Dim::Kind op, int64_t a, int64_t b) {
  int64_t out = 0;
  switch (op) {
    case Dim::Kind::Add:
      if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Dim::Kind::Sub:
      if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Dim::Kind::Mul:
      if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Dim::Kind::Div:
    case Dim::Kind::Mod: {
      if (b == 0) return std::nullopt;
      if (b == -1) {  // a / -1 overflows only for INT64_MIN; the remainder is 0 (C++'s % would trap)
        if (op == Dim::Kind::Mod) return 0;
        if (a == INT64_MIN) return std::nullopt;
        return -a;
      }
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        q -= 1;
        r += b;
      }
      return op == Dim::Kind::Div ? q : r;
    }
    case Dim::Kind::Min: return a < b ? a : b;
    case Dim::Kind::Max: return a > b ? a : b;
    default: return std::nullopt;
  }
}

namespace {

const char* symbol(Dim::Kind op) {
  switch (op) {
    case Dim::Kind::Add: return "+";
    case Dim::Kind::Sub: return "-";
    case Dim::Kind::Mul: return "*";
    case Dim::Kind::Div: return "/";
    case Dim::Kind::Mod: return "%";
    case Dim::Kind::Min: return "min";
    case Dim::Kind::Max: return "max";
    default: return "?";
  }
}

}  // namespace

int64_t apply(Dim::Kind op, int64_t a, int64_t b) {
  if (auto v = fold(op, a, b)) return *v;
  std::string what = (op == Dim::Kind::Div || op == Dim::Kind::Mod) && b == 0 ? "division by zero" : "int64 overflow";
  throw DimError(what + " in " + std::to_string(a) + " " + symbol(op) + " " + std::to_string(b));
}

Dim Dim::binary(Kind kind, Dim lhs, Dim rhs) {
  // Constants fold, except where apply() throws: evaluation reports that.
  if (lhs.is_constant() && rhs.is_constant())
    if (auto folded = fold(kind, lhs.value(), rhs.value())) return constant(*folded);
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

std::optional<int64_t> Dim::eval(const ParamValue& param_value, int64_t n_tokens) const {
  switch (kind()) {
    case Kind::Const: return value();
    case Kind::Param: return param_value(name());
    case Kind::Tokens: return n_tokens;
    default: break;
  }
  auto a = lhs().eval(param_value, n_tokens);
  auto b = rhs().eval(param_value, n_tokens);
  if (!a || !b) return std::nullopt;
  return apply(kind(), *a, *b);
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

// -------------------------------------------------------------- printing

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

}  // namespace

std::string Dim::str() const {
  switch (kind()) {
    case Kind::Const: return std::to_string(value());
    case Kind::Param: return name();
    case Kind::Tokens: return "N";
    case Kind::Min:
    case Kind::Max: return std::string(symbol(kind())) + "(" + lhs().str() + ", " + rhs().str() + ")";
    default: break;
  }
  // Left-associative: the right operand needs parentheses at equal precedence.
  int prec = precedence(kind());
  std::string left = lhs().str(), right = rhs().str();
  if (precedence(lhs().kind()) < prec || (lhs().is_constant() && lhs().value() < 0)) left = "(" + left + ")";
  if (precedence(rhs().kind()) <= prec || (rhs().is_constant() && rhs().value() < 0)) right = "(" + right + ")";
  return left + " " + symbol(kind()) + " " + right;
}

// --------------------------------------------------------------- parsing

namespace {

constexpr int kMaxDepth = 200;

class DimParser {
 public:
  explicit DimParser(std::string_view text) : text_(text) {}

  Dim sum() {
    Dim d = term();
    while (true) {
      size_t at = skip_blanks();
      if (at >= text_.size() || (text_[at] != '+' && text_[at] != '-')) break;
      pos_ = at + 1;
      Dim rhs = term();
      d = text_[at] == '+' ? d + rhs : d - rhs;
    }
    return d;
  }

  Dim term() {
    Dim d = atom();
    while (true) {
      size_t at = skip_blanks();
      if (at >= text_.size()) break;
      char c = text_[at];
      bool comment = c == '/' && at + 1 < text_.size() && text_[at + 1] == '/';
      if ((c != '*' && c != '/' && c != '%') || comment) break;
      pos_ = at + 1;
      Dim rhs = atom();
      d = c == '*' ? d * rhs : c == '/' ? d / rhs : d % rhs;
    }
    return d;
  }

  size_t end() const { return pos_; }
  size_t skip_blanks() const {
    size_t at = pos_;
    while (at < text_.size() && (text_[at] == ' ' || text_[at] == '\t' || text_[at] == '\n' || text_[at] == '\r'))
      ++at;
    return at;
  }
  [[noreturn]] void fail(const std::string& message, size_t at) const { throw DimParseError(message, at); }

 private:
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  static bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

  Dim atom() {
    if (++depth_ > kMaxDepth) fail("expression nested too deeply", pos_);
    Dim d = atom_inner();
    --depth_;
    return d;
  }

  Dim atom_inner() {
    pos_ = skip_blanks();
    if (pos_ >= text_.size()) fail("expected a dimension, found the end", pos_);
    char c = text_[pos_];
    if (is_digit(c)) return Dim::constant(integer(false));
    if (c == '-') {
      size_t start = pos_++;
      pos_ = skip_blanks();
      if (pos_ >= text_.size() || !is_digit(text_[pos_])) fail("expected a number after '-'", start);
      return Dim::constant(integer(true));
    }
    if (c == '(') {
      ++pos_;
      Dim d = sum();
      expect(')');
      return d;
    }
    if (!is_word(c)) fail(std::string("expected a dimension, found '") + c + "'", pos_);
    size_t start = pos_;
    while (pos_ < text_.size() && is_word(text_[pos_])) ++pos_;
    std::string name(text_.substr(start, pos_ - start));
    if (name == "N") return Dim::tokens();
    if ((name == "min" || name == "max") && skip_blanks() < text_.size() && text_[skip_blanks()] == '(') {
      expect('(');
      Dim a = sum();
      expect(',');
      Dim b = sum();
      expect(')');
      return name == "max" ? max(a, b) : min(a, b);
    }
    return Dim::param(std::move(name));
  }

  int64_t integer(bool negative) {
    size_t start = pos_;
    uint64_t magnitude = 0;
    bool too_big = false;
    while (pos_ < text_.size() && is_digit(text_[pos_])) {
      uint64_t digit = static_cast<uint64_t>(text_[pos_++] - '0');
      if (magnitude > (UINT64_MAX - digit) / 10) too_big = true;
      else magnitude = magnitude * 10 + digit;
    }
    if (pos_ < text_.size() && is_word(text_[pos_])) fail("bad number", start);
    constexpr uint64_t kLimit = uint64_t{1} << 63;
    if (too_big || magnitude > (negative ? kLimit : kLimit - 1)) fail("integer out of range", start);
    if (!negative) return static_cast<int64_t>(magnitude);
    return magnitude == kLimit ? INT64_MIN : -static_cast<int64_t>(magnitude);
  }

  void expect(char c) {
    pos_ = skip_blanks();
    if (pos_ >= text_.size() || text_[pos_] != c) fail(std::string("expected '") + c + "'", pos_);
    ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Dim parse_dim_prefix(std::string_view text, size_t* consumed) {
  DimParser p(text);
  Dim d = p.sum();
  *consumed = p.end();
  return d;
}

Dim parse_dim(std::string_view text) {
  DimParser p(text);
  Dim d = p.sum();
  size_t rest = p.skip_blanks();
  if (rest != text.size()) p.fail("unexpected '" + std::string(1, text[rest]) + "' after the dimension", rest);
  return d;
}

}  // namespace lumen::ops
