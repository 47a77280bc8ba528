// The IR verifier: SSA (one definition, defined before use, loop scoping),
// references to params and weights, operand counts, attributes and the type
// rule of every op.
#include "lumen/ir/verifier.h"

#include <set>

#include "lumen/ir/text.h"

namespace lumen::ir {

namespace {

class Verifier {
 public:
  Verifier(const Module& m, bool require_types) : m_(m), f_(m.forward), require_types_(require_types) {}

  std::vector<std::string> run() {
    check_params();
    check_weights();
    defined_.assign(f_.values.size(), false);
    if (f_.tokens == kNoValue) problem("the function has no tokens argument");
    else define(f_.tokens, "the tokens argument");
    for (const auto& op : f_.pre) check_op(op, false);
    if (f_.loop) check_loop(*f_.loop);
    for (const auto& op : f_.post) check_op(op, false);
    if (f_.result == kNoValue) {
      problem("the function returns nothing");
    } else if (used(f_.result, "the return")) {
      if (f_.result_type.known && f_.type(f_.result).known && !(f_.type(f_.result) == f_.result_type))
        problem("the function returns " + f_.type(f_.result).str() + " but is declared " + f_.result_type.str());
    }
    if (m_.memory) check_memory(*m_.memory);
    return problems_;
  }

 private:
  void problem(std::string msg) { problems_.push_back(std::move(msg)); }

  // ---------------------------------------------------------- declarations
  void check_dim_names(const Dim& d, const std::string& where, const std::set<std::string>& known) {
    d.for_each_param([&](const std::string& name) {
      if (!known.count(name)) problem(where + ": unknown param '" + name + "' in `" + d.str() + "`");
    });
  }

  void check_params() {
    std::set<std::string> seen;
    for (const auto& p : m_.params) {
      std::string where = "param " + p.name;
      if (p.default_expr) check_dim_names(*p.default_expr, where, seen);
      if (p.derived) check_dim_names(*p.derived, where, seen);
      if ((p.source == Param::Source::Key || p.source == Param::Source::Length) && p.gguf_key.empty())
        problem(where + ": no metadata key");
      if (p.source == Param::Source::Derived && !p.derived) problem(where + ": no defining expression");
      if (p.source == Param::Source::Constant && !p.default_value) problem(where + ": a constant needs a value");
      if (!seen.insert(p.name).second) problem(where + ": defined twice");
    }
    params_ = seen;
    for (const auto& c : m_.checks) {
      check_dim_names(c.lhs, "check \"" + c.message + "\"", params_);
      check_dim_names(c.rhs, "check \"" + c.message + "\"", params_);
    }
  }

  void check_weights() {
    std::set<std::string> seen;
    for (const auto& w : m_.weights) {
      std::string where = "weight @" + w.name;
      if (!seen.insert(w.name).second) problem(where + ": defined twice");
      if (w.gguf_name.empty()) problem(where + ": no tensor name");
      if (w.per_layer && w.gguf_name.find("{i}") == std::string::npos)
        problem(where + ": a layer weight's tensor name needs {i}");
      if (w.shape.empty() || w.shape.size() > 2) problem(where + ": weights are 1-D or 2-D");
      for (const auto& d : w.shape) {
        check_dim_names(d, where, params_);
        if (d.uses_tokens()) problem(where + ": a weight shape cannot depend on N");
      }
    }
  }

  // ------------------------------------------------------------------ SSA
  bool valid(ValueId v) const { return v >= 0 && static_cast<size_t>(v) < f_.values.size(); }

  void define(ValueId v, const std::string& what) {
    if (!valid(v)) {
      problem(what + " defines an invalid value");
      return;
    }
    if (defined_[static_cast<size_t>(v)]) problem(what + " redefines a value");
    defined_[static_cast<size_t>(v)] = true;
  }

  bool used(ValueId v, const std::string& by) {
    if (!valid(v)) {
      problem(by + " uses an invalid value");
      return false;
    }
    if (!defined_[static_cast<size_t>(v)] || hidden_.count(v)) {
      problem(by + " uses a value before its definition (or outside the loop that defines it)");
      return false;
    }
    return true;
  }

