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

#include "lumen/common/quote.h"
#include "lumen/ops/op_table.h"

namespace lumen::dsl {

using namespace ast;

namespace {

// ------------------------------------------------------------- builtins

enum class ArgKind {
  Tensor,  // an f32 (or i32 tokens) tensor value
  Weight,  // a weight reference: `w` or `w[l]`
  Int,     // an int scalar
  Float,   // a float scalar (ints are accepted)
  Choice,  // a bare name from the attribute's choices (rope's neox | normal)
};

struct ArgSpec {
  const char* name;
  ArgKind kind;
  bool required;
  const ops::AttrSpec* attr = nullptr;  // Choice: its choices
};

struct Signature {
  std::optional<ops::OpId> op_id;  // a tensor op,
  std::optional<ScalarFn> fn;      // or a scalar function
  std::vector<ArgSpec> args;
  const ops::OpInfo* op = nullptr;  // tensor ops: their entry of the op table
};

// Tensor ops take their signature from the op table: operands, then the
// attributes the DSL writes, in table order. Scalar functions are sema's own.
const std::vector<Signature>& signatures() {
  static const std::vector<Signature> table = [] {
    std::vector<Signature> out;
    for (const ops::OpInfo& op : ops::op_table()) {
      if (!op.in_dsl) continue;
      Signature sig{op.id, std::nullopt, {}, &op};
      auto operand = [](const ops::OperandSpec& o) {
        return ArgSpec{o.name, o.role == ops::Role::Weight ? ArgKind::Weight : ArgKind::Tensor, !o.optional};
      };
      for (const ops::OperandSpec& o : op.operands)
        if (!o.optional) sig.args.push_back(operand(o));
      for (const ops::AttrSpec& a : op.attrs) {
        if (a.internal) continue;
        ArgKind k = a.kind == ops::AttrKind::Size ? ArgKind::Int
                    : a.kind == ops::AttrKind::Scalar ? ArgKind::Float
                                                      : ArgKind::Choice;
        sig.args.push_back({a.name, k, a.required, &a});
      }
      // An optional operand comes last (rope's freqs): positional arguments keep their places.
      for (const ops::OperandSpec& o : op.operands)
        if (o.optional) sig.args.push_back(operand(o));
      out.push_back(std::move(sig));
    }
    out.push_back({std::nullopt, ScalarFn::Sqrt, {{"x", ArgKind::Float, true}}});
    out.push_back({std::nullopt, ScalarFn::Min, {{"a", ArgKind::Float, true}, {"b", ArgKind::Float, true}}});
    out.push_back({std::nullopt, ScalarFn::Max, {{"a", ArgKind::Float, true}, {"b", ArgKind::Float, true}}});
    return out;
  }();
  return table;
}

const Signature* find_signature(const CallExpr& c) {
  if (!c.op && !c.fn) return nullptr;
  for (const Signature& s : signatures()) {
    if (c.op ? s.op_id == c.op : s.fn == c.fn) return &s;
  }
  return nullptr;
}

bool is_tensor_op(const CallExpr& c) { return c.op.has_value(); }

bool is_reserved(std::string_view name) {
  static const char* const kReserved[] = {"N", "layers", "neox", "normal", "model", "param", "let", "check",
                                          "weight", "layer", "weights", "forward", "for", "in", "return",
                                          "else", "int", "float"};
  for (const char* r : kReserved) {
    if (name == r) return true;
  }
  if (std::optional<DType> d = ops::parse_dtype(name); d && ops::row(*d).in_dsl) return true;
  return is_builtin(name);
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
    collect_facts();
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
          if (k == ValueKind::Int) let_dims_.emplace(p->name, sym(*p->value));
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

  // ------------------------------------------------- symbolic dims

  // An int expression as a size (ops/dim.h). Anything else (an erroneous or
  // float expression) is a param named by its source text, which no int
  // param can be: equal only to itself, and messages show the source.
  static ops::Dim size_of(const Expr& e) {
    if (auto d = to_dim(e)) return *d;
    return ops::Dim::param(to_string(e));
  }
  // Its canonical form (ops/sym_dim.h), lets replaced by their definitions.
  ops::SymDim sym(const Expr& e) const { return ops::SymDim::of(size_of(e), let_dims_); }
  ops::ShapeDim shape_dim(const Expr& e) const {
    ops::Dim d = size_of(e);
    return {d, ops::SymDim::of(d, let_dims_)};
  }

  ops::ShapeDim shape_dim(const Dim& d) const {
    if (!d.expr && d.derived) return *d.derived;
    if (!d.expr) return ops::ShapeDim::of(d.constant);
    return shape_dim(*d.expr);
  }

  ops::TensorType op_type(const TensorType& t) const {
    ops::TensorType out;
    out.dtype = t.dtype;
    for (const Dim& d : t.dims) out.shape.push_back(shape_dim(d));
    return out;
  }

  // The relations the checks establish: `a % b == 0` (b divides a), `a == b`.
  void collect_facts() {
    for (auto& c : m_.checks) {
      if (c->condition->type.kind == ValueKind::Bool) add_facts(*c->condition);
    }
  }

  void add_facts(const Expr& e) {
    auto* b = dyn_cast<BinaryExpr>(&e);
    if (!b) return;
    if (b->op == BinaryOp::And) {
      add_facts(*b->lhs);
      add_facts(*b->rhs);
      return;
    }
    if (b->op != BinaryOp::Eq || b->lhs->type.kind != ValueKind::Int || b->rhs->type.kind != ValueKind::Int) return;
    auto is_zero = [](const Expr& x) {
      auto* lit = dyn_cast<IntLiteral>(&x);
      return lit && lit->value == 0;
    };
    const Expr* mod = is_zero(*b->rhs) ? b->lhs.get() : is_zero(*b->lhs) ? b->rhs.get() : nullptr;
    if (auto* m = mod ? dyn_cast<BinaryExpr>(mod) : nullptr; m && m->op == BinaryOp::Mod) {
      facts_.assume_divides(sym(*m->rhs), sym(*m->lhs));
      return;
    }
    facts_.assume_equal(sym(*b->lhs), sym(*b->rhs));
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
    // `any`: the file's type, bound per tensor when compiled for a file.
    if (!ops::row(w.type.dtype).weight && w.type.dtype != DType::Any)
      error(w.type.dtype_range, "weights must be any or " +
                                    dtype_names([](const ops::DTypeRow& r) { return r.weight && r.in_dsl; }));
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
    if (c.fn == ScalarFn::Key || c.fn == ScalarFn::Len) {
      error(c.callee_range, c.callee + "() binds a param: write 'param NAME : TYPE = " + c.callee + "(\"...\")'");
      return set(c, ValueKind::Unknown);
    }
    if (is_tensor_op(c)) {
      error(c.callee_range, quoted(c.callee) + " is a tensor op; it is not allowed in " + ctx.what);
      return set(c, ValueKind::Unknown);
    }
    const Signature* sig = find_signature(c);
    if (!sig) {
      std::string hint;
      size_t best = 3;
      auto consider = [&](const char* name) {
        if (size_t d = edit_distance(c.callee, name); d < best) {
          best = d;
          hint = std::string("; did you mean '") + name + "'?";
        }
      };
      for (const ops::OpRow& op : ops::kOps)
        if (op.in_dsl) consider(op.name);
      for (ScalarFn f : {ScalarFn::Key, ScalarFn::Len, ScalarFn::Sqrt, ScalarFn::Min, ScalarFn::Max}) consider(to_string(f));
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
    if (c.fn == ScalarFn::Sqrt) return set(c, ValueKind::Float);
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
    for (auto& d : t.dims) r.dims.push_back(Dim{d.get(), 0, nullptr});
    return r;
  }

  bool same_dim(const Dim& a, const Dim& b) const { return facts_.equal(shape_dim(a).sym, shape_dim(b).sym); }

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
        if (is_tensor_op(c)) return check_op(c);
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

  // Whether `e` names a weight (`w` or `w[l]`), for the table's operand roles.
  static bool is_weight_arg(const Expr& e) {
    if (auto* n = dyn_cast<NameExpr>(&e)) return n->resolved == NameKind::Weight || n->resolved == NameKind::LayerWeight;
    return e.kind == Expr::Kind::Index;
  }

  // Runs the op table's rule; reports its complaint at the argument it names
  // (or at `at`). `args[i]` is the expression of operand i.
  ExprType apply_rule(Expr& at, const ops::OpInfo& op, const std::vector<const Expr*>& args,
                      const std::map<std::string, const Expr*>& attr_args, bool quiet) {
    ops::OpCall call;
    call.facts = &facts_;
    for (const Expr* a : args) {
      call.operands.push_back(op_type(a->type.tensor));
      call.is_weight.push_back(is_weight_arg(*a));
    }
    for (const auto& [name, e] : attr_args) {
      const ops::AttrSpec* spec = ops::find_attr(op, name);
      if (!spec) continue;
      if (spec->kind == ops::AttrKind::Size) call.sizes[name] = shape_dim(*e);
      if (spec->kind == ops::AttrKind::Choice) call.choices[name] = to_string(*e);
    }
    ops::Verdict v = ops::infer(op, call);
    if (v.ok()) {
      TensorType t;
      t.dtype = v.result->dtype;
      // Result dims are operand dims or attribute products: find the AST
      // expression each came from so that later messages print source text.
      for (const ops::ShapeDim& d : v.result->shape) t.dims.push_back(dim_for(d, args, attr_args));
      return set_type(at, tensor(std::move(t)));
    }
    if (!quiet) {
      SourceRange where = at.range;
      if (v.operand >= 0 && static_cast<size_t>(v.operand) < args.size()) where = args[static_cast<size_t>(v.operand)]->range;
      if (auto it = attr_args.find(v.attr); !v.attr.empty() && it != attr_args.end()) where = it->second->range;
      error(where, v.message);
    }
    return unknown(at);
  }

  // The AST dim of an operand or attribute that is the size `d` (so that
  // later messages print source text); else a constant, else `d` itself.
  Dim dim_for(const ops::ShapeDim& d, const std::vector<const Expr*>& args,
              const std::map<std::string, const Expr*>& attr_args) const {
    for (const Expr* a : args)
      for (const Dim& x : a->type.tensor.dims)
        if (shape_dim(x).dim == d.dim) return x;
    for (const auto& [name, e] : attr_args)
      if (size_of(*e) == d.dim) return Dim{e, 0, nullptr};
    if (d.dim.is_constant()) return Dim{nullptr, d.dim.value(), nullptr};
    return Dim{nullptr, 0, std::make_shared<const ops::ShapeDim>(d)};
  }

  // a + b, a * b: the table's add and mul (f32 tensors of one shape, or a
  // weight row broadcast over the rows of an activation).
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
    auto& b = static_cast<BinaryExpr&>(e);
    return apply_rule(e, ops::op_info(op == BinaryOp::Add ? ops::OpId::Add : ops::OpId::Mul), {b.lhs.get(), b.rhs.get()}, {}, false);
  }

  ExprType check_op(CallExpr& c) {
    const Signature* sig = find_signature(c);
    if (!bind_arguments(c, *sig)) {
      for (const Argument& a : c.args) mark_weights_used(*a.value);  // unchecked, but not "unused"
      return unknown(c);
    }
    // Type every argument first; each kind has its own rule. A bad scalar
    // argument does not stop the operands' checks, but silences the op's
    // rule (it would only repeat the error).
    bool ok = true, scalars_ok = true;
    for (Argument& a : c.args) {
      const ArgSpec& spec = *std::find_if(sig->args.begin(), sig->args.end(),
                                          [&](const ArgSpec& s) { return a.param == s.name; });
      if (spec.kind == ArgKind::Choice) {
        auto* n = dyn_cast<NameExpr>(a.value.get());
        const auto& choices = spec.attr->choices;
        if (!n || std::find(choices.begin(), choices.end(), n->name) == choices.end()) {
          std::string list;
          for (const auto& ch : choices) list += (list.empty() ? "" : " or ") + ch;
          error(a.value->range, "argument " + quoted(a.param) + " of " + quoted(c.callee) + " must be " + list +
                                    ", found " + quoted(to_string(*a.value)));
          scalars_ok = false;
          continue;
        }
        n->resolved = NameKind::Mode;
        ExprType mode;
        mode.kind = ValueKind::Mode;
        set_type(*n, mode);
        continue;
      }
      ExprType t = check_tensor(*a.value);
      bool is_tensor_arg = spec.kind == ArgKind::Tensor || spec.kind == ArgKind::Weight;
      if (t.kind == ValueKind::Unknown) {
        if (is_tensor_arg) ok = false;
        else scalars_ok = false;
        continue;
      }
      switch (spec.kind) {
        case ArgKind::Weight: {
          if (!is_weight_arg(*a.value)) {
            error(a.value->range, "argument " + quoted(a.param) + " of " + quoted(c.callee) + " must be a weight, found " +
                                      (t.kind == ValueKind::Tensor ? "a computed " + to_string(t) + " value" : "a " + to_string(t)));
            ok = false;
          } else if (t.kind != ValueKind::Tensor) {
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
            scalars_ok = false;
          }
          break;
        case ArgKind::Choice: break;
      }
    }
    if (!ok) return unknown(c);
    std::vector<const Expr*> operands;
    std::map<std::string, const Expr*> attrs;
    for (const ops::OperandSpec& o : sig->op->operands)
      if (const Expr* e = c.find(o.name); e || !o.optional) operands.push_back(e);  // an absent optional one is left out
    for (const ops::AttrSpec& a : sig->op->attrs)
      if (const Expr* e = c.find(a.name)) attrs[a.name] = e;
    ExprType t = apply_rule(c, *sig->op, operands, attrs, !scalars_ok);
    if (t.kind != ValueKind::Unknown && sig->op->per_layer_state) {
      if (!in_loop_) {
        error(c.callee_range, quoted(c.callee) + " must be inside the layer loop (it keeps state per layer)");
        return unknown(c);
      }
    }
    return t;
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
  std::map<std::string, ops::SymDim> let_dims_;       // int lets (by name) and their canonical definitions
  ops::DimFacts facts_;                                // what the checks establish
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
