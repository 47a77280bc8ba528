// The chat-template tests (`x is defined`) and global functions (range,
// namespace, dict, raise_exception, strftime_now) as name -> function tables.
// A test or a global is one function and one entry in its table.
#include <algorithm>
#include <cstdint>
#include <ctime>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat_template_interpreter.h"

namespace lumen::chat {

namespace {

// What a test sees: the value, its arguments, the name it was called by.
struct TestCall {
  Interpreter& in;
  const std::string& name;
  const Value& v;
  CallArgs& a;
  Pos pos;

  const Value& arg0() const {
    if (a.positional.empty()) fail_at(pos, "the test '" + name + "' needs an argument");
    return a.positional[0];
  }
};

using Test = bool (*)(TestCall&);

bool test_defined(TestCall& t) { return !t.v.is_undefined(); }
bool test_undefined(TestCall& t) { return t.v.is_undefined(); }
bool test_none(TestCall& t) { return t.v.is_none(); }
bool test_string(TestCall& t) { return t.v.is_string(); }
bool test_number(TestCall& t) { return t.v.is_number(); }
bool test_integer(TestCall& t) { return t.v.kind == Value::Kind::Int; }
bool test_float(TestCall& t) { return t.v.kind == Value::Kind::Float; }
bool test_boolean(TestCall& t) { return t.v.kind == Value::Kind::Bool; }
bool test_true(TestCall& t) { return t.v.kind == Value::Kind::Bool && t.v.b; }
bool test_false(TestCall& t) { return t.v.kind == Value::Kind::Bool && !t.v.b; }
bool test_mapping(TestCall& t) { return t.v.kind == Value::Kind::Dict; }
bool test_iterable(TestCall& t) {
  return t.v.is_undefined() || t.v.is_string() || t.v.is_sequence() || t.v.kind == Value::Kind::Dict;
}
bool test_sequence(TestCall& t) {
  return t.v.is_undefined() || t.v.is_string() || (t.v.is_sequence() && !t.v.generator) || t.v.kind == Value::Kind::Dict;
}
bool test_callable(TestCall& t) { return t.v.kind == Value::Kind::Callable; }
bool test_escaped(TestCall&) { return false; }
bool test_sameas(TestCall& t) {
  const Value& o = t.arg0();
  if (t.v.kind != o.kind) return false;
  if (t.v.is_none() || t.v.is_undefined()) return true;
  if (t.v.kind == Value::Kind::Bool) return t.v.b == o.b;
  if (t.v.is_sequence()) return t.v.list == o.list;
  if (t.v.is_mapping()) return t.v.dict == o.dict;
  return false;
}
bool test_eq(TestCall& t) { return equals(t.v, t.arg0()); }
bool test_ne(TestCall& t) { return !equals(t.v, t.arg0()); }
bool test_lt(TestCall& t) { return t.in.order(t.v, t.arg0(), "<", t.pos) < 0; }
bool test_le(TestCall& t) { return t.in.order(t.v, t.arg0(), "<=", t.pos) <= 0; }
bool test_gt(TestCall& t) { return t.in.order(t.v, t.arg0(), ">", t.pos) > 0; }
bool test_ge(TestCall& t) { return t.in.order(t.v, t.arg0(), ">=", t.pos) >= 0; }
bool test_in(TestCall& t) { return t.in.contains(t.arg0(), t.v, t.pos); }
bool test_divisible(TestCall& t) {
  if (t.v.kind != Value::Kind::Int && t.v.kind != Value::Kind::Bool) {
    if (t.v.is_undefined()) Interpreter::undefined_error(t.v, t.pos);
    fail_at(t.pos, "the test '" + t.name + "' needs an integer");
  }
  int64_t m = 2;
  if (t.name == "divisibleby") {
    const Value& d = t.arg0();
    if (d.kind != Value::Kind::Int || d.i == 0) fail_at(t.pos, "divisibleby needs a nonzero integer");
    m = d.i;
  }
  const int64_t r = m == -1 ? 0 : as_int(t.v) % m;
  return t.name == "odd" ? r != 0 : r == 0;
}
bool test_lower(TestCall& t) { return to_str(t.v) == to_lower(to_str(t.v)); }
bool test_upper(TestCall& t) { return to_str(t.v) == to_upper(to_str(t.v)); }
bool test_filter(TestCall& t);

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> table = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"string", test_string},
      {"number", test_number},
      {"integer", test_integer},
      {"float", test_float},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"mapping", test_mapping},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"callable", test_callable},
      {"escaped", test_escaped},
      {"sameas", test_sameas},
      {"eq", test_eq},
      {"equalto", test_eq},
      {"==", test_eq},
      {"ne", test_ne},
      {"!=", test_ne},
      {"lt", test_lt},
      {"lessthan", test_lt},
      {"<", test_lt},
      {"le", test_le},
      {"<=", test_le},
      {"gt", test_gt},
      {"greaterthan", test_gt},
      {">", test_gt},
      {"ge", test_ge},
      {">=", test_ge},
      {"in", test_in},
      {"even", test_divisible},
      {"odd", test_divisible},
      {"divisibleby", test_divisible},
      {"lower", test_lower},
      {"upper", test_upper},
      {"filter", test_filter},
      {"test", test_filter},
  };
  return table;
}

