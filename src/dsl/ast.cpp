// AST helpers: names of enums, lookups, the source-form printer used in
// diagnostics ("f32[N, n_embd]") and the indented dump used by tests.
#include "lumen/dsl/ast.h"
#include "lumen/common/quote.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace lumen::dsl::ast {

std::string dtype_names(bool (*pick)(const ops::DTypeRow&)) {
  std::vector<const char*> names;
  for (const ops::DTypeRow& r : ops::kDTypes)
    if (pick(r)) names.push_back(r.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return s;
}

const char* to_string(ScalarType t) { return t == ScalarType::Int ? "int" : "float"; }

const char* to_string(UnaryOp op) { return op == UnaryOp::Neg ? "-" : "!"; }

const char* to_string(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "+";
    case BinaryOp::Sub: return "-";
    case BinaryOp::Mul: return "*";
    case BinaryOp::Div: return "/";
    case BinaryOp::Mod: return "%";
    case BinaryOp::Eq: return "==";
    case BinaryOp::Ne: return "!=";
    case BinaryOp::Lt: return "<";
    case BinaryOp::Le: return "<=";
    case BinaryOp::Gt: return ">";
    case BinaryOp::Ge: return ">=";
    case BinaryOp::And: return "&&";
    case BinaryOp::Or: return "||";
  }
  return "?";
}

namespace {
constexpr const char* kScalarFnNames[] = {"key", "len", "sqrt", "min", "max"};
static_assert(std::size(kScalarFnNames) == static_cast<size_t>(ScalarFn::Max) + 1, "one name per scalar function");
}  // namespace

const char* to_string(ScalarFn f) { return kScalarFnNames[static_cast<size_t>(f)]; }

std::optional<ScalarFn> scalar_fn_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kScalarFnNames); ++i)
    if (name == kScalarFnNames[i]) return static_cast<ScalarFn>(i);
  return std::nullopt;
}

std::optional<ops::OpId> dsl_op_from_name(std::string_view name) {
  std::optional<ops::OpId> op = ops::parse_op(name);
  if (op && ops::row(*op).in_dsl) return op;
  return std::nullopt;
}

bool is_builtin(std::string_view name) { return dsl_op_from_name(name) || scalar_fn_from_name(name); }

const Expr* CallExpr::find(std::string_view param) const {
  for (const Argument& a : args) {
    if (a.param == param) return a.value.get();
  }
  return nullptr;
}

const ParamDecl* Module::find_param(std::string_view name) const {
  for (const auto& p : params) {
    if (p->name == name) return p.get();
  }
  return nullptr;
}

const WeightDecl* Module::find_weight(std::string_view name) const {
  for (const auto& w : weights) {
    if (w->name == name) return w.get();
  }
  if (layer_weights) {
    for (const auto& w : layer_weights->weights) {
      if (w->name == name) return w.get();
    }
  }
  return nullptr;
}

// ------------------------------------------------------------- printing