  void check_loop(const LayerLoop& loop) {
    check_dim_names(loop.trip_count, "the layer loop", params_);
    if (loop.trip_count.uses_tokens()) problem("the layer loop count cannot depend on N");
    for (const auto& c : loop.carried) {
      used(c.init, "the layer loop");
      define(c.arg, "a loop argument");
    }
    std::vector<ValueId> body_values;
    for (const auto& c : loop.carried) body_values.push_back(c.arg);
    for (const auto& op : loop.body) {
      check_op(op, true);
      body_values.push_back(op.result);
    }
    for (const auto& c : loop.carried) {
      if (used(c.yield, "the loop yield") && valid(c.arg) && valid(c.init)) {
        const Type& arg = f_.type(c.arg);
        if (!(f_.type(c.init) == arg) || !(f_.type(c.yield) == arg))
          problem("a carried value changes type: init " + f_.type(c.init).str() + ", argument " + arg.str() +
                  ", yield " + f_.type(c.yield).str());
      }
    }
    // Body values are not visible after the loop: only its results are.
    for (ValueId v : body_values) hidden_.insert(v);
    for (const auto& c : loop.carried) {
      define(c.result, "a loop result");
      if (valid(c.result) && valid(c.arg) && !(f_.type(c.result) == f_.type(c.arg)))
        problem("a loop result's type differs from its argument's");
    }
  }

  // ------------------------------------------------------------------ ops
  std::string where(const Op& op) const {
    std::string s = to_string(op.kind);
    if (op.line) s += " (line " + std::to_string(op.line) + ")";
    return s;
  }

  void check_op(const Op& op, bool in_loop) {
    std::string at = where(op);
    for (ValueId v : op_inputs(op)) used(v, at);
    for (const auto& refs : {op.weights, op.biases}) {
      for (const auto& w : refs) {
        const Weight* decl = m_.find_weight(w.name);
        if (!decl) problem(at + ": unknown weight @" + w.name);
        else if (decl->per_layer != w.per_layer)
          problem(at + ": @" + w.name + (decl->per_layer ? " is a layer weight: write @" + w.name + "[l]"
                                                          : " is not a layer weight"));
        else if (w.per_layer && !in_loop) problem(at + ": @" + w.name + "[l] outside the layer loop");
      }
    }
    for (const auto& [key, value] : op.attrs)
      if (value.kind == Attr::Kind::Dim) check_dim_names(value.dim, at, params_);
    define(op.result, at);
    if (!valid(op.result)) return;
    const Type& result = f_.type(op.result);
    if (!result.known) {
      if (require_types_) problem(at + ": result type not inferred");
    } else {
      for (const auto& d : result.shape) check_dim_names(d, at, params_);
    }
    check_signature(op, at);
  }

  void expect_counts(const Op& op, const std::string& at, size_t operands, size_t weights) {
    if (op.operands.size() != operands)
      problem(at + ": expects " + std::to_string(operands) + " operand(s), has " + std::to_string(op.operands.size()));
    if (op.weights.size() != weights)
      problem(at + ": expects " + std::to_string(weights) + " weight(s), has " + std::to_string(op.weights.size()));
  }
  void expect_attr(const Op& op, const std::string& at, const char* name, Attr::Kind kind) {
    const Attr* a = op.attr(name);
    if (!a) problem(at + ": missing attribute " + name);
    else if (a->kind != kind) problem(at + ": attribute " + std::string(name) + " has the wrong kind");
  }
  void expect_param_attr(const Op& op, const std::string& at, const char* name) {
    expect_attr(op, at, name, Attr::Kind::Ident);
    const Attr* a = op.attr(name);
    if (a && a->kind == Attr::Kind::Ident && !m_.find_param(a->text))
      problem(at + ": attribute " + std::string(name) + " names an unknown param '" + a->text + "'");
  }

  // The type of operand i, or nullptr when unknown.
  const Type* operand(const Op& op, size_t i) const {
    if (i >= op.operands.size() || !valid(op.operands[i])) return nullptr;
    const Type& t = f_.type(op.operands[i]);
    return t.known ? &t : nullptr;
  }
  const Weight* weight(const Op& op, size_t i) const {
    return i < op.weights.size() ? m_.find_weight(op.weights[i].name) : nullptr;
  }
  void expect_result(const Op& op, const std::string& at, const Type& expected) {
    const Type& r = f_.type(op.result);
    if (r.known && !(r == expected))
      problem(at + ": result is " + r.str() + " but the operands give " + expected.str());
  }
  bool is_2d(const Type* t, DType dtype, const std::string& at, const char* what) {
    if (!t) return false;
    if (t->dtype != dtype || t->shape.size() != 2) {
      problem(at + ": " + what + " must be " + to_string(dtype) + "[rows, cols], not " + t->str());
      return false;
    }
    return true;
  }

