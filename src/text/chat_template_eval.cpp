// The chat-template interpreter's expressions (chat_template_interpreter.h):
// names and scopes, literals, calls, Python's operators with its overflow,
// division and comparison rules, subscripts, slices and attributes.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "chat_template_interpreter.h"

namespace lumen::chat {

namespace {

// "'<type> object'", built stepwise: GCC 12 warns falsely on "'" + std::string&&.
std::string object_name(const Value& v) {
  std::string out = "'";
  out += type_name(v);
  out += " object'";
  return out;
}

}  // namespace

Value Interpreter::lookup(const std::string& name) const {
  for (size_t k = frames_.size(); k-- > 0;) {
    if (k < base_ && k != 0) continue;
    auto it = frames_[k].find(name);
    if (it != frames_[k].end()) return it->second;
  }
  if (Value g = builtin_global(name); !g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::undefined_error(const Value& v, Pos pos) {
  fail_at(pos, v.s.empty() ? "undefined value" : v.s);
}

std::vector<Value> Interpreter::iterate(const Value& v, Pos pos) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List:
    case Value::Kind::Tuple: return *v.list;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      for (auto& cp : code_points(v.s)) chars.push_back(Value::string(std::move(cp)));
      return chars;
    }
    default: fail_at(pos, "'" + type_name(v) + "' object is not iterable");
  }
}

CallArgs Interpreter::eval_args(const std::vector<Arg>& args, Pos pos) {
  CallArgs a;
  a.pos = pos;
  for (const Arg& arg : args) {
    if (arg.keyword.empty()) {
      a.positional.push_back(eval(*arg.value));
    } else {
      a.keyword.emplace_back(arg.keyword, eval(*arg.value));
    }
  }
  return a;
}

