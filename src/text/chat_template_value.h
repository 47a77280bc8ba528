// Values of the chat-template interpreter (internal to lumen_text): Python's
// object model as far as templates see it — None, bool, int, float, str,
// list/tuple, dict (insertion-ordered), namespace, callables — plus jinja2's
// Undefined.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template_ast.h"

namespace lumen::chat {

struct Value;
class Interpreter;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  Pos pos;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;

struct Dict;
using ListPtr = std::shared_ptr<std::vector<Value>>;
using DictPtr = std::shared_ptr<Dict>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // String; for Undefined: the hint shown when it is used
  ListPtr list;
  DictPtr dict;
  std::shared_ptr<NativeFn> fn;
  bool generator = false;  // List: a jinja2 generator (map, select, ...): truthy, no len(), not JSON
  bool safe = false;       // String: markupsafe.Markup (from |safe, |escape): `+` escapes plain strings

  static Value undefined(std::string hint = {}) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::None;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::Bool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::Int;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Kind::Float;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::String;
    v.s = std::move(x);
    return v;
  }
  static Value make_list(std::vector<Value> items = {}, bool tuple = false) {
    Value v;
    v.kind = tuple ? Kind::Tuple : Kind::List;
    v.list = std::make_shared<std::vector<Value>>(std::move(items));
    return v;
  }
  static Value make_dict();
  static Value make_namespace();
  static Value callable(NativeFn f, std::string name) {
    Value v;
    v.kind = Kind::Callable;
    v.fn = std::make_shared<NativeFn>(std::move(f));
    v.s = std::move(name);
    return v;
  }

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_sequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
};

struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  Value* find(const Value& key);
  void set(const Value& key, Value value);
};

inline Value Value::make_dict() {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>();
  return v;
}
inline Value Value::make_namespace() {
  Value v;
  v.kind = Kind::Namespace;
  v.dict = std::make_shared<Dict>();
  return v;
}

}  // namespace lumen::chat
