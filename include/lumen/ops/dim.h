// The one language of sizes: integer expressions over the model's params (by
// name) and the token count N, e.g. `n_head_kv * head_dim` or
// `max(64, N * n_embd * 4)`. The IR's shapes and attributes, the program's
// sizes and the runtime's evaluation of them are all this type, with one
// definition of each operator (apply), one evaluator, one printer and one
// parser. ops/sym_dim.h computes its canonical form, for equality.
//
// Immutable values with cheap copies; the constructors fold constants and
// drop identities so that equal shapes usually compare equal structurally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lumen::ops {

class Dim {
 public:
  enum class Kind : uint8_t { Const, Param, Tokens, Add, Sub, Mul, Div, Mod, Min, Max };

  Dim() : Dim(constant(0)) {}
  static Dim constant(int64_t value);
  static Dim param(std::string name);
  static Dim tokens();  // N, the number of tokens in one call

  Kind kind() const { return node_->kind; }
  int64_t value() const { return node_->value; }          // Const only
  const std::string& name() const { return node_->name; }  // Param only
  const Dim& lhs() const { return *node_->lhs; }           // binary kinds only
  const Dim& rhs() const { return *node_->rhs; }
  bool is_constant() const { return kind() == Kind::Const; }
  bool is_binary() const { return kind() >= Kind::Add; }

  // Structural equality (after the constructors' simplifications).
  bool operator==(const Dim& other) const;
  // Infix text: `a + b * c`, `(a + b) * c`, `max(a, b)`; parse_dim() reads it back.
  std::string str() const;
  // The value for the given params and N, by apply(); nullopt when a param
  // has no value. Throws DimError on division by zero or int64 overflow.
  using ParamValue = std::function<std::optional<int64_t>(const std::string&)>;
  std::optional<int64_t> eval(const ParamValue& param_value, int64_t n_tokens) const;
  // Whether the expression mentions N / which params it mentions.
  bool uses_tokens() const;
  void for_each_param(const std::function<void(const std::string&)>& fn) const;

  static Dim binary(Kind kind, Dim lhs, Dim rhs);  // with simplification

 private:
  struct Node {
    Kind kind = Kind::Const;
    int64_t value = 0;
    std::string name;
    std::shared_ptr<const Dim> lhs, rhs;
  };
  explicit Dim(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  std::shared_ptr<const Node> node_;
};

Dim operator+(const Dim& a, const Dim& b);
Dim operator-(const Dim& a, const Dim& b);
Dim operator*(const Dim& a, const Dim& b);
Dim operator/(const Dim& a, const Dim& b);  // floor division
Dim operator%(const Dim& a, const Dim& b);  // the remainder of floor division (the divisor's sign)
Dim max(const Dim& a, const Dim& b);
Dim min(const Dim& a, const Dim& b);
// Rounds up to a multiple of `align` (> 0): ((x + align - 1) / align) * align.
Dim align_up(const Dim& x, int64_t align);

// The error of evaluation: a division or modulo by zero, or a result that
// does not fit in int64.
struct DimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The one definition of the binary operators on values (a binary kind):
// + - * exact in int64, floor division, its remainder (so a == a / b * b + a % b
// and a % b has the sign of b), min, max. Throws DimError.
int64_t apply(Dim::Kind op, int64_t a, int64_t b);
// apply() without the error: nullopt where apply() throws (for folding).
std::optional<int64_t> fold(Dim::Kind op, int64_t a, int64_t b);

// The parser of what str() prints:
//   dim  ::= term (("+" | "-") term)*      term ::= atom (("*" | "/" | "%") atom)*
//   atom ::= int | "-" int | "N" | name | ("max" | "min") "(" dim "," dim ")" | "(" dim ")"
// with blanks between tokens. An error names its offset into the text.
struct DimParseError : std::runtime_error {
  DimParseError(const std::string& message, size_t at) : std::runtime_error(message), offset(at) {}
  size_t offset;
};
// The whole text is one expression.
Dim parse_dim(std::string_view text);
// The longest expression at the start of `text`, for a caller whose syntax
// continues after it (`f32[N, n_embd]`, `n_layer iter(`): *consumed is its
// length. `//` ends it (a comment, not a division).
Dim parse_dim_prefix(std::string_view text, size_t* consumed);

}  // namespace lumen::ops
