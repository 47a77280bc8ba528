// The chat-template interpreter (internal to lumen_text): runs a parsed
// template over Python-like values with jinja2's semantics (Undefined,
// scoping, loop variables, macros). Statements are in chat_template.cpp,
// expressions in chat_template_eval.cpp; the filters, the str and dict
// methods, the tests and the global functions are name -> function tables in
// chat_template_filters.cpp, chat_template_methods.cpp and
// chat_template_builtins.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat_template_ast.h"
#include "chat_template_python.h"
#include "chat_template_value.h"
#include "lumen/text/chat_template.h"

namespace lumen::chat {

// Thrown by break/continue, caught by the loop they leave.
struct LoopControl {
  enum Kind { Break, Continue } kind;
};

// Reads a builtin's arguments by position or keyword, as Python binds them.
struct ArgReader {
  CallArgs& a;
  const char* fn;
  size_t used_positional = 0;

  std::optional<Value> get(size_t index, const char* name) {
    for (auto& [k, v] : a.keyword)
      if (k == name) return v;
    if (index < a.positional.size()) {
      used_positional = std::max(used_positional, index + 1);
      return a.positional[index];
    }
    return std::nullopt;
  }
  Value get_or(size_t index, const char* name, Value def) {
    auto v = get(index, name);
    return v ? *v : def;
  }
  std::string get_string(size_t index, const char* name, std::string def) {
    auto v = get(index, name);
    if (!v || v->is_undefined()) return def;
    return to_str(*v);
  }
  std::optional<std::string> get_opt_string(size_t index, const char* name) {
    auto v = get(index, name);
    if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
    if (!v->is_string()) fail_at(a.pos, std::string(fn) + ": argument '" + name + "' must be a string");
    return v->s;
  }
  int64_t get_int(size_t index, const char* name, int64_t def) {
    auto v = get(index, name);
    if (!v || v->is_none()) return def;
    if (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
      fail_at(a.pos, std::string(fn) + ": argument '" + name + "' must be an integer");
    return as_int(*v);
  }
  bool get_bool(size_t index, const char* name, bool def) {
    auto v = get(index, name);
    return v ? truthy(*v) : def;
  }
};

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : opt_(options) { frames_.emplace_back(); }

  std::string run(const Body& body);
  void set_global(const std::string& name, Value v) { frames_[0][name] = std::move(v); }
  const RenderOptions& options() const { return opt_; }
  // Counts one step against the step limit.
  void step(Pos pos);

  // Expressions (chat_template_eval.cpp), also what the builtins use.
  Value eval(const Expr& e);
  std::vector<Value> iterate(const Value& v, Pos pos);
  Value call(const Value& callee, CallArgs& args, Pos pos);
  bool compare(const std::string& op, const Value& a, const Value& b, Pos pos);
  int order(const Value& a, const Value& b, const std::string& op, Pos pos);
  bool contains(const Value& container, const Value& item, Pos pos);
  Value binary(const std::string& op, const Value& a, const Value& b, Pos pos);
  Value get_item(const Value& obj, const Value& key, Pos pos);
  Value get_attr(const Value& obj, const std::string& name, Pos pos);
  [[noreturn]] static void undefined_error(const Value& v, Pos pos);

  // The builtins, looked up by name in their tables.
  Value apply_filter(const std::string& name, Value v, CallArgs& a, Pos pos);  // chat_template_filters.cpp
  bool apply_test(const std::string& name, const Value& v, CallArgs& a, Pos pos);  // chat_template_builtins.cpp

 private:
  // Statements (chat_template.cpp).
  void emit(const std::string& s, Pos pos);
  void exec_body(const Body& body);
  void exec(const Node& n);
  std::string capture(const Body& body);
  Value apply_filter_chain(const Expr& chain, Value operand);
  void assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }
  void assign_target(const Expr& target, const Value& v, Pos pos);
  void exec_set(const Node& n);
  void exec_for(const Node& n);
  Value make_macro(const Node& n, const Node* call_block);
  Value call_macro(const Node& def, bool is_caller, size_t defining_depth, CallArgs& a);

  // Expressions (chat_template_eval.cpp).
  Value lookup(const std::string& name) const;
  CallArgs eval_args(const std::vector<Arg>& args, Pos pos);
  // Python index normalisation for slices.
  static void slice_indices(int64_t len, const Value& start, const Value& stop, int64_t step, int64_t& b, int64_t& e);
  Value slice(const Value& obj, const Expr& s);
  Value builtin_global(const std::string& name) const;  // chat_template_builtins.cpp

  const RenderOptions& opt_;
  std::vector<std::unordered_map<std::string, Value>> frames_;
  size_t base_ = 0;       // frames below this (except the globals) are invisible (macro scope)
  Value pending_caller_;  // the caller() a call block hands to the macro it calls
  std::string out_;
  int64_t steps_ = 0;
  int loop_depth_ = 0;
  int call_depth_ = 0;
};

// Whether a filter of that name exists (jinja2's `is filter`).
bool is_filter(const std::string& name);

// The str and dict methods as bound callables (chat_template_methods.cpp);
// Undefined when the type has no such method.
Value string_method(const Value& self, const std::string& name);
Value dict_method(const Value& self, const std::string& name);

}  // namespace lumen::chat
