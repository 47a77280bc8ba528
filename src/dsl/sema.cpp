// Semantic analysis: walks the module in declaration order, resolves names,
// types every expression (scalars and tensors with symbolic shapes) and
// reports every mistake it can find, without stopping at the first. An
// expression that already produced an error gets the Unknown type, and
// Unknown operands never produce further errors (no cascades).
#include "lumen/dsl/sema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace lumen::dsl {

using namespace ast;

namespace {

// ------------------------------------------------------------- builtins

enum class ArgKind {
  Tensor,  // an f32 (or i32 tokens) tensor value
  Weight,  // a weight reference: `w` or `w[l]`
  Int,     // an int scalar
  Float,   // a float scalar (ints are accepted)
  Mode,    // neox | normal
};

struct ArgSpec {
  const char* name;
  ArgKind kind;
  bool required;
};

struct Signature {
  Builtin builtin;
  std::vector<ArgSpec> args;
};

const std::vector<Signature>& signatures() {
  static const std::vector<Signature> table = {
      {Builtin::Embed, {{"table", ArgKind::Weight, true}, {"tokens", ArgKind::Tensor, true}}},
      {Builtin::RmsNorm, {{"x", ArgKind::Tensor, true}, {"weight", ArgKind::Tensor, true}, {"eps", ArgKind::Float, true}}},
      {Builtin::MatMul, {{"x", ArgKind::Tensor, true}, {"w", ArgKind::Weight, true}}},
      {Builtin::Add, {{"a", ArgKind::Tensor, true}, {"b", ArgKind::Tensor, true}}},
      {Builtin::Mul, {{"a", ArgKind::Tensor, true}, {"b", ArgKind::Tensor, true}}},
      {Builtin::Silu, {{"x", ArgKind::Tensor, true}}},
      {Builtin::Rope,
       {{"x", ArgKind::Tensor, true},
        {"heads", ArgKind::Int, true},
        {"dim", ArgKind::Int, true},
        {"base", ArgKind::Float, false},
        {"mode", ArgKind::Mode, false}}},
      {Builtin::Attention,
       {{"q", ArgKind::Tensor, true},
        {"k", ArgKind::Tensor, true},
        {"v", ArgKind::Tensor, true},
        {"heads", ArgKind::Int, true},
        {"kv_heads", ArgKind::Int, false},
        {"dim", ArgKind::Int, true},
        {"scale", ArgKind::Float, false}}},
      {Builtin::Softmax, {{"x", ArgKind::Tensor, true}}},
      {Builtin::Last, {{"x", ArgKind::Tensor, true}}},
      {Builtin::Sqrt, {{"x", ArgKind::Float, true}}},
      {Builtin::Min, {{"a", ArgKind::Float, true}, {"b", ArgKind::Float, true}}},
      {Builtin::Max, {{"a", ArgKind::Float, true}, {"b", ArgKind::Float, true}}},
  };
  return table;
}

const Signature* find_signature(Builtin b) {
  for (const Signature& s : signatures()) {
    if (s.builtin == b) return &s;
  }
  return nullptr;
}

bool is_tensor_op(Builtin b) {
  switch (b) {
    case Builtin::Embed: case Builtin::RmsNorm: case Builtin::MatMul: case Builtin::Add: case Builtin::Mul:
    case Builtin::Silu: case Builtin::Rope: case Builtin::Attention: case Builtin::Softmax: case Builtin::Last:
      return true;
    default: return false;
  }
}

bool is_reserved(std::string_view name) {
  static const char* const kReserved[] = {"N", "layers", "neox", "normal", "model", "param", "let", "check",
                                          "weight", "layer", "weights", "forward", "for", "in", "return",
                                          "else", "int", "float", "f32", "f16", "q8_0", "i32"};
  for (const char* r : kReserved) {
    if (name == r) return true;
  }
  return builtin_from_name(name) != Builtin::Unknown;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string quoted(std::string_view s) {
  std::string out = "'";  // built stepwise: GCC 12 warns falsely on "'" + std::string(s)
  out += s;
  out += "'";
  return out;
}

// ------------------------------------------------ symbolic dim comparison

// Sample bindings of the params (and N) used to decide whether two symbolic
// dims are equal. Deterministic: a fixed-seed generator.
class DimOracle {
 public:
  void build(const Module& m) {
    uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next = [&state]() {
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    };
    constexpr int kWanted = 8;
    constexpr int kAttempts = 400;
    std::vector<Sample> unchecked;
    for (int attempt = 0; attempt < kAttempts && static_cast<int>(samples_.size()) < kWanted; ++attempt) {
      Sample s;
      s.n_tokens = static_cast<double>(2 + next() % 999);
      bool ok = true;
      for (const auto& p : m.params) {
        std::optional<double> v;
        if (p->source == ParamDecl::Source::Derived) {
          if (p->value && p->value->type.kind != ValueKind::Unknown) v = eval(*p->value, s);
        } else if (p->type == ScalarType::Int) {
          // Products of small primes make divisibility checks likely to hold.
          v = std::ldexp(1.0, static_cast<int>(next() % 9)) * std::pow(3.0, static_cast<double>(next() % 3)) *
              std::pow(7.0, static_cast<double>(next() % 2));
        } else {
          v = 0.5 + static_cast<double>(next() % 1000) / 100.0;
        }
        if (!v) {
          ok = false;
          break;
        }
        s.values[p.get()] = *v;
      }
      if (!ok) continue;
      if (static_cast<int>(unchecked.size()) < kWanted) unchecked.push_back(s);
      for (const auto& c : m.checks) {
        if (c->condition->type.kind != ValueKind::Bool) continue;
        std::optional<double> v = eval(*c->condition, s);
        if (!v || *v == 0.0) {
          ok = false;
          break;
        }
      }
      if (ok) samples_.push_back(std::move(s));
    }
    // Unsatisfiable (or unsampleable) checks: compare without them.
    if (samples_.empty()) samples_ = std::move(unchecked);
  }

  // Equal when both evaluate to the same value on every sample; when a
  // sample cannot be evaluated, falls back to comparing the source text.
  bool equal(const Dim& a, const Dim& b) const {
    if (has_error(a) || has_error(b)) return true;  // already reported
    if (to_string(a) == to_string(b)) return true;
    if (samples_.empty()) return false;
    for (const Sample& s : samples_) {
      std::optional<double> x = eval_dim(a, s), y = eval_dim(b, s);
      if (!x || !y) return false;
      if (*x != *y) return false;
    }
    return true;
  }

  // Whether `d` equals a * b (two scalar expressions of the program).
  bool equal_to_product(const Dim& d, const Expr& a, const Expr& b) const {
    if (has_error(d)) return true;
    if (to_string(d) == to_string(a) + " * " + to_string(b)) return true;
    if (samples_.empty()) return false;
    for (const Sample& s : samples_) {
      std::optional<double> x = eval_dim(d, s), y = eval(a, s), z = eval(b, s);
      if (!x || !y || !z || *x != *y * *z) return false;
    }
    return true;
  }

  // Whether a % b == 0 on every sample: `b` divides `a` under the checks.
  bool divides(const Expr& b, const Expr& a) const {
    if (a.type.kind == ValueKind::Unknown || b.type.kind == ValueKind::Unknown) return true;  // already reported
    if (to_string(a) == to_string(b)) return true;
    if (samples_.empty()) return false;
    for (const Sample& s : samples_) {
      std::optional<double> x = eval(a, s), y = eval(b, s);
      if (!x || !y || *y == 0.0 || std::fmod(*x, *y) != 0.0) return false;
    }
    return true;
  }

 private:
  struct Sample {
    std::map<const ParamDecl*, double> values;
    double n_tokens = 0;
  };

  static bool has_error(const Dim& d) { return d.expr && d.expr->type.kind == ValueKind::Unknown; }

  std::optional<double> eval_dim(const Dim& d, const Sample& s) const {
    if (!d.expr) return static_cast<double>(d.constant);
    return eval(*d.expr, s);
  }

  // Integer-typed operations use floor division and modulo, as the runtime does.
  static std::optional<double> eval(const Expr& e, const Sample& s) {
    switch (e.kind) {
      case Expr::Kind::IntLiteral: return static_cast<double>(static_cast<const IntLiteral&>(e).value);
      case Expr::Kind::FloatLiteral: return static_cast<const FloatLiteral&>(e).value;
      case Expr::Kind::Name: {
        auto& n = static_cast<const NameExpr&>(e);
        if (n.resolved == NameKind::TokenCount) return s.n_tokens;
        if (n.resolved == NameKind::Param) {
          auto it = s.values.find(n.param);
          if (it != s.values.end()) return it->second;
        }
        return std::nullopt;
      }
      case Expr::Kind::Unary: {
        auto& u = static_cast<const UnaryExpr&>(e);
        std::optional<double> x = eval(*u.operand, s);
        if (!x) return std::nullopt;
        return u.op == UnaryOp::Neg ? -*x : (*x == 0.0 ? 1.0 : 0.0);
      }
      case Expr::Kind::Binary: {
        auto& b = static_cast<const BinaryExpr&>(e);
        std::optional<double> x = eval(*b.lhs, s), y = eval(*b.rhs, s);
        if (!x || !y) return std::nullopt;
        bool ints = b.lhs->type.kind == ValueKind::Int && b.rhs->type.kind == ValueKind::Int;
        switch (b.op) {
          case BinaryOp::Add: return *x + *y;
          case BinaryOp::Sub: return *x - *y;
          case BinaryOp::Mul: return *x * *y;
          case BinaryOp::Div:
            if (*y == 0.0) return std::nullopt;
            return ints ? std::floor(*x / *y) : *x / *y;
          case BinaryOp::Mod:
            if (*y == 0.0) return std::nullopt;
            return *x - *y * std::floor(*x / *y);
          case BinaryOp::Eq: return *x == *y ? 1.0 : 0.0;
          case BinaryOp::Ne: return *x != *y ? 1.0 : 0.0;
          case BinaryOp::Lt: return *x < *y ? 1.0 : 0.0;
          case BinaryOp::Le: return *x <= *y ? 1.0 : 0.0;
          case BinaryOp::Gt: return *x > *y ? 1.0 : 0.0;
          case BinaryOp::Ge: return *x >= *y ? 1.0 : 0.0;
          case BinaryOp::And: return (*x != 0.0 && *y != 0.0) ? 1.0 : 0.0;
          case BinaryOp::Or: return (*x != 0.0 || *y != 0.0) ? 1.0 : 0.0;
        }
        return std::nullopt;
      }
      case Expr::Kind::Call: {
        auto& c = static_cast<const CallExpr&>(e);
        std::vector<double> args;
        for (const Argument& a : c.args) {
          std::optional<double> v = eval(*a.value, s);
          if (!v) return std::nullopt;
          args.push_back(*v);
        }
        if (c.builtin == Builtin::Sqrt && args.size() == 1 && args[0] >= 0.0) return std::sqrt(args[0]);
        if (c.builtin == Builtin::Min && args.size() == 2) return std::min(args[0], args[1]);
        if (c.builtin == Builtin::Max && args.size() == 2) return std::max(args[0], args[1]);
        return std::nullopt;
      }
      default: return std::nullopt;
    }
  }

  std::vector<Sample> samples_;
};

// ------------------------------------------------------------------ sema

// Where an expression appears; decides which names are visible.
struct Context {
  bool declarations = true;      // outside the forward body: unknown names get a "bind it" hint
  bool allow_tokens = false;     // N may appear (forward shapes)
  const ParamDecl* current = nullptr;  // the param being defined (params are visible up to it)
  const char* what = "";         // for messages: "a weight shape"
};

class Sema {
 public:
  Sema(Module& m, DiagnosticEngine& diags) : m_(m), diags_(diags) {}

  bool run() {
    int errors_before = diags_.error_count();
    index_names();
    check_params();
    check_checks();
    dims_.build(m_);
    check_weights();
    check_forward();
    warn_unused_weights();
    return diags_.error_count() == errors_before;
  }

 private:
  void error(const SourceRange& r, std::string msg) { diags_.error(r, std::move(msg)); }

  // ------------------------------------------------------ declarations

  // Records a top-level name; reports a redefinition (or a reserved name).
  void declare(const std::string& name, const SourceRange& range) {
    if (is_reserved(name)) {
      error(range, quoted(name) + " is a reserved name");
      return;
    }
    auto [it, inserted] = names_.emplace(name, range);
    if (!inserted) {
      error(range, "redefinition of " + quoted(name));
      diags_.note(it->second, "previous definition of " + quoted(name) + " is here");
    }
  }

  void check_params() {
    for (auto& p : m_.params) {
      declare(p->name, p->name_range);
      Context ctx;
      ctx.current = p.get();
      switch (p->source) {
        case ParamDecl::Source::Key:
        case ParamDecl::Source::ArrayLength:
          p->resolved_key = resolve_key(p->key, p->key_range);
          if (p->source == ParamDecl::Source::ArrayLength && p->type != ScalarType::Int) {
            error(p->name_range, "len() gives an int; declare " + quoted(p->name) + " as int");
          }
          if (p->default_value) {
            ctx.what = "a default value";
            ValueKind k = check_scalar(*p->default_value, ctx);
            if (k == ValueKind::Float && p->type == ScalarType::Int) {
              error(p->default_value->range, "default value of int param " + quoted(p->name) + " is a float");
            } else if (k == ValueKind::Bool) {
              error(p->default_value->range, "default value of " + quoted(p->name) + " must be a number, not a bool");
            }
          }
          break;
        case ParamDecl::Source::Derived: {
          ctx.what = "a let";
          ValueKind k = check_scalar(*p->value, ctx);
          if (k == ValueKind::Bool) {
            error(p->value->range, "let " + quoted(p->name) + " must be a number, not a bool");
          }
          p->type = k == ValueKind::Float ? ScalarType::Float : ScalarType::Int;
          break;
        }
      }
      defined_params_.insert(p.get());
    }
  }

  // Replaces "{arch}" with the model name; any other placeholder is an error.
  std::string resolve_key(const std::string& key, const SourceRange& range) {
    if (key.empty()) {
      error(range, "empty metadata key");
      return key;
    }
    std::string out;
    for (size_t i = 0; i < key.size(); ++i) {
      if (key[i] != '{') {
        out += key[i];
        continue;
      }
      size_t close = key.find('}', i);
      std::string name = close == std::string::npos ? key.substr(i) : key.substr(i, close - i + 1);
      if (name != "{arch}") {
        error(range, "unknown placeholder " + quoted(name) + " in metadata key (only {arch} is allowed)");
        return key;
      }
      out += m_.arch;
      i = close;
    }
    return out;
  }

  void check_checks() {
    for (auto& c : m_.checks) {
      Context ctx;
      ctx.what = "a check";
      ValueKind k = check_scalar(*c->condition, ctx);
      if (k != ValueKind::Bool && k != ValueKind::Unknown) {
        error(c->condition->range, std::string("check condition must be a comparison, found an ") +
                                       (k == ValueKind::Int ? "int" : "float") + " expression");
        c->condition->type.kind = ValueKind::Unknown;
      }
      if (c->message.empty()) error(c->range, "check message must not be empty");
    }
  }

  // Checks the "{i}" placeholder rules of a GGUF tensor name.
  void check_tensor_name(const std::string& name, const SourceRange& range, const std::string& index) {
    if (name.empty()) {
      error(range, "empty GGUF tensor name");
      return;
    }
    std::string expected = index.empty() ? "" : "{" + index + "}";
    bool has_index = false;
    for (size_t i = name.find('{'); i != std::string::npos; i = name.find('{', i + 1)) {
      size_t close = name.find('}', i);
      std::string ph = close == std::string::npos ? name.substr(i) : name.substr(i, close - i + 1);
      if (!expected.empty() && ph == expected) {
        has_index = true;
      } else if (expected.empty()) {
        error(range, "placeholder " + quoted(ph) + " in a global weight name (only layer weights are per layer)");
        return;
      } else {
        error(range, "unknown placeholder " + quoted(ph) + " in a layer weight name (use " + expected + ")");
        return;
      }
    }
    if (!expected.empty() && !has_index) error(range, "layer weight name must contain " + expected);
  }

  void check_weight(WeightDecl& w, const std::string& index) {
    declare(w.name, w.name_range);
    if (w.type.dtype == DType::I32) error(w.type.dtype_range, "weights must be f32, f16 or q8_0");
    if (w.type.dims.empty() || w.type.dims.size() > 2) {
      error(w.type.range, "weights have 1 or 2 dimensions, found " + std::to_string(w.type.dims.size()));
    }
    Context ctx;
    ctx.what = "a weight shape";
    for (auto& d : w.type.dims) check_dim(*d, ctx);
    check_tensor_name(w.gguf_name, w.gguf_name_range, index);
    if (w.fallback) check_tensor_name(*w.fallback, w.fallback_range, index);
  }

  void check_weights() {
    for (auto& w : m_.weights) check_weight(*w, "");
    if (auto& b = m_.layer_weights) {
      Context ctx;
      ctx.what = "the layer count";
      ValueKind k = check_scalar(*b->count, ctx);
      if (k != ValueKind::Int && k != ValueKind::Unknown) error(b->count->range, "the layer count must be an int");
      for (auto& w : b->weights) check_weight(*w, b->index_name);
    }
  }

  // A dimension: an int expression over params (and N where allowed).
  void check_dim(Expr& d, const Context& ctx) {
    ValueKind k = check_scalar(d, ctx);
    if (k != ValueKind::Int && k != ValueKind::Unknown) {
      error(d.range, std::string("dimension must be an int expression, found ") + (k == ValueKind::Float ? "a float" : "a bool"));
      d.type.kind = ValueKind::Unknown;
    }
  }

  // -------------------------------------------------------- scalars

  ValueKind set(Expr& e, ValueKind k) {
    e.type.kind = k;
    return k;
  }

  ValueKind check_scalar(Expr& e, const Context& ctx) {
    switch (e.kind) {
      case Expr::Kind::IntLiteral: return set(e, ValueKind::Int);
      case Expr::Kind::FloatLiteral: return set(e, ValueKind::Float);
      case Expr::Kind::StringLiteral:
        error(e.range, "a string is not allowed here");
        return set(e, ValueKind::Unknown);
      case Expr::Kind::Name: return check_scalar_name(static_cast<NameExpr&>(e), ctx);
      case Expr::Kind::Unary: {
        auto& u = static_cast<UnaryExpr&>(e);
        ValueKind k = check_scalar(*u.operand, ctx);
        if (k == ValueKind::Unknown) return set(e, k);
        if (u.op == UnaryOp::Neg && k == ValueKind::Bool) {
          error(e.range, "cannot negate a bool");
          return set(e, ValueKind::Unknown);
        }
        if (u.op == UnaryOp::Not && k != ValueKind::Bool) {
          error(e.range, "'!' needs a bool operand (a comparison)");
          return set(e, ValueKind::Unknown);
        }
        return set(e, k);
      }
      case Expr::Kind::Binary: return check_scalar_binary(static_cast<BinaryExpr&>(e), ctx);
      case Expr::Kind::Call: return check_scalar_call(static_cast<CallExpr&>(e), ctx);
      case Expr::Kind::Index:
        error(e.range, std::string("indexing is not allowed in ") + ctx.what);
        return set(e, ValueKind::Unknown);
    }
    return set(e, ValueKind::Unknown);
  }

  std::string suggestion(const std::string& name) const {
    // Suggestions cost a comparison per declared name: skip them for
    // programs far larger than any real one.
    constexpr size_t kMaxCandidates = 1000;
    if (params_by_name_.size() + weights_by_name_.size() + locals_.size() > kMaxCandidates) return "";
    std::string best;
    size_t best_distance = 3;
    auto consider = [&](const std::string& candidate) {
      size_t d = edit_distance(name, candidate);
      if (d < best_distance) {
        best_distance = d;
        best = candidate;
      }
    };
    for (auto& p : m_.params) consider(p->name);
    for (auto& w : m_.weights) consider(w->name);
    if (m_.layer_weights) {
      for (auto& w : m_.layer_weights->weights) consider(w->name);
    }
    for (auto& [local, info] : locals_) consider(local);
    return best.empty() ? "" : "; did you mean " + quoted(best) + "?";
  }

  ValueKind check_scalar_name(NameExpr& n, const Context& ctx) {
    if (n.name == "N") {
      if (!ctx.allow_tokens) {
        error(n.range, std::string("N (the token count) is not known in ") + ctx.what);
        return set(n, ValueKind::Unknown);
      }
      n.resolved = NameKind::TokenCount;
      return set(n, ValueKind::Int);
    }
    if (const ParamDecl* p = find_param(n.name)) {
      if (p == ctx.current || !defined_params_.count(p)) {
        error(n.range, quoted(n.name) + " is used before its definition");
        diags_.note(p->name_range, quoted(n.name) + " is defined here");
        return set(n, ValueKind::Unknown);
      }
      n.resolved = NameKind::Param;
      n.param = p;
      return set(n, p->type == ScalarType::Int ? ValueKind::Int : ValueKind::Float);
    }
    if (find_weight(n.name)) {
      error(n.range, quoted(n.name) + " is a weight, not a number");
      return set(n, ValueKind::Unknown);
    }
    std::string hint = suggestion(n.name);
    if (hint.empty() && ctx.declarations) {
      hint = "; bind it to a metadata key with 'param " + n.name + " : int = key(\"...\")' or define it with 'let'";
    }
    error(n.range, "unknown name " + quoted(n.name) + hint);
    return set(n, ValueKind::Unknown);
  }

  ValueKind check_scalar_binary(BinaryExpr& b, const Context& ctx) {
    ValueKind l = check_scalar(*b.lhs, ctx);
    ValueKind r = check_scalar(*b.rhs, ctx);
    return set(b, combine_scalar(b, l, r));
  }

  ValueKind combine_scalar(const BinaryExpr& b, ValueKind l, ValueKind r) {
    if (l == ValueKind::Unknown || r == ValueKind::Unknown) return ValueKind::Unknown;
    std::string op = quoted(to_string(b.op));
    switch (b.op) {
      case BinaryOp::And:
      case BinaryOp::Or:
        if (l != ValueKind::Bool || r != ValueKind::Bool) {
          error(b.range, op + " needs bool operands (comparisons)");
          return ValueKind::Unknown;
        }
        return ValueKind::Bool;
      default: break;
    }
    if (l == ValueKind::Bool || r == ValueKind::Bool) {
      error(b.range, op + " needs numbers, not bools");
      return ValueKind::Unknown;
    }
    switch (b.op) {
      case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt:
      case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
        return ValueKind::Bool;
      case BinaryOp::Mod:
        if (l != ValueKind::Int || r != ValueKind::Int) {
          error(b.range, "'%' needs int operands");
          return ValueKind::Unknown;
        }
        return ValueKind::Int;
      default:
        return l == ValueKind::Int && r == ValueKind::Int ? ValueKind::Int : ValueKind::Float;
    }
  }

  ValueKind check_scalar_call(CallExpr& c, const Context& ctx) {
    if (c.builtin == Builtin::Key || c.builtin == Builtin::Len) {
      error(c.callee_range, c.callee + "() binds a param: write 'param NAME : TYPE = " + c.callee + "(\"...\")'");
      return set(c, ValueKind::Unknown);
    }
    if (is_tensor_op(c.builtin)) {
      error(c.callee_range, quoted(c.callee) + " is a tensor op; it is not allowed in " + ctx.what);
      return set(c, ValueKind::Unknown);
    }
    const Signature* sig = find_signature(c.builtin);
    if (!sig) {
      std::string hint;
      size_t best = 3;
      for (int b = static_cast<int>(Builtin::Embed); b <= static_cast<int>(Builtin::Max); ++b) {
        const char* name = to_string(static_cast<Builtin>(b));
        if (size_t d = edit_distance(c.callee, name); d < best) {
          best = d;
          hint = std::string("; did you mean '") + name + "'?";
        }
      }
      error(c.callee_range, "unknown function " + quoted(c.callee) + hint);
      return set(c, ValueKind::Unknown);
    }
    if (!bind_arguments(c, *sig)) return set(c, ValueKind::Unknown);
    bool all_int = true;
    for (Argument& a : c.args) {
      ValueKind k = check_scalar(*a.value, ctx);
      if (k == ValueKind::Unknown) return set(c, k);
      if (k != ValueKind::Int && k != ValueKind::Float) {
        error(a.value->range, quoted(c.callee) + " needs numeric arguments");
        return set(c, ValueKind::Unknown);
      }
      all_int = all_int && k == ValueKind::Int;
    }
    if (c.builtin == Builtin::Sqrt) return set(c, ValueKind::Float);
    return set(c, all_int ? ValueKind::Int : ValueKind::Float);
  }

  // Matches positional and keyword arguments to the signature; fills
  // Argument::param. Reports arity and keyword mistakes.
  bool bind_arguments(CallExpr& c, const Signature& sig) {
    bool ok = true;
    bool seen_keyword = false;
    size_t positional = 0;
    std::set<std::string> bound;
    for (Argument& a : c.args) {
      if (a.keyword.empty()) {
        if (seen_keyword) {
          error(a.value->range, "positional argument after a keyword argument in call to " + quoted(c.callee));
          ok = false;
          continue;
        }
        if (positional >= sig.args.size()) {
          error(a.value->range, quoted(c.callee) + " takes " + std::to_string(sig.args.size()) + " argument" +
                                    (sig.args.size() == 1 ? "" : "s") + ", got " + std::to_string(c.args.size()));
          return false;
        }
        a.param = sig.args[positional++].name;
      } else {
        seen_keyword = true;
        auto it = std::find_if(sig.args.begin(), sig.args.end(), [&](const ArgSpec& s) { return a.keyword == s.name; });
        if (it == sig.args.end()) {
          std::string names;
          for (const ArgSpec& s : sig.args) names += (names.empty() ? "" : ", ") + std::string(s.name);
          error(a.keyword_range, quoted(c.callee) + " has no parameter " + quoted(a.keyword) + " (parameters: " + names + ")");
          ok = false;
          continue;
        }
        a.param = a.keyword;
      }
      if (!bound.insert(a.param).second) {
        error(a.keyword.empty() ? a.value->range : a.keyword_range,
              "argument " + quoted(a.param) + " of " + quoted(c.callee) + " is given twice");
        a.param.clear();
        ok = false;
      }
    }
    if (!ok) return false;
    for (const ArgSpec& s : sig.args) {
      if (s.required && !bound.count(s.name)) {
        error(c.range, quoted(c.callee) + " needs argument " + quoted(s.name));
        ok = false;
      }
    }
    return ok;
  }

  // -------------------------------------------------------- forward

  struct LocalInfo {
    ExprType type;
    bool in_loop = false;  // first defined inside the layer loop
  };

  void check_forward() {
    if (!m_.forward) {
      diags_.error({m_.filename, {}, {}}, "the program has no 'forward' function");
      return;
    }
    ForwardDecl& f = *m_.forward;
    Context shape_ctx;
    shape_ctx.allow_tokens = true;
    shape_ctx.what = "a forward shape";
    for (auto& in : f.inputs) {
      for (auto& d : in->type.dims) check_dim(*d, shape_ctx);
      declare(in->name, in->name_range);
    }
    for (auto& d : f.result.dims) check_dim(*d, shape_ctx);
    if (f.inputs.size() != 1 || f.inputs[0]->type.dtype != DType::I32 || f.inputs[0]->type.dims.size() != 1 ||
        to_string(*f.inputs[0]->type.dims[0]) != "N") {
      SourceRange r = f.inputs.empty() ? f.range : f.inputs[0]->name_range;
      error(r, "forward takes exactly one input, the token ids: 'NAME : i32[N]'");
    }
    if (f.result.dtype != DType::F32) error(f.result.dtype_range, "forward must return f32 logits");

    bool returned = false;
    for (size_t i = 0; i < f.body.size(); ++i) {
      Stmt& s = *f.body[i];
      if (returned) {
        error(s.range, "statement after 'return'");
        for (size_t j = i; j < f.body.size(); ++j) mark_weights_used(*f.body[j]);
        break;
      }
      if (auto* r = dyn_cast<ReturnStmt>(&s)) {
        returned = true;
        ExprType t = check_tensor(*r->value);
        if (t.kind == ValueKind::Tensor) {
          TensorType declared = type_of(f.result);
          if (!same_type(t.tensor, declared)) {
            error(r->value->range, "forward returns " + to_string(t.tensor) + " but is declared to return " +
                                       to_string(declared));
          }
        }
      } else {
        check_stmt(s);
      }
    }
    if (!returned) {
      // At the closing brace: the last character of the forward range.
      SourceRange brace{f.range.file, {f.range.end.line, std::max(f.range.end.col - 1, 1)}, f.range.end};
      error(brace, "forward must end with 'return' and the logits");
    }
  }

  void check_stmt(Stmt& s) {
    if (auto* a = dyn_cast<AssignStmt>(&s)) {
      check_assign(*a);
    } else if (auto* f = dyn_cast<ForStmt>(&s)) {
      check_for(*f);
    } else if (auto* r = dyn_cast<ReturnStmt>(&s)) {
      error(r->range, "'return' inside the layer loop");
      mark_weights_used(s);
    }
  }

  void check_assign(AssignStmt& a) {
    ExprType t = check_tensor(*a.value);
    if (t.kind != ValueKind::Tensor && t.kind != ValueKind::Unknown) {
      error(a.value->range, "only tensors can be assigned in forward (found " + to_string(t) +
                                "); use 'let' for scalars");
      t.kind = ValueKind::Unknown;
    }
    if (a.name == loop_var_ && in_loop_) {
      error(a.name_range, "cannot assign to the loop variable " + quoted(a.name));
      return;
    }
    if (find_param(a.name) || find_weight(a.name) || is_input(a.name) || is_reserved(a.name)) {
      error(a.name_range, "cannot assign to " + quoted(a.name) + ": it is not a forward value");
      return;
    }
    auto it = locals_.find(a.name);
    if (it == locals_.end()) {
      locals_[a.name] = {t, in_loop_};
      return;
    }
    if (in_loop_ && !it->second.in_loop) {
      a.loop_carried = true;
      if (t.kind == ValueKind::Tensor && it->second.type.kind == ValueKind::Tensor &&
          !same_type(t.tensor, it->second.type.tensor)) {
        error(a.value->range, "loop-carried value " + quoted(a.name) + " changes type from " +
                                  to_string(it->second.type) + " to " + to_string(t));
        return;
      }
    }
    // A rebinding whose value had an error keeps the old type, so that the
    // statements after it are still checked.
    if (t.kind != ValueKind::Unknown) it->second.type = t;
  }

  void check_for(ForStmt& f) {
    SourceRange keyword{f.range.file, f.range.begin, {f.range.begin.line, f.range.begin.col + 3}};
    if (in_loop_ || seen_loop_) {
      error(keyword, in_loop_ ? "layer loops cannot be nested" : "a forward function has only one layer loop");
      for (StmtPtr& s : f.body) mark_weights_used(*s);  // unchecked, but not "unused"
      return;
    }
    seen_loop_ = true;
    if (f.range_name != "layers") {
      error(f.range_name_range, "a loop runs over 'layers', found " + quoted(f.range_name));
    } else if (!m_.layer_weights) {
      error(f.range_name_range, "'for ... in layers' needs a 'layer weights' block");
    }
    if (find_param(f.var) || find_weight(f.var) || is_input(f.var) || locals_.count(f.var) || is_reserved(f.var)) {
      error(f.var_range, "loop variable " + quoted(f.var) + " shadows another name");
    }
    in_loop_ = true;
    loop_var_ = f.var;
    for (StmtPtr& s : f.body) check_stmt(*s);
    in_loop_ = false;
    // Values first defined in the loop are per-iteration: not visible after it.
    for (auto it = locals_.begin(); it != locals_.end();) {
      if (it->second.in_loop) {
        loop_only_.insert(it->first);
        it = locals_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Marks the weights named in statements that are not checked (after an
  // error), so that they do not also get an "unused" warning.
  void mark_weights_used(const Stmt& s) {
    if (auto* a = dyn_cast<AssignStmt>(&s)) mark_weights_used(*a->value);
    if (auto* r = dyn_cast<ReturnStmt>(&s)) mark_weights_used(*r->value);
    if (auto* f = dyn_cast<ForStmt>(&s)) {
      for (const StmtPtr& b : f->body) mark_weights_used(*b);
    }
  }

  void mark_weights_used(const Expr& e) {
    if (auto* n = dyn_cast<NameExpr>(&e)) {
      if (const WeightDecl* w = find_weight(n->name)) const_cast<WeightDecl*>(w)->used = true;
    } else if (auto* u = dyn_cast<UnaryExpr>(&e)) {
      mark_weights_used(*u->operand);
    } else if (auto* b = dyn_cast<BinaryExpr>(&e)) {
      mark_weights_used(*b->lhs);
      mark_weights_used(*b->rhs);
    } else if (auto* c = dyn_cast<CallExpr>(&e)) {
      for (const Argument& a : c->args) mark_weights_used(*a.value);
    } else if (auto* x = dyn_cast<IndexExpr>(&e)) {
      mark_weights_used(*x->base);
    }
  }

  bool is_input(const std::string& name) const { return inputs_by_name_.count(name) > 0; }

  // Name lookups through hash maps (the first declaration wins), so that
  // programs with many declarations stay linear to check.
  void index_names() {
    for (auto& p : m_.params) params_by_name_.emplace(p->name, p.get());
    for (auto& w : m_.weights) weights_by_name_.emplace(w->name, w.get());
    if (m_.layer_weights) {
      for (auto& w : m_.layer_weights->weights) weights_by_name_.emplace(w->name, w.get());
    }
    if (m_.forward) {
      for (auto& in : m_.forward->inputs) inputs_by_name_.emplace(in->name, in.get());
    }
  }

  const ParamDecl* find_param(const std::string& name) const {
    auto it = params_by_name_.find(name);
    return it == params_by_name_.end() ? nullptr : it->second;
  }

  const WeightDecl* find_weight(const std::string& name) const {
    auto it = weights_by_name_.find(name);
    return it == weights_by_name_.end() ? nullptr : it->second;
  }

  // ------------------------------------------------- tensor expressions

  static TensorType type_of(const TypeExpr& t) {
    TensorType r;
    r.dtype = t.dtype;
    for (auto& d : t.dims) r.dims.push_back(Dim{d.get(), 0});
    return r;
  }

  bool same_dim(const Dim& a, const Dim& b) const { return dims_.equal(a, b); }

  bool same_type(const TensorType& a, const TensorType& b) const {
    if (a.dtype != b.dtype || a.dims.size() != b.dims.size()) return false;
    for (size_t i = 0; i < a.dims.size(); ++i) {
      if (!same_dim(a.dims[i], b.dims[i])) return false;
    }
    return true;
  }

  ExprType tensor(TensorType t) {
    ExprType r;
    r.kind = ValueKind::Tensor;
    r.tensor = std::move(t);
    return r;
  }

  ExprType set_type(Expr& e, ExprType t) {
    e.type = t;
    return t;
  }

  ExprType unknown(Expr& e) { return set_type(e, ExprType{}); }

  // Types an expression of the forward body: a tensor or a scalar.
  ExprType check_tensor(Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Name: return check_value_name(static_cast<NameExpr&>(e));
      case Expr::Kind::Index: return check_index(static_cast<IndexExpr&>(e));
      case Expr::Kind::Call: {
        auto& c = static_cast<CallExpr&>(e);
        if (is_tensor_op(c.builtin)) return check_op(c);
        break;
      }
      case Expr::Kind::Binary: {
        auto& b = static_cast<BinaryExpr&>(e);
        ExprType l = check_tensor(*b.lhs);
        ExprType r = check_tensor(*b.rhs);
        if (l.kind == ValueKind::Tensor || r.kind == ValueKind::Tensor) return check_elementwise(b, b.op, l, r);
        if (l.kind == ValueKind::Mode || r.kind == ValueKind::Mode) {
          error(b.range, "a rope mode is not a number");
          return unknown(b);
        }
        ExprType t;
        t.kind = combine_scalar(b, l.kind, r.kind);
        return set_type(b, t);
      }
      case Expr::Kind::Unary: {
        auto& u = static_cast<UnaryExpr&>(e);
        ExprType x = check_tensor(*u.operand);
        if (x.kind == ValueKind::Unknown) return unknown(u);
        if (x.kind == ValueKind::Tensor || x.kind == ValueKind::Mode) {
          error(u.range, std::string("operator '") + to_string(u.op) + "' is not defined on " +
                             (x.kind == ValueKind::Mode ? "a rope mode" : "tensors"));
          return unknown(u);
        }
        if ((u.op == UnaryOp::Neg) == (x.kind == ValueKind::Bool)) {
          error(u.range, u.op == UnaryOp::Neg ? "cannot negate a bool" : "'!' needs a bool operand (a comparison)");
          return unknown(u);
        }
        return set_type(u, x);
      }
      default: break;
    }
    Context ctx;
    ctx.allow_tokens = true;
    ctx.declarations = false;
    ctx.what = "the forward function";
    ExprType t;
    t.kind = check_scalar(e, ctx);
    return set_type(e, t);
  }

  ExprType check_value_name(NameExpr& n) {
    auto it = locals_.find(n.name);
    if (it != locals_.end()) {
      n.resolved = NameKind::Local;
      return set_type(n, it->second.type);
    }
    if (auto in = inputs_by_name_.find(n.name); in != inputs_by_name_.end()) {
      n.resolved = NameKind::Input;
      n.input = in->second;
      return set_type(n, tensor(type_of(in->second->type)));
    }
    if (const WeightDecl* w = find_weight(n.name)) {
      const_cast<WeightDecl*>(w)->used = true;
      if (w->per_layer) {
        error(n.range, "layer weight " + quoted(n.name) + " must be indexed by the layer: " + n.name + "[" +
                           (loop_var_.empty() ? std::string("l") : loop_var_) + "]");
        return unknown(n);
      }
      n.resolved = NameKind::Weight;
      n.weight = w;
      const_cast<WeightDecl*>(w)->used = true;
      return set_type(n, tensor(type_of(w->type)));
    }
    if (in_loop_ && n.name == loop_var_) {
      error(n.range, "the loop variable " + quoted(n.name) + " can only index layer weights");
      return unknown(n);
    }
    if (n.name == "neox" || n.name == "normal") {
      n.resolved = NameKind::Mode;
      ExprType t;
      t.kind = ValueKind::Mode;
      return set_type(n, t);
    }
    if (loop_only_.count(n.name)) {
      error(n.range, quoted(n.name) + " is defined inside the layer loop and is not visible after it");
      return unknown(n);
    }
    if (n.name != "N" && !find_param(n.name)) {
      error(n.range, "unknown name " + quoted(n.name) + suggestion(n.name));
      return unknown(n);
    }
    Context ctx;
    ctx.allow_tokens = true;
    ctx.declarations = false;
    ctx.what = "the forward function";
    ExprType t;
    t.kind = check_scalar_name(n, ctx);
    return set_type(n, t);
  }

  ExprType check_index(IndexExpr& x) {
    auto* base = dyn_cast<NameExpr>(x.base.get());
    const WeightDecl* w = base ? find_weight(base->name) : nullptr;
    if (w) const_cast<WeightDecl*>(w)->used = true;
    if (!w || !w->per_layer) {
      error(x.base->range, "only layer weights can be indexed" +
                               (base ? std::string(" (") + quoted(base->name) + " is not one)" : std::string()));
      return unknown(x);
    }
    auto* index = dyn_cast<NameExpr>(x.index.get());
    if (!in_loop_) {
      error(x.range, "layer weight " + quoted(w->name) + " is indexed outside the layer loop");
      return unknown(x);
    }
    if (!index || index->name != loop_var_) {
      error(x.index->range, "layer weights are indexed by the loop variable " + quoted(loop_var_));
      return unknown(x);
    }
    index->resolved = NameKind::LayerIndex;
    base->resolved = NameKind::LayerWeight;
    base->weight = w;
    const_cast<WeightDecl*>(w)->used = true;
    set_type(*base, tensor(type_of(w->type)));
    return set_type(x, tensor(type_of(w->type)));
  }

  // a + b, a * b, add(a, b), mul(a, b): f32 tensors of one shape, or a 1-D
  // operand broadcast over the rows of a 2-D one.
  ExprType check_elementwise(Expr& e, BinaryOp op, const ExprType& l, const ExprType& r) {
    if (l.kind == ValueKind::Unknown || r.kind == ValueKind::Unknown) return unknown(e);
    const char* verb = op == BinaryOp::Add ? "add" : "multiply";
    if (op != BinaryOp::Add && op != BinaryOp::Mul) {
      error(e.range, "operator " + quoted(to_string(op)) + " is not defined on tensors (tensor ops: + and *)");
      return unknown(e);
    }
    if (l.kind != ValueKind::Tensor || r.kind != ValueKind::Tensor) {
      error(e.range, std::string("cannot ") + verb + " a tensor and a scalar");
      return unknown(e);
    }
    if (l.tensor.dtype != DType::F32 || r.tensor.dtype != DType::F32) {
      error(e.range, std::string("cannot ") + verb + " " + to_string(l.tensor) + " and " + to_string(r.tensor) +
                         ": both must be f32");
      return unknown(e);
    }
    const TensorType& a = l.tensor;
    const TensorType& b = r.tensor;
    if (a.dims.size() == b.dims.size()) {
      if (same_type(a, b)) return set_type(e, l);
    } else if (a.dims.size() == 2 && b.dims.size() == 1) {
      if (same_dim(a.dims[1], b.dims[0])) return set_type(e, l);
    } else if (a.dims.size() == 1 && b.dims.size() == 2) {
      if (same_dim(a.dims[0], b.dims[1])) return set_type(e, r);
    }
    error(e.range, std::string("cannot ") + verb + " " + to_string(a) + " and " + to_string(b) + ": shapes do not match");
    return unknown(e);
  }

  const ExprType* arg(const CallExpr& c, std::string_view name) {
    const Expr* e = c.find(name);
    return e ? &e->type : nullptr;
  }

  // Requires a 2-D f32 activation.
  bool need_activation(const CallExpr& c, const char* param) {
    const Expr* e = c.find(param);
    const TensorType& t = e->type.tensor;
    if (t.dtype != DType::F32 || t.dims.size() != 2) {
      error(e->range, quoted(c.callee) + " needs an f32 [rows, columns] tensor for " + quoted(param) + ", found " +
                          to_string(t));
      return false;
    }
    return true;
  }

  // `dim` (a value of the tensor type) must equal the scalar product a * b.
  bool need_product(const CallExpr& c, const Expr& tensor_arg, const Dim& dim, const char* a, const char* b,
                    const char* what) {
    const Expr* ea = c.find(a);
    const Expr* eb = c.find(b);
    if (!ea) ea = c.find("heads");  // kv_heads defaults to heads
    if (!ea || !eb) return true;
    if (ea->type.kind == ValueKind::Unknown || eb->type.kind == ValueKind::Unknown) return true;
    std::string product_text = to_string(*ea) + " * " + to_string(*eb);
    bool equal = dims_.equal_to_product(dim, *ea, *eb);
    if (!equal) {
      error(tensor_arg.range, quoted(c.callee) + ": the " + what + " " + to_string(dim) + " of " +
                                  to_string(tensor_arg.type.tensor) + " is not " + a + " * " + b + " (" + product_text + ")");
    }
    return equal;
  }

  ExprType check_op(CallExpr& c) {
    const Signature* sig = find_signature(c.builtin);
    if (!bind_arguments(c, *sig)) {
      for (const Argument& a : c.args) mark_weights_used(*a.value);  // unchecked, but not "unused"
      return unknown(c);
    }
    // Type every argument first; each kind has its own rule. A bad scalar
    // argument does not stop the result type (the shapes are still known).
    bool ok = true;
    for (Argument& a : c.args) {
      const ArgSpec& spec = *std::find_if(sig->args.begin(), sig->args.end(),
                                          [&](const ArgSpec& s) { return a.param == s.name; });
      if (spec.kind == ArgKind::Mode) {
        auto* n = dyn_cast<NameExpr>(a.value.get());
        if (!n || (n->name != "neox" && n->name != "normal")) {
          error(a.value->range, "argument 'mode' of " + quoted(c.callee) + " must be neox or normal, found " +
                                    quoted(to_string(*a.value)));
          continue;
        }
      }
      ExprType t = check_tensor(*a.value);
      bool is_tensor_arg = spec.kind == ArgKind::Tensor || spec.kind == ArgKind::Weight;
      if (t.kind == ValueKind::Unknown) {
        if (is_tensor_arg) ok = false;  // a bad scalar argument does not hide the result type
        continue;
      }
      switch (spec.kind) {
        case ArgKind::Weight: {
          bool is_weight = false;
          if (auto* n = dyn_cast<NameExpr>(a.value.get())) is_weight = n->resolved == NameKind::Weight;
          if (a.value->kind == Expr::Kind::Index) is_weight = true;
          if (!is_weight) {
            error(a.value->range, "argument " + quoted(a.param) + " of " + quoted(c.callee) + " must be a weight, found " +
                                      (t.kind == ValueKind::Tensor ? "a computed " + to_string(t) + " value" : "a " + to_string(t)));
            ok = false;
          }
          break;
        }
        case ArgKind::Tensor:
          if (t.kind != ValueKind::Tensor) {
            error(a.value->range, "argument " + quoted(a.param) + " of " + quoted(c.callee) + " must be a tensor, found " +
                                      (t.kind == ValueKind::Mode ? std::string("a rope mode") : "a scalar " + to_string(t)));
            ok = false;
          }
          break;
        case ArgKind::Int:
        case ArgKind::Float:
          if (t.kind != ValueKind::Int && (spec.kind == ArgKind::Int || t.kind != ValueKind::Float)) {
            error(a.value->range, "argument " + quoted(a.param) + " of " + quoted(c.callee) + " must be " +
                                      (spec.kind == ArgKind::Int ? "an int" : "a number") + ", found " +
                                      (t.kind == ValueKind::Mode ? std::string("a rope mode") : to_string(t)));
            a.value->type = ExprType{};
          }
          break;
        case ArgKind::Mode:
          if (t.kind != ValueKind::Mode) {
            error(a.value->range, "argument 'mode' of " + quoted(c.callee) + " must be neox or normal");
            a.value->type = ExprType{};
          }
          break;
      }
    }
    if (!ok) return unknown(c);
    return set_type(c, op_result(c));
  }

  // The result type of a tensor op whose arguments are bound and typed.
  ExprType op_result(CallExpr& c) {
    auto T = [&](const char* name) -> const TensorType& { return c.find(name)->type.tensor; };
    switch (c.builtin) {
      case Builtin::Embed: {
        const TensorType& table = T("table");
        const TensorType& ids = T("tokens");
        if (table.dims.size() != 2) {
          error(c.find("table")->range, "embed needs a 2-D table, found " + to_string(table));
          return ExprType{};
        }
        if (ids.dtype != DType::I32 || ids.dims.size() != 1) {
          error(c.find("tokens")->range, "embed needs i32 token ids [N], found " + to_string(ids));
          return ExprType{};
        }
        return tensor({DType::F32, {ids.dims[0], table.dims[1]}});
      }
      case Builtin::RmsNorm: {
        if (!need_activation(c, "x")) return ExprType{};
        const TensorType& x = T("x");
        const TensorType& w = T("weight");
        if (w.dtype != DType::F32 || w.dims.size() != 1 || !same_dim(w.dims[0], x.dims[1])) {
          error(c.find("weight")->range, "rms_norm weight must be f32[" + to_string(x.dims[1]) + "] to match " +
                                             to_string(x) + ", found " + to_string(w));
          return ExprType{};
        }
        return tensor(x);
      }
      case Builtin::MatMul: {
        if (!need_activation(c, "x")) return ExprType{};
        const TensorType& x = T("x");
        const TensorType& w = T("w");
        if (w.dims.size() != 2) {
          error(c.find("w")->range, "matmul needs a 2-D weight [rows, row_length], found " + to_string(w));
          return ExprType{};
        }
        if (!same_dim(x.dims[1], w.dims[1])) {
          error(c.range, "matmul shapes do not match: " + to_string(x) + " times " + to_string(w) + " (row length " +
                             to_string(x.dims[1]) + " vs " + to_string(w.dims[1]) + ")");
          return ExprType{};
        }
        return tensor({DType::F32, {x.dims[0], w.dims[0]}});
      }
      case Builtin::Add:
      case Builtin::Mul:
        return check_elementwise(c, c.builtin == Builtin::Add ? BinaryOp::Add : BinaryOp::Mul, c.find("a")->type,
                                 c.find("b")->type);
      case Builtin::Silu:
      case Builtin::Softmax:
        if (!need_activation(c, "x")) return ExprType{};
        return tensor(T("x"));
      case Builtin::Last: {
        if (!need_activation(c, "x")) return ExprType{};
        return tensor({DType::F32, {Dim{nullptr, 1}, T("x").dims[1]}});
      }
      case Builtin::Rope: {
        if (!need_activation(c, "x")) return ExprType{};
        if (!need_product(c, *c.find("x"), T("x").dims[1], "heads", "dim", "row length")) return ExprType{};
        // Rope rotates pairs of elements within each head.
        IntLiteral two(c.range, 2);
        two.type.kind = ValueKind::Int;
        if (!dims_.divides(two, *c.find("dim"))) {
          error(c.find("dim")->range, "'rope' needs an even dim: add a check that " + to_string(*c.find("dim")) +
                                          " % 2 == 0");
          return ExprType{};
        }
        return tensor(T("x"));
      }
      case Builtin::Attention: {
        if (!need_activation(c, "q") || !need_activation(c, "k") || !need_activation(c, "v")) return ExprType{};
        const TensorType& q = T("q");
        const TensorType& k = T("k");
        const TensorType& v = T("v");
        if (!same_dim(q.dims[0], k.dims[0]) || !same_dim(q.dims[0], v.dims[0])) {
          error(c.range, "attention needs q, k and v with the same rows, found " + to_string(q) + ", " + to_string(k) +
                             " and " + to_string(v));
          return ExprType{};
        }
        if (!need_product(c, *c.find("q"), q.dims[1], "heads", "dim", "row length")) return ExprType{};
        if (!need_product(c, *c.find("k"), k.dims[1], "kv_heads", "dim", "row length")) return ExprType{};
        if (const Expr* kv_heads = c.find("kv_heads"); kv_heads && !dims_.divides(*kv_heads, *c.find("heads"))) {
          error(kv_heads->range, "'attention' needs heads to be a multiple of kv_heads: add a check that " +
                                     to_string(*c.find("heads")) + " % " + to_string(*kv_heads) + " == 0");
          return ExprType{};
        }
        if (!same_dim(k.dims[1], v.dims[1])) {
          error(c.find("v")->range, "attention needs k and v of the same shape, found " + to_string(k) + " and " +
                                        to_string(v));
          return ExprType{};
        }
        return tensor(q);
      }
      default: return ExprType{};
    }
  }

  void warn_unused_weights() {
    auto warn = [&](const WeightDecl& w) {
      if (!w.used) diags_.warning(w.name_range, "weight " + quoted(w.name) + " is declared but never used");
    };
    if (!m_.forward) return;  // already an error; every weight would be unused
    for (auto& w : m_.weights) warn(*w);
    if (m_.layer_weights) {
      for (auto& w : m_.layer_weights->weights) warn(*w);
    }
  }

  Module& m_;
  DiagnosticEngine& diags_;
  DimOracle dims_;
  std::map<std::string, SourceRange> names_;     // top-level names and their definitions
  std::unordered_map<std::string, const ParamDecl*> params_by_name_;
  std::unordered_map<std::string, const WeightDecl*> weights_by_name_;
  std::unordered_map<std::string, const InputDecl*> inputs_by_name_;
  std::set<const ParamDecl*> defined_params_;    // params checked so far (in source order)
  std::map<std::string, LocalInfo> locals_;      // forward values in scope
  std::set<std::string> loop_only_;              // values that went out of scope at the loop end
  bool in_loop_ = false;
  bool seen_loop_ = false;
  std::string loop_var_;
};

}  // namespace

bool check(Module& module, DiagnosticEngine& diags) { return Sema(module, diags).run(); }

}  // namespace lumen::dsl