  void check_signature(const Op& op, const std::string& at) {
    switch (op.kind) {
      case OpKind::Embed: {
        expect_counts(op, at, 1, 1);
        const Type* tokens = operand(op, 0);
        const Weight* table = weight(op, 0);
        if (tokens && (tokens->dtype != DType::I32 || tokens->shape.size() != 1))
          problem(at + ": tokens must be i32[rows], not " + tokens->str());
        else if (tokens && table && table->shape.size() == 2)
          expect_result(op, at, Type::of(DType::F32, {tokens->shape[0], table->shape[1]}));
        break;
      }
      case OpKind::RmsNorm:
      case OpKind::RmsNormQuant: {
        expect_counts(op, at, 1, 1);
        expect_param_attr(op, at, "eps");
        const Type* x = operand(op, 0);
        if (is_2d(x, DType::F32, at, "the input")) {
          check_row_weight(op, at, 0, x->shape[1]);
          expect_result(op, at, Type::of(op.kind == OpKind::RmsNorm ? DType::F32 : DType::ActQ8, x->shape));
        }
        break;
      }
      case OpKind::Quantize: {
        expect_counts(op, at, 1, 0);
        const Type* x = operand(op, 0);
        if (is_2d(x, DType::F32, at, "the input")) expect_result(op, at, Type::of(DType::ActQ8, x->shape));
        break;
      }
      case OpKind::MatMul: check_matmul(op, at); break;
      case OpKind::Rope: {
        expect_counts(op, at, 1, 0);
        expect_attr(op, at, "heads", Attr::Kind::Dim);
        expect_attr(op, at, "dim", Attr::Kind::Dim);
        expect_param_attr(op, at, "base");
        expect_attr(op, at, "mode", Attr::Kind::Ident);
        const Attr* mode = op.attr("mode");
        if (mode && mode->text != "neox" && mode->text != "normal")
          problem(at + ": mode must be neox or normal, not " + mode->text);
        const Type* x = operand(op, 0);
        if (is_2d(x, DType::F32, at, "the input")) expect_result(op, at, *x);
        break;
      }
      case OpKind::Attention: {
        expect_counts(op, at, 3, 0);
        expect_attr(op, at, "heads", Attr::Kind::Dim);
        expect_attr(op, at, "kv_heads", Attr::Kind::Dim);
        expect_attr(op, at, "dim", Attr::Kind::Dim);
        const Type* q = operand(op, 0);
        const Type* k = operand(op, 1);
        const Type* v = operand(op, 2);
        bool ok = is_2d(q, DType::F32, at, "q") & is_2d(k, DType::F32, at, "k") & is_2d(v, DType::F32, at, "v");
        if (ok && (!(k->shape == v->shape) || !(k->shape[0] == q->shape[0])))
          problem(at + ": k and v must have the same shape and as many rows as q");
        if (ok) expect_result(op, at, *q);
        break;
      }
      case OpKind::Add:
      case OpKind::Mul: {
        if (op.operands.size() + op.weights.size() != 2 || op.operands.empty()) {
          problem(at + ": expects two operands (the second may be a weight)");
          break;
        }
        const Type* a = operand(op, 0);
        if (!is_2d(a, DType::F32, at, "the first operand")) break;
        if (op.weights.size() == 1) {
          check_row_weight(op, at, 0, a->shape[1]);
        } else if (const Type* b = operand(op, 1); b && !(*b == *a)) {
          problem(at + ": operands differ: " + a->str() + " and " + b->str());
        }
        expect_result(op, at, *a);
        break;
      }
      case OpKind::Silu:
      case OpKind::Softmax: {
        expect_counts(op, at, 1, 0);
        const Type* x = operand(op, 0);
        if (is_2d(x, DType::F32, at, "the input")) expect_result(op, at, *x);
        break;
      }
      case OpKind::SiluMul: {
        expect_counts(op, at, 2, 0);
        const Type* a = operand(op, 0);
        const Type* b = operand(op, 1);
        if (is_2d(a, DType::F32, at, "gate") && b) {
          if (!(*a == *b)) problem(at + ": operands differ: " + a->str() + " and " + b->str());
          expect_result(op, at, *a);
        }
        break;
      }
      case OpKind::Last: {
        expect_counts(op, at, 1, 0);
        const Type* x = operand(op, 0);
        if (is_2d(x, DType::F32, at, "the input")) expect_result(op, at, Type::of(DType::F32, {Dim::constant(1), x->shape[1]}));
        break;
      }
      case OpKind::View: {
        expect_counts(op, at, 1, 0);
        expect_attr(op, at, "offset", Attr::Kind::Dim);
        expect_attr(op, at, "cols", Attr::Kind::Dim);
        const Type* x = operand(op, 0);
        const Attr* cols = op.attr("cols");
        if (is_2d(x, x ? x->dtype : DType::F32, at, "the input") && cols && cols->kind == Attr::Kind::Dim)
          expect_result(op, at, Type::of(x->dtype, {x->shape[0], cols->dim}));
        break;
      }
    }
    if (op.kind != OpKind::MatMul && (op.epilogue != Epilogue::None || !op.biases.empty() || op.residual != kNoValue))
      problem(at + ": only matmul has an epilogue");
  }