namespace {

// Binding strength, higher binds tighter (matches the parser).
int precedence(const Expr& e) {
  if (auto* b = dyn_cast<BinaryExpr>(&e)) {
    switch (b->op) {
      case BinaryOp::Or: return 1;
      case BinaryOp::And: return 2;
      case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt:
      case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge: return 3;
      case BinaryOp::Add: case BinaryOp::Sub: return 4;
      case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Mod: return 5;
    }
  }
  if (e.kind == Expr::Kind::Unary) return 6;
  return 7;
}

std::string float_text(double v) {
  // Shortest form that reads back to the same double, without an exponent
  // for ordinary magnitudes (10000.0 rather than 1e+04).
  int first = 1;
  if (std::isfinite(v) && std::fabs(v) >= 1.0 && std::fabs(v) < 1e16) {
    first = static_cast<int>(std::floor(std::log10(std::fabs(v)))) + 1;
  }
  char buf[64];
  for (int digits = first; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a float literal
  return s;
}

}  // namespace

std::string to_string(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::IntLiteral: return std::to_string(static_cast<const IntLiteral&>(e).value);
    case Expr::Kind::FloatLiteral: return float_text(static_cast<const FloatLiteral&>(e).value);
    case Expr::Kind::StringLiteral: return quote(static_cast<const StringLiteral&>(e).value);
    case Expr::Kind::Name: return static_cast<const NameExpr&>(e).name;
    case Expr::Kind::Unary: {
      auto& u = static_cast<const UnaryExpr&>(e);
      std::string inner = to_string(*u.operand);
      if (precedence(*u.operand) < precedence(e)) inner = "(" + inner + ")";
      return to_string(u.op) + inner;
    }
    case Expr::Kind::Binary: {
      auto& b = static_cast<const BinaryExpr&>(e);
      std::string lhs = to_string(*b.lhs), rhs = to_string(*b.rhs);
      // Left-associative: the right operand needs parentheses at equal precedence.
      if (precedence(*b.lhs) < precedence(e)) lhs = "(" + lhs + ")";
      if (precedence(*b.rhs) <= precedence(e)) rhs = "(" + rhs + ")";
      return lhs + " " + to_string(b.op) + " " + rhs;
    }
    case Expr::Kind::Call: {
      auto& c = static_cast<const CallExpr&>(e);
      std::string s = c.callee + "(";
      for (size_t i = 0; i < c.args.size(); ++i) {
        if (i > 0) s += ", ";
        if (!c.args[i].keyword.empty()) s += c.args[i].keyword + " = ";
        s += to_string(*c.args[i].value);
      }
      return s + ")";
    }
    case Expr::Kind::Index: {
      auto& x = static_cast<const IndexExpr&>(e);
      return to_string(*x.base) + "[" + to_string(*x.index) + "]";
    }
  }
  return "?";
}

std::string to_string(const Dim& d) {
  if (d.expr) return to_string(*d.expr);
  return d.derived ? d.derived->text() : std::to_string(d.constant);
}

std::optional<ops::Dim> to_dim(const Expr& e, const Expr** bad) {
  auto sub = [&](const Expr& x) { return to_dim(x, bad); };
  switch (e.kind) {
    case Expr::Kind::IntLiteral: return ops::Dim::constant(static_cast<const IntLiteral&>(e).value);
    case Expr::Kind::Name: {
      auto& n = static_cast<const NameExpr&>(e);
      if (n.resolved == NameKind::TokenCount) return ops::Dim::tokens();
      if (n.resolved == NameKind::Param && n.param && n.param->type == ScalarType::Int)
        return ops::Dim::param(n.param->name);
      break;
    }
    case Expr::Kind::Unary: {
      auto& u = static_cast<const UnaryExpr&>(e);
      if (u.op != UnaryOp::Neg) break;
      auto x = sub(*u.operand);
      if (!x) return std::nullopt;
      return ops::Dim::constant(0) - *x;
    }
    case Expr::Kind::Binary: {
      auto& b = static_cast<const BinaryExpr&>(e);
      ops::Dim::Kind op;
      switch (b.op) {
        case BinaryOp::Add: op = ops::Dim::Kind::Add; break;
        case BinaryOp::Sub: op = ops::Dim::Kind::Sub; break;
        case BinaryOp::Mul: op = ops::Dim::Kind::Mul; break;
        case BinaryOp::Div: op = ops::Dim::Kind::Div; break;
        case BinaryOp::Mod: op = ops::Dim::Kind::Mod; break;
        default: op = ops::Dim::Kind::Const; break;
      }
      if (op == ops::Dim::Kind::Const) break;
      auto l = sub(*b.lhs);
      if (!l) return std::nullopt;
      auto r = sub(*b.rhs);
      if (!r) return std::nullopt;
      return ops::Dim::binary(op, *l, *r);
    }
    case Expr::Kind::Call: {
      auto& c = static_cast<const CallExpr&>(e);
      if ((c.fn != ScalarFn::Min && c.fn != ScalarFn::Max) || c.args.size() != 2) break;
      auto a = sub(*c.args[0].value);
      if (!a) return std::nullopt;
      auto b = sub(*c.args[1].value);
      if (!b) return std::nullopt;
      return c.fn == ScalarFn::Min ? ops::min(*a, *b) : ops::max(*a, *b);
    }
    default: break;
  }
  if (bad) *bad = &e;
  return std::nullopt;
}

