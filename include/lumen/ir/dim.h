// Symbolic dimensions of the tensor IR: integer expressions over the model's
// params (by name) and the token count N, e.g. `n_head_kv * head_dim` or
// `max(64, N * n_embd * 4)`. Immutable values with cheap copies; the
// constructors fold constants and drop identities so that equal shapes
// usually compare equal structurally.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace lumen::ir {

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
  // Infix text: `a + b * c`, `(a + b) * c`, `max(a, b)`; parsed back by parse_dim().
  std::string str() const;
  // Value for the given params (nullopt when a param is unknown) and N.
  // Throws std::domain_error on division by zero or overflow.
  std::optional<int64_t> eval(const std::function<std::optional<int64_t>(const std::string&)>& param_value,
                              int64_t n_tokens) const;
  // Whether the expression mentions N / the named param.
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
Dim operator/(const Dim& a, const Dim& b);
Dim operator%(const Dim& a, const Dim& b);
Dim max(const Dim& a, const Dim& b);
Dim min(const Dim& a, const Dim& b);
// Rounds up to a multiple of `align` (> 0): ((x + align - 1) / align) * align.
Dim align_up(const Dim& x, int64_t align);

}  // namespace lumen::ir