  // Weight `i` of `op` must be a 1-D f32 row of `cols` elements.
  void check_row_weight(const Op& op, const std::string& at, size_t i, const Dim& cols) {
    const Weight* w = weight(op, i);
    if (!w) return;
    if (w->dtype != DType::F32 || w->shape.size() != 1 || !(w->shape[0] == cols))
      problem(at + ": @" + w->name + " must be f32[" + cols.str() + "], not " + Type::of(w->dtype, w->shape).str());
  }

  void check_matmul(const Op& op, const std::string& at) {
    if (op.operands.size() != 1) problem(at + ": expects 1 operand, has " + std::to_string(op.operands.size()));
    if (op.weights.empty()) problem(at + ": expects at least one weight");
    const Type* x = operand(op, 0);
    if (x && (x->shape.size() != 2 || (x->dtype != DType::F32 && x->dtype != DType::ActQ8)))
      problem(at + ": the input must be f32 or act_q8 [rows, K], not " + x->str());
    bool has_bias = op.epilogue == Epilogue::Bias || op.epilogue == Epilogue::BiasResidual;
    bool has_residual = op.epilogue == Epilogue::Residual || op.epilogue == Epilogue::BiasResidual;
    if (has_bias != !op.biases.empty() || (has_bias && op.biases.size() != op.weights.size()))
      problem(at + ": epilogue " + to_string(op.epilogue) + " needs " + (has_bias ? "one bias per weight" : "no bias"));
    if (has_residual != (op.residual != kNoValue))
      problem(at + ": epilogue " + to_string(op.epilogue) + (has_residual ? " needs" : " takes no") + " residual");
    if (op.epilogue == Epilogue::SiluMul && op.weights.size() != 2)
      problem(at + ": epilogue silu_mul needs two weights (gate, up)");
    std::optional<Dim> rows;
    for (size_t i = 0; i < op.weights.size(); ++i) {
      const Weight* w = weight(op, i);
      if (!w) return;
      if (w->shape.size() != 2) {
        problem(at + ": @" + w->name + " is not a matrix");
        return;
      }
      if (x && x->shape.size() == 2 && !(w->shape[1] == x->shape[1]))
        problem(at + ": @" + w->name + " has rows of " + w->shape[1].str() + " elements but the input has " +
                x->shape[1].str() + " columns");
      if (has_bias && i < op.biases.size()) {
        const Weight* b = m_.find_weight(op.biases[i].name);
        if (b && (b->dtype != DType::F32 || b->shape.size() != 1 || !(b->shape[0] == w->shape[0])))
          problem(at + ": bias @" + b->name + " must be f32[" + w->shape[0].str() + "]");
      }
      if (op.epilogue == Epilogue::SiluMul) rows = w->shape[0];
      else rows = rows ? *rows + w->shape[0] : w->shape[0];
    }
    if (op.epilogue == Epilogue::SiluMul && op.weights.size() == 2 && weight(op, 0) && weight(op, 1) &&
        !(weight(op, 0)->shape == weight(op, 1)->shape))
      problem(at + ": gate and up weights differ in shape");
    if (!x || x->shape.size() != 2 || !rows) return;
    Type expected = Type::of(DType::F32, {x->shape[0], *rows});
    expect_result(op, at, expected);
    if (has_residual && valid(op.residual) && f_.type(op.residual).known && !(f_.type(op.residual) == expected))
      problem(at + ": residual is " + f_.type(op.residual).str() + ", not " + expected.str());
  }

  void check_memory(const MemoryPlan& plan) {
    std::set<ValueId> placed;
    for (const auto& b : plan.buffers) {
      for (ValueId v : b.values) {
        if (!valid(v)) problem("memory: a buffer holds an invalid value");
        else if (!placed.insert(v).second) problem("memory: a value is in two buffers");
      }
    }
  }

  const Module& m_;
  const Function& f_;
  bool require_types_;
  std::vector<std::string> problems_;
  std::set<std::string> params_;
  std::vector<bool> defined_;
  std::set<ValueId> hidden_;
};

}  // namespace

std::vector<std::string> verify(const Module& m, bool require_types) { return Verifier(m, require_types).run(); }

void verify_or_throw(const Module& m, bool require_types) {
  auto problems = verify(m, require_types);
  if (problems.empty()) return;
  std::string msg = "invalid IR: " + problems.front();
  if (problems.size() > 1) msg += " (and " + std::to_string(problems.size() - 1) + " more)";
  throw IrError(msg);
}

}  // namespace lumen::ir
