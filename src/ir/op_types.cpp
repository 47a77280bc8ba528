// The IR in the op table's terms (see ir/op_types.h).
#include "lumen/ir/op_types.h"

#include "lumen/common/internal_error.h"

namespace lumen::ir {

OpTypes::OpTypes(const Module& m) : m_(m) {
  for (const Param& p : m.params)
    if (p.source == Param::Source::Derived && p.derived && !lets_.count(p.name)) lets_.emplace(p.name, sym(*p.derived));
  for (const Check& c : m.checks) {
    if (c.cmp != Check::Cmp::Eq) continue;
    const Dim* mod = c.rhs.is_constant() && c.rhs.value() == 0   ? &c.lhs
                     : c.lhs.is_constant() && c.lhs.value() == 0 ? &c.rhs
                                                                 : nullptr;
    if (mod && mod->kind() == Dim::Kind::Mod) facts_.assume_divides(sym(mod->rhs()), sym(mod->lhs()));
    else facts_.assume_equal(sym(c.lhs), sym(c.rhs));
  }
}

ops::SymDim OpTypes::sym(const Dim& d) const { return ops::SymDim::of(d, lets_); }

ops::TensorType OpTypes::type(const Type& t) const {
  ops::TensorType out;
  out.dtype = t.dtype;
  for (const Dim& d : t.shape) out.shape.push_back(shape_dim(d));
  return out;
}

Type OpTypes::to_ir(const ops::TensorType& t) const {
  std::vector<Dim> shape;
  for (const ops::ShapeDim& d : t.shape) shape.push_back(d.dim);
  return Type::of(t.dtype, std::move(shape));
}

bool OpTypes::equal(const Type& a, const Type& b) const {
  if (a == b) return true;
  if (!a.known || !b.known) return false;
  return ops::same_type(type(a), type(b), facts_);
}

std::optional<ops::OpCall> OpTypes::call(const Op& op, const Function& f, std::string* why) const {
  const ops::OpInfo& info = ops::op_info(op.kind);
  ops::OpCall c;
  c.facts = &facts_;
  auto value = [&](ValueId v) -> std::optional<ops::TensorType> {
    if (v < 0 || static_cast<size_t>(v) >= f.values.size() || !f.type(v).known) {
      *why = "an operand has no type";
      return std::nullopt;
    }
    return type(f.type(v));
  };
  auto weight = [&](const WeightRef& r) -> std::optional<ops::TensorType> {
    const Weight* w = m_.find_weight(r.name);
    if (!w) {
      *why = "unknown weight @" + r.name;
      return std::nullopt;
    }
    return type(Type::of(w->dtype, w->shape));
  };
  size_t next_value = 0, next_weight = 0;
  auto take = [&](bool as_weight) -> bool {
    std::optional<ops::TensorType> t =
        as_weight ? weight(op.weights[next_weight++]) : value(op.operands[next_value++]);
    if (!t) return false;
    c.operands.push_back(std::move(*t));
    c.is_weight.push_back(as_weight);
    return true;
  };
  for (const ops::OperandSpec& spec : info.operands) {
    bool values_left = next_value < op.operands.size(), weights_left = next_weight < op.weights.size();
    do {
      bool as_weight = spec.role == ops::Role::Weight || (spec.role == ops::Role::Either && !values_left);
      if (as_weight ? !weights_left : !values_left) break;  // too few: the table's count check reports it
      if (!take(as_weight)) return std::nullopt;
      values_left = next_value < op.operands.size();
      weights_left = next_weight < op.weights.size();
    } while (spec.variadic);
  }
  // Operands the specs do not take still count (the table reports too many).
  while (next_value < op.operands.size())
    if (!take(false)) return std::nullopt;
  while (next_weight < op.weights.size())
    if (!take(true)) return std::nullopt;
  for (const auto& [name, a] : op.attrs) {
    const ops::AttrSpec* spec = ops::find_attr(info, name);
    if (!spec) continue;  // scheduling attributes (kernels, tasks)
    if (spec->kind == ops::AttrKind::Size && a.kind == Attr::Kind::Dim) c.sizes[name] = shape_dim(a.dim);
    if (spec->kind == ops::AttrKind::Choice && a.kind == Attr::Kind::Ident) c.choices[name] = a.text;
  }
  c.epilogue = op.epilogue;
  for (const WeightRef& b : op.biases) {
    auto t = weight(b);
    if (!t) return std::nullopt;
    c.biases.push_back(std::move(*t));
  }
  if (op.residual != kNoValue) {
    auto t = value(op.residual);
    if (!t) return std::nullopt;
    c.residual = std::move(*t);
  }
  return c;
}

}  // namespace lumen::ir
