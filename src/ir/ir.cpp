// IR data structures: small helpers over functions and ops.
#include "lumen/ir/ir.h"

#include "lumen/common/internal_error.h"

namespace lumen::ir {

const char* to_string(Check::Cmp cmp) {
  switch (cmp) {
    case Check::Cmp::Eq: return "==";
    case Check::Cmp::Ne: return "!=";
    case Check::Cmp::Lt: return "<";
    case Check::Cmp::Le: return "<=";
    case Check::Cmp::Gt: return ">";
    case Check::Cmp::Ge: return ">=";
  }
  return "?";
}

std::string Type::str() const {
  if (!known) return "?";
  std::string out = to_string(dtype);
  out += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += shape[i].str();
  }
  return out + "]";
}

std::string WeightRef::str() const { return "@" + name + (per_layer ? "[l]" : ""); }

bool Attr::operator==(const Attr& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::Int: return int_value == other.int_value;
    case Kind::Dim: return dim == other.dim;
    default: return text == other.text;
  }
}

std::string Attr::str() const {
  switch (kind) {
    case Kind::Int: return std::to_string(int_value);
    case Kind::Dim: return dim.str();
    case Kind::Ident: return text;
    case Kind::String: {
      std::string out = "\"";
      for (char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
      }
      return out + "\"";
    }
  }
  return "";
}

const Attr* Op::attr(std::string_view name) const {
  for (const auto& [key, value] : attrs)
    if (key == name) return &value;
  return nullptr;
}

void Op::set_attr(const std::string& name, Attr value) {
  for (auto& [key, existing] : attrs) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  attrs.emplace_back(name, std::move(value));
}

ValueId Function::new_value(Type type) {
  values.push_back(Value{std::move(type)});
  return static_cast<ValueId>(values.size() - 1);
}

const Param* Module::find_param(std::string_view name) const {
  for (const auto& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

DType Weight::type_of_layer(int64_t layer) const {
  LUMEN_ASSERT(!types.empty(), "weight '@" + name + "' has no bound types");
  if (types.size() == 1) return types[0];
  LUMEN_ASSERT(layer >= 0 && static_cast<size_t>(layer) < types.size(),
               "weight '@" + name + "' has no type for layer " + std::to_string(layer));
  return types[static_cast<size_t>(layer)];
}

const Weight* Module::find_weight(std::string_view name) const {
  for (const auto& w : weights)
    if (w.name == name) return &w;
  return nullptr;
}

std::vector<ValueId> op_inputs(const Op& op) {
  std::vector<ValueId> inputs = op.operands;
  if (op.residual != kNoValue) inputs.push_back(op.residual);
  return inputs;
}

void for_each_op(Function& f, const std::function<void(Op&)>& fn) {
  for (auto& op : f.pre) fn(op);
  if (f.loop)
    for (auto& op : f.loop->body) fn(op);
  for (auto& op : f.post) fn(op);
}

void for_each_op(const Function& f, const std::function<void(const Op&)>& fn) {
  for (const auto& op : f.pre) fn(op);
  if (f.loop)
    for (const auto& op : f.loop->body) fn(op);
  for (const auto& op : f.post) fn(op);
}

int use_count(const Function& f, ValueId v) {
  int count = 0;
  for_each_op(f, [&](const Op& op) {
    for (ValueId in : op_inputs(op)) count += in == v;
  });
  if (f.loop)
    for (const auto& c : f.loop->carried) count += (c.init == v) + (c.yield == v);
  count += f.result == v;
  return count;
}

void replace_uses(Function& f, ValueId from, ValueId to) {
  for_each_op(f, [&](Op& op) {
    for (ValueId& in : op.operands)
      if (in == from) in = to;
    if (op.residual == from) op.residual = to;
  });
  if (f.loop) {
    for (auto& c : f.loop->carried) {
      if (c.init == from) c.init = to;
      if (c.yield == from) c.yield = to;
    }
  }
  if (f.result == from) f.result = to;
}

}  // namespace lumen::ir