// `"trim" is filter`, `"defined" is test`: whether one of that name exists.
bool test_filter(TestCall& t) {
  const std::string n = to_str(t.v);
  return t.name == "filter" ? is_filter(n) : tests().count(n) != 0;
}

Value global_range(Interpreter& in, CallArgs& a) {
  for (const Value& v : a.positional)
    if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
      fail_at(a.pos, "range(): '" + type_name(v) + "' object cannot be interpreted as an integer");
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = as_int(a.positional[0]);
  } else if (a.positional.size() == 2 || a.positional.size() == 3) {
    start = as_int(a.positional[0]);
    stop = as_int(a.positional[1]);
    if (a.positional.size() == 3) step = as_int(a.positional[2]);
  } else {
    fail_at(a.pos, "range expected 1 to 3 arguments");
  }
  if (step == 0) fail_at(a.pos, "range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
    items.push_back(Value::integer(k));
    in.step(a.pos);
    if (__builtin_add_overflow(k, step, &k)) break;
    k -= step;
  }
  return Value::make_list(std::move(items));
}

// namespace() and dict(): a mapping of the positional dicts' items and the keywords.
Value make_mapping(Value v, CallArgs& a) {
  for (const Value& p : a.positional) {
    if (p.kind != Value::Kind::Dict) fail_at(a.pos, "namespace()/dict() positional argument must be a dict");
    for (const auto& kv : p.dict->items) v.dict->set(kv.first, kv.second);
  }
  for (const auto& [k, val] : a.keyword) v.dict->set(Value::string(k), val);
  return v;
}
Value global_namespace(Interpreter&, CallArgs& a) { return make_mapping(Value::make_namespace(), a); }
Value global_dict(Interpreter&, CallArgs& a) { return make_mapping(Value::make_dict(), a); }

Value global_raise_exception(Interpreter&, CallArgs& a) {
  fail_at(a.pos, "raise_exception: " + (a.positional.empty() ? std::string() : to_str(a.positional[0])));
}

Value global_strftime_now(Interpreter& in, CallArgs& a) {
  if (a.positional.empty() || !a.positional[0].is_string()) fail_at(a.pos, "strftime_now() takes a format string");
  std::time_t t = in.options().now ? static_cast<std::time_t>(*in.options().now) : std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  const std::string& fmt = a.positional[0].s;
  if (fmt.size() > 200) fail_at(a.pos, "strftime_now(): format too long");
  size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

using Global = Value (*)(Interpreter&, CallArgs&);

const std::unordered_map<std::string, Global>& globals() {
  static const std::unordered_map<std::string, Global> table = {
      {"range", global_range},
      {"namespace", global_namespace},
      {"dict", global_dict},
      {"raise_exception", global_raise_exception},
      {"strftime_now", global_strftime_now},
  };
  return table;
}

}  // namespace

bool Interpreter::apply_test(const std::string& name, const Value& v, CallArgs& a, Pos pos) {
  auto it = tests().find(name);
  if (it == tests().end()) fail_at(pos, "no test named '" + name + "'");
  TestCall t{*this, name, v, a, pos};
  return it->second(t);
}

Value Interpreter::builtin_global(const std::string& name) const {
  auto it = globals().find(name);
  if (it == globals().end()) return Value::undefined();
  return Value::callable(it->second, name);
}

}  // namespace lumen::chat
