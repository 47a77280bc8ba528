// The IR verifier: SSA (one definition, defined before use, loop scoping),
// references to params and weights, operand counts, attributes and the type
// rule of every op.
#include "lumen/ir/verifier.h"

#include <set>

#include "lumen/ir/op_types.h"
#include "lumen/ir/text.h"

namespace lumen::ir {

namespace {

class Verifier {
 public:
  Verifier(const Module& m, bool require_types)
      : m_(m), f_(m.forward), require_types_(require_types), types_(m) {}

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
      if (f_.result_type.known && f_.type(f_.result).known && !types_.equal(f_.type(f_.result), f_.result_type))
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
      if (!w.per_layer && w.types.size() > 1) problem(where + ": a global weight has one tensor, one type");
      for (DType t : w.types)
        if (w.dtype != DType::Any && t != w.dtype)
          problem(where + ": declared " + to_string(w.dtype) + ", bound to " + to_string(t));
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
        if (!types_.equal(f_.type(c.init), arg) || !types_.equal(f_.type(c.yield), arg))
          problem("a carried value changes type: init " + f_.type(c.init).str() + ", argument " + arg.str() +
                  ", yield " + f_.type(c.yield).str());
      }
    }
    // Body values are not visible after the loop: only its results are.
    for (ValueId v : body_values) hidden_.insert(v);
    for (const auto& c : loop.carried) {
      define(c.result, "a loop result");
      if (valid(c.result) && valid(c.arg) && !types_.equal(f_.type(c.result), f_.type(c.arg)))
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

  // Operand counts, attributes and the type rule: the op table's entry.
  void check_signature(const Op& op, const std::string& at) {
    const ops::OpInfo& info = ops::op_info(op.kind);
    size_t specs = info.operands.size(), have = op.operands.size() + op.weights.size();
    bool variadic = !info.operands.empty() && info.operands.back().variadic;
    bool optional = !info.operands.empty() && info.operands.back().optional;
    if (have != specs && !(variadic && have > specs) && !(optional && have + 1 == specs)) {
      problem(at + ": expects " + (variadic ? "at least " : "") + std::to_string(specs) + " operand(s), has " +
              std::to_string(have));
      return;
    }
    for (const ops::AttrSpec& spec : info.attrs) {
      if (spec.internal) continue;  // matmul's epilogue is a field of the op
      const Attr* a = op.attr(spec.name);
      if (!a) {
        if (spec.required) problem(at + ": missing attribute " + spec.name);
        continue;
      }
      Attr::Kind want = spec.kind == ops::AttrKind::Size ? Attr::Kind::Dim : Attr::Kind::Ident;
      if (a->kind != want) {
        problem(at + ": attribute " + std::string(spec.name) + " has the wrong kind");
        continue;
      }
      if (spec.kind == ops::AttrKind::Scalar && !m_.find_param(a->text))
        problem(at + ": attribute " + std::string(spec.name) + " names an unknown param '" + a->text + "'");
    }
    if (op.kind != OpId::MatMul && (op.epilogue != Epilogue::None || !op.biases.empty() || op.residual != kNoValue))
      problem(at + ": only matmul has an epilogue");
    std::string why;
    std::optional<ops::OpCall> call = types_.call(op, f_, &why);
    if (!call) return;  // an open operand type (before infer_shapes) or a problem reported above
    ops::Verdict v = ops::infer(info, *call);
    if (!v.ok()) {
      problem(at + ": " + v.message);
      return;
    }
    const Type& r = f_.type(op.result);
    if (r.known && !types_.equal(r, types_.to_ir(*v.result)))
      problem(at + ": result is " + r.str() + " but the operands give " + v.result->str());
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
  OpTypes types_;
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