std::string to_string(const TensorType& t) {
  std::string s = std::string(to_string(t.dtype)) + "[";
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += to_string(t.dims[i]);
  }
  return s + "]";
}

std::string to_string(const ExprType& t) {
  switch (t.kind) {
    case ValueKind::Unknown: return "?";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Bool: return "bool";
    case ValueKind::String: return "string";
    case ValueKind::Tensor: return to_string(t.tensor);
    case ValueKind::Mode: return "mode";
  }
  return "?";
}

namespace {

std::string type_text(const TypeExpr& t) {
  std::string s = std::string(to_string(t.dtype)) + "[";
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (i > 0) s += ", ";
    s += to_string(*t.dims[i]);
  }
  return s + "]";
}

std::string loc_text(const SourceRange& r) {
  return std::to_string(r.begin.line) + ":" + std::to_string(r.begin.col);
}

std::string typed(const Expr& e) {
  std::string s = to_string(e);
  if (e.type.kind != ValueKind::Unknown) s += " : " + to_string(e.type);
  return s;
}

void dump_weight(std::string& out, const WeightDecl& w, const std::string& indent) {
  out += indent + "weight " + w.name + " : " + type_text(w.type) + " = " + quote(w.gguf_name);
  if (w.fallback) out += " else " + quote(*w.fallback);
  if (w.optional) out += " optional";
  out += " @" + loc_text(w.range) + "\n";
}

void dump_stmts(std::string& out, const std::vector<StmtPtr>& body, const std::string& indent) {
  for (const StmtPtr& s : body) {
    if (auto* a = dyn_cast<AssignStmt>(s.get())) {
      out += indent + a->name + (a->loop_carried ? " (carried)" : "") + " = " + typed(*a->value) + " @" +
             loc_text(a->range) + "\n";
    } else if (auto* f = dyn_cast<ForStmt>(s.get())) {
      out += indent + "for " + f->var + " in " + f->range_name + " @" + loc_text(f->range) + "\n";
      dump_stmts(out, f->body, indent + "  ");
    } else if (auto* r = dyn_cast<ReturnStmt>(s.get())) {
      out += indent + "return " + typed(*r->value) + " @" + loc_text(r->range) + "\n";
    }
  }
}

}  // namespace

std::string dump(const Module& m) {
  std::string out = "model " + m.arch + " @" + loc_text(m.arch_range) + "\n";
  for (const auto& p : m.params) {
    out += "  ";
    switch (p->source) {
      case ParamDecl::Source::Key:
        out += "param " + p->name + " : " + to_string(p->type) + " = key(" + quote(p->key);
        if (p->default_value) out += ", default = " + to_string(*p->default_value);
        out += ")";
        break;
      case ParamDecl::Source::ArrayLength:
        out += "param " + p->name + " : " + to_string(p->type) + " = len(" + quote(p->key) + ")";
        break;
      case ParamDecl::Source::Derived:
        out += "let " + p->name + " : " + to_string(p->type) + " = " + to_string(*p->value);
        break;
    }
    out += " @" + loc_text(p->range) + "\n";
  }
  for (const auto& c : m.checks) {
    out += "  check " + to_string(*c->condition) + " : " + quote(c->message) + " @" + loc_text(c->range) + "\n";
  }
  for (const auto& w : m.weights) dump_weight(out, *w, "  ");
  if (m.layer_weights) {
    out += "  layer weights (" + m.layer_weights->index_name + " in " + to_string(*m.layer_weights->count) + ") @" +
           loc_text(m.layer_weights->range) + "\n";
    for (const auto& w : m.layer_weights->weights) dump_weight(out, *w, "    ");
  }
  if (m.forward) {
    out += "  forward(";
    for (size_t i = 0; i < m.forward->inputs.size(); ++i) {
      if (i > 0) out += ", ";
      out += m.forward->inputs[i]->name + " : " + type_text(m.forward->inputs[i]->type);
    }
    out += ") -> " + type_text(m.forward->result) + " @" + loc_text(m.forward->range) + "\n";
    dump_stmts(out, m.forward->body, "    ");
  }
  return out;
}

}  // namespace lumen::dsl::ast