Value Interpreter::eval(const Expr& e) {
  switch (e.kind) {
    case ExprKind::Literal:
      switch (e.literal_kind) {
        case LiteralKind::None: return Value::none();
        case LiteralKind::Bool: return Value::boolean(e.int_value != 0);
        case LiteralKind::Int: return Value::integer(e.int_value);
        case LiteralKind::Float: return Value::number(e.float_value);
        case LiteralKind::String: return Value::string(e.str_value);
      }
      return Value::none();
    case ExprKind::Name: return lookup(e.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const auto& c : e.children) items.push_back(eval(*c));
      return Value::make_list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
        Value key = eval(*e.children[k]);
        if (key.is_sequence() && key.kind == Value::Kind::List) fail_at(e.children[k]->pos, "unhashable type: 'list'");
        if (key.is_mapping()) fail_at(e.children[k]->pos, "unhashable type: 'dict'");
        d.dict->set(key, eval(*e.children[k + 1]));
      }
      return d;
    }
    case ExprKind::GetAttr: return get_attr(eval(*e.children[0]), e.name, e.pos);
    case ExprKind::GetItem: {
      Value obj = eval(*e.children[0]);
      const Expr& idx = *e.children[1];
      if (idx.kind == ExprKind::Slice) return slice(obj, idx);
      return get_item(obj, eval(idx), e.pos);
    }
    case ExprKind::Slice: fail_at(e.pos, "unexpected slice");
    case ExprKind::Call: {
      Value callee = eval(*e.children[0]);
      CallArgs args = eval_args(e.args, e.pos);
      return call(callee, args, e.pos);
    }
    case ExprKind::Filter: {
      Value operand = e.children[0] ? eval(*e.children[0]) : Value::undefined();
      CallArgs args = eval_args(e.args, e.pos);
      return apply_filter(e.name, std::move(operand), args, e.pos);
    }
    case ExprKind::Test: {
      Value operand = e.children[0] ? eval(*e.children[0]) : Value::undefined();
      CallArgs args = eval_args(e.args, e.pos);
      bool r = apply_test(e.name, operand, args, e.pos);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::Unary: {
      Value v = eval(*e.children[0]);
      if (v.is_undefined()) undefined_error(v, e.pos);
      if (!v.is_number()) fail_at(e.pos, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.kind == Value::Kind::Bool ? Value::integer(v.b) : v;
      if (v.kind == Value::Kind::Float) return Value::number(-v.f);
      if (as_int(v) == INT64_MIN) fail_at(e.pos, "integer overflow");
      return Value::integer(-as_int(v));
    }
    case ExprKind::Binary: return binary(e.name, eval(*e.children[0]), eval(*e.children[1]), e.pos);
    case ExprKind::Compare: {
      Value left = eval(*e.children[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.children[k + 1]);
        if (!compare(e.ops[k], left, right, e.pos)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::And: {
      Value l = eval(*e.children[0]);
      return truthy(l) ? eval(*e.children[1]) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.children[0]);
      return truthy(l) ? l : eval(*e.children[1]);
    }
    case ExprKind::Not: return Value::boolean(!truthy(eval(*e.children[0])));
    case ExprKind::CondExpr:
      if (truthy(eval(*e.children[1]))) return eval(*e.children[0]);
      if (e.children[2]) return eval(*e.children[2]);
      return Value::undefined("the inline if expression evaluated to false and no else section was defined");
    case ExprKind::Concat: {
      std::string s;
      for (const auto& c : e.children) {
        s += to_str(eval(*c));
        if (static_cast<int64_t>(s.size()) > opt_.limits.max_output_bytes) fail_at(e.pos, "string too long");
      }
      return Value::string(std::move(s));
    }
  }
  fail_at(e.pos, "unsupported expression");
}

Value Interpreter::call(const Value& callee, CallArgs& args, Pos pos) {
  step(pos);
  if (callee.is_undefined()) undefined_error(callee, pos);
  if (callee.kind != Value::Kind::Callable) fail_at(pos, "'" + type_name(callee) + "' object is not callable");
  return (*callee.fn)(*this, args);
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b, Pos pos) {
  if (op == "==") return equals(a, b);
  if (op == "!=") return !equals(a, b);
  if (op == "in") return contains(b, a, pos);
  if (op == "notin") return !contains(b, a, pos);
  const int c = order(a, b, op, pos);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

int Interpreter::order(const Value& a, const Value& b, const std::string& op, Pos pos) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) {
      const double x = as_double(a), y = as_double(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
  if (a.kind == b.kind && a.is_sequence()) {
    for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
      if (equals((*a.list)[k], (*b.list)[k])) continue;
      return order((*a.list)[k], (*b.list)[k], op, pos);
    }
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  if (a.is_undefined()) undefined_error(a, pos);
  if (b.is_undefined()) undefined_error(b, pos);
  fail_at(pos, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool Interpreter::contains(const Value& container, const Value& item, Pos pos) {
  switch (container.kind) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        fail_at(pos, "'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      for (const Value& v : *container.list)
        if (equals(v, item)) return true;
      return false;
    case Value::Kind::Dict: return container.dict->find(item) != nullptr;
    default: fail_at(pos, "argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b, Pos pos) {
  if (a.is_undefined()) undefined_error(a, pos);
  if (b.is_undefined()) undefined_error(b, pos);
  auto type_error = [&]() -> Value {
    fail_at(pos, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (static_cast<int64_t>(a.s.size() + b.s.size()) > opt_.limits.max_output_bytes) fail_at(pos, "string too long");
      // Markup + str escapes the str (markupsafe).
      if (a.safe || b.safe) return markup((a.safe ? a.s : html_escape(a.s)) + (b.safe ? b.s : html_escape(b.s)));
      return Value::string(a.s + b.s);
    }
    if (a.is_sequence() && a.kind == b.kind) {
      std::vector<Value> items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(items), a.kind == Value::Kind::Tuple);
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_sequence() ? &a : b.is_string() || b.is_sequence() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->kind == Value::Kind::Int || count->kind == Value::Kind::Bool)) {
      const int64_t n = std::max<int64_t>(0, as_int(*count));
      const int64_t unit = seq->is_string() ? static_cast<int64_t>(seq->s.size()) : static_cast<int64_t>(seq->list->size());
      if (unit > 0 && n > opt_.limits.max_output_bytes / unit) fail_at(pos, "repetition result too long");
      if (seq->is_string()) {
        std::string s;
        for (int64_t k = 0; k < n; ++k) s += seq->s;
        return Value::string(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->begin(), seq->list->end());
      return Value::make_list(std::move(items), seq->kind == Value::Kind::Tuple);
    }
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool is_float = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float;
  if (op == "/") {
    if (as_double(b) == 0) fail_at(pos, "division by zero");
    return Value::number(as_double(a) / as_double(b));
  }
  if (is_float) {
    const double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) fail_at(pos, "float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
    return type_error();
  }
  const int64_t x = as_int(a), y = as_int(b);
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) fail_at(pos, "integer overflow");
    return Value::integer(r);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) fail_at(pos, "integer overflow");
    return Value::integer(r);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) fail_at(pos, "integer overflow");
    return Value::integer(r);
  }
  if (op == "**") {
    if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t acc = 1;
    for (int64_t k = 0; k < y; ++k) {
      if (__builtin_mul_overflow(acc, x, &acc)) fail_at(pos, "integer overflow");
      if (acc == 0 || acc == 1) break;
      if (acc == -1) {
        acc = ((y - k - 1) % 2 == 0) ? -1 : 1;
        break;
      }
    }
    return Value::integer(acc);
  }
  if (y == 0) fail_at(pos, "integer division or modulo by zero");
  if (x == INT64_MIN && y == -1) fail_at(pos, "integer overflow");
  int64_t q = x / y, m = x % y;
  if (m != 0 && ((m < 0) != (y < 0))) {
    --q;
    m += y;
  }
  if (op == "//") return Value::integer(q);
  if (op == "%") return Value::integer(m);
  return type_error();
}

// Python index normalisation for slices.
void Interpreter::slice_indices(int64_t len, const Value& start, const Value& stop, int64_t step, int64_t& b, int64_t& e) {
  auto clamp = [&](const Value& v, int64_t def, bool is_start) {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t x = as_int(v);
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    (void)is_start;
    return x;
  };
  b = clamp(start, step < 0 ? len - 1 : 0, true);
  e = clamp(stop, step < 0 ? -1 : len, false);
}

Value Interpreter::slice(const Value& obj, const Expr& s) {
  Value start = s.children[0] ? eval(*s.children[0]) : Value::none();
  Value stop = s.children[1] ? eval(*s.children[1]) : Value::none();
  Value stepv = s.children[2] ? eval(*s.children[2]) : Value::none();
  for (const Value* v : {&start, &stop, &stepv})
    if (!v->is_none() && v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
      fail_at(s.pos, "slice indices must be integers or None");
  const int64_t step = stepv.is_none() ? 1 : as_int(stepv);
  if (step == 0) fail_at(s.pos, "slice step cannot be zero");
  if (obj.is_undefined()) undefined_error(obj, s.pos);
  std::vector<std::string> cps;
  int64_t len = 0;
  if (obj.is_string()) {
    cps = code_points(obj.s);
    len = static_cast<int64_t>(cps.size());
  } else if (obj.is_sequence()) {
    len = static_cast<int64_t>(obj.list->size());
  } else {
    fail_at(s.pos, "'" + type_name(obj) + "' object is not subscriptable");
  }
  int64_t b = 0, e = 0;
  slice_indices(len, start, stop, step, b, e);
  std::vector<int64_t> idx;
  for (int64_t k = b; step > 0 ? k < e : k > e; k += step) idx.push_back(k);
  if (obj.is_string()) {
    std::string out;
    for (int64_t k : idx) out += cps[static_cast<size_t>(k)];
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t k : idx) items.push_back((*obj.list)[static_cast<size_t>(k)]);
  return Value::make_list(std::move(items), obj.kind == Value::Kind::Tuple);
}

Value Interpreter::get_item(const Value& obj, const Value& key, Pos pos) {
  switch (obj.kind) {
    case Value::Kind::Undefined: undefined_error(obj, pos);
    case Value::Kind::List:
    case Value::Kind::Tuple:
    case Value::Kind::String: {
      if (obj.generator) return Value::undefined("'generator object' has no element " + repr(key));
      if (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool) {
        int64_t k = as_int(key);
        if (obj.is_string()) {
          if (is_ascii(obj.s)) {
            const auto n = static_cast<int64_t>(obj.s.size());
            if (k < 0) k += n;
            if (k < 0 || k >= n) return Value::undefined(py_str_repr(obj.s) + " has no element " + std::to_string(as_int(key)));
            return Value::string(std::string(1, obj.s[static_cast<size_t>(k)]));
          }
          std::vector<std::string> cps = code_points(obj.s);
          const auto n = static_cast<int64_t>(cps.size());
          if (k < 0) k += n;
          if (k < 0 || k >= n) return Value::undefined("str object has no element " + std::to_string(as_int(key)));
          return Value::string(cps[static_cast<size_t>(k)]);
        }
        const auto n = static_cast<int64_t>(obj.list->size());
        if (k < 0) k += n;
        if (k < 0 || k >= n) return Value::undefined(type_name(obj) + " object has no element " + std::to_string(as_int(key)));
        return (*obj.list)[static_cast<size_t>(k)];
      }
      if (key.is_string()) return get_attr(obj, key.s, pos);
      return Value::undefined(object_name(obj) + " has no element " + repr(key));
    }
    case Value::Kind::Dict: {
      if (const Value* v = obj.dict->find(key)) return *v;
      if (key.is_string()) return get_attr(obj, key.s, pos);
      return Value::undefined("'dict object' has no element " + repr(key));
    }
    case Value::Kind::Namespace:
      if (key.is_string()) return get_attr(obj, key.s, pos);
      return Value::undefined("'Namespace object' has no element " + repr(key));
    case Value::Kind::None: return Value::undefined("'None' has no attribute " + repr(key));
    default:
      return Value::undefined(object_name(obj) + " has no element " + repr(key));
  }
}

Value Interpreter::get_attr(const Value& obj, const std::string& name, Pos pos) {
  switch (obj.kind) {
    case Value::Kind::Undefined: undefined_error(obj, pos);
    case Value::Kind::String:
      if (Value m = string_method(obj, name); !m.is_undefined()) return m;
      return Value::undefined("'str object' has no attribute '" + name + "'");
    case Value::Kind::Dict: {
      if (Value m = dict_method(obj, name); !m.is_undefined()) return m;
      if (const Value* v = obj.dict->find(Value::string(name))) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::Namespace:
      if (const Value* v = obj.dict->find(Value::string(name))) return *v;
      return Value::undefined("'Namespace object' has no attribute '" + name + "'");
    case Value::Kind::None: return Value::undefined("'None' has no attribute '" + name + "'");
    default: return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
  }
}

}  // namespace lumen::chat
