// The chat-template interpreter's statements (chat_template_interpreter.h):
// output, if, for with jinja2's loop variable, set, macros and call blocks,
// filter blocks, with, break and continue; the step, output and call-depth
// limits; and the ChatTemplate API that runs a template over its messages.
#include "lumen/text/chat_template.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <unordered_map>

#include "chat_template_interpreter.h"

namespace lumen::chat {

TemplateError::TemplateError(int line, int column, const std::string& message)
    : std::runtime_error(std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      line_(line),
      column_(column),
      message_(message) {}

std::string Interpreter::run(const Body& body) {
  exec_body(body);
  return std::move(out_);
}

void Interpreter::step(Pos pos) {
  if (++steps_ > opt_.limits.max_steps)
    fail_at(pos, "the template ran more than " + std::to_string(opt_.limits.max_steps) + " steps (loop or recursion limit)");
}

void Interpreter::emit(const std::string& s, Pos pos) {
  out_ += s;
  if (static_cast<int64_t>(out_.size()) > opt_.limits.max_output_bytes)
    fail_at(pos, "the output exceeds " + std::to_string(opt_.limits.max_output_bytes) + " bytes");
}

void Interpreter::exec_body(const Body& body) {
  for (const NodePtr& n : body) exec(*n);
}

void Interpreter::exec(const Node& n) {
  step(n.pos);
  switch (n.kind) {
    case NodeKind::Text: emit(n.text, n.pos); return;
    case NodeKind::Output: emit(to_str(eval(*n.expr)), n.pos); return;
    case NodeKind::If:
      for (const auto& [cond, body] : n.branches)
        if (truthy(eval(*cond))) {
          exec_body(body);
          return;
        }
      exec_body(n.else_body);
      return;
    case NodeKind::For: exec_for(n); return;
    case NodeKind::Set: exec_set(n); return;
    case NodeKind::Macro: assign(n.name, make_macro(n, nullptr)); return;
    case NodeKind::CallBlock: {
      const Node* block = &n;
      // The macro the call expression calls gets `caller`.
      pending_caller_ = make_macro(n, block);
      Value result = eval(*n.expr);
      pending_caller_ = Value::undefined();
      emit(to_str(result), n.pos);
      return;
    }
    case NodeKind::FilterBlock: {
      std::string text = capture(n.body);
      emit(to_str(apply_filter_chain(*n.filter, Value::string(std::move(text)))), n.pos);
      return;
    }
    case NodeKind::With: {
      std::vector<Value> values;
      for (const auto& a : n.assignments) values.push_back(eval(*a.second));
      frames_.emplace_back();
      for (size_t k = 0; k < values.size(); ++k) frames_.back()[n.assignments[k].first] = values[k];
      try {
        exec_body(n.body);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      return;
    }
    case NodeKind::Break:
      if (loop_depth_ == 0) fail_at(n.pos, "'break' outside of a loop");
      throw LoopControl{LoopControl::Break};
    case NodeKind::Continue:
      if (loop_depth_ == 0) fail_at(n.pos, "'continue' outside of a loop");
      throw LoopControl{LoopControl::Continue};
  }
}

std::string Interpreter::capture(const Body& body) {
  std::string saved;
  std::swap(saved, out_);
  try {
    exec_body(body);
  } catch (...) {
    std::swap(saved, out_);
    throw;
  }
  std::swap(saved, out_);
  return saved;
}

Value Interpreter::apply_filter_chain(const Expr& chain, Value operand) {
  // chain is Filter(Filter(null, ...), ...): apply innermost first.
  if (chain.children[0]) operand = apply_filter_chain(*chain.children[0], std::move(operand));
  CallArgs args = eval_args(chain.args, chain.pos);
  return apply_filter(chain.name, std::move(operand), args, chain.pos);
}

void Interpreter::assign_target(const Expr& target, const Value& v, Pos pos) {
  if (target.kind == ExprKind::Name) {
    assign(target.name, v);
  } else if (target.kind == ExprKind::GetAttr) {
    Value obj = eval(*target.children[0]);
    if (obj.kind != Value::Kind::Namespace)
      fail_at(target.pos, "cannot assign attribute on non-namespace object");
    obj.dict->set(Value::string(target.name), v);
  } else {
    // Tuple unpacking.
    std::vector<Value> items = iterate(v, pos);
    if (items.size() != target.children.size())
      fail_at(pos, items.size() > target.children.size()
                       ? "too many values to unpack (expected " + std::to_string(target.children.size()) + ")"
                       : "not enough values to unpack (expected " + std::to_string(target.children.size()) +
                             ", got " + std::to_string(items.size()) + ")");
    for (size_t k = 0; k < items.size(); ++k) assign_target(*target.children[k], items[k], pos);
  }
}

void Interpreter::exec_set(const Node& n) {
  Value v;
  if (n.expr) {
    v = eval(*n.expr);
  } else {
    v = Value::string(capture(n.body));
    if (n.filter) v = apply_filter_chain(*n.filter, std::move(v));
  }
  assign_target(*n.targets[0], v, n.pos);
}

void Interpreter::exec_for(const Node& n) {
  Value seq = eval(*n.expr);
  std::vector<Value> all = iterate(seq, n.expr->pos);
  std::vector<Value> items;
  if (n.filter) {
    for (Value& item : all) {
      step(n.pos);
      frames_.emplace_back();
      try {
        assign_target(*n.targets[0], item, n.pos);
        if (truthy(eval(*n.filter))) items.push_back(std::move(item));
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) {
    exec_body(n.else_body);
    return;
  }
  const auto length = static_cast<int64_t>(items.size());
  ++loop_depth_;
  struct LoopGuard {
    int& d;
    ~LoopGuard() { --d; }
  } guard{loop_depth_};
  auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
  for (int64_t k = 0; k < length; ++k) {
    step(n.pos);
    Value loop = Value::make_namespace();
    Dict& d = *loop.dict;
    d.set(Value::string("index"), Value::integer(k + 1));
    d.set(Value::string("index0"), Value::integer(k));
    d.set(Value::string("revindex"), Value::integer(length - k));
    d.set(Value::string("revindex0"), Value::integer(length - k - 1));
    d.set(Value::string("first"), Value::boolean(k == 0));
    d.set(Value::string("last"), Value::boolean(k == length - 1));
    d.set(Value::string("length"), Value::integer(length));
    d.set(Value::string("depth"), Value::integer(1));
    d.set(Value::string("depth0"), Value::integer(0));
    d.set(Value::string("previtem"), k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
    d.set(Value::string("nextitem"), k + 1 < length ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
    d.set(Value::string("cycle"), Value::callable(
                                      [k](Interpreter&, CallArgs& a) -> Value {
                                        if (a.positional.empty()) fail_at(a.pos, "no items for cycling given");
                                        return a.positional[static_cast<size_t>(k) % a.positional.size()];
                                      },
                                      "cycle"));
    d.set(Value::string("changed"), Value::callable(
                                        [last_changed](Interpreter&, CallArgs& a) -> Value {
                                          if (*last_changed && a.positional.size() == (*last_changed)->size()) {
                                            bool same = true;
                                            for (size_t q = 0; q < a.positional.size(); ++q)
                                              same = same && equals(a.positional[q], (**last_changed)[q]);
                                            if (same) return Value::boolean(false);
                                          }
                                          *last_changed = a.positional;
                                          return Value::boolean(true);
                                        },
                                        "changed"));
    frames_.emplace_back();
    bool stop = false;
    try {
      assign_target(*n.targets[0], items[static_cast<size_t>(k)], n.pos);
      frames_.back()["loop"] = std::move(loop);
      exec_body(n.body);
    } catch (const LoopControl& c) {
      stop = c.kind == LoopControl::Break;
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    if (stop) break;
  }
}

Value Interpreter::make_macro(const Node& n, const Node* call_block) {
  // A call block's caller() renders the block body; a macro renders its own.
  const Node* def = &n;
  const bool is_caller = call_block != nullptr;
  // A caller body sees the scope of its call site.
  const size_t defining_depth = is_caller ? base_ : 0;
  return Value::callable(
      [def, is_caller, defining_depth](Interpreter& in, CallArgs& a) -> Value {
        return in.call_macro(*def, is_caller, defining_depth, a);
      },
      n.name);
}

Value Interpreter::call_macro(const Node& def, bool is_caller, size_t defining_depth, CallArgs& a) {
  if (++call_depth_ > opt_.limits.max_call_depth) {
    --call_depth_;
    fail_at(a.pos, "macro calls nested deeper than " + std::to_string(opt_.limits.max_call_depth));
  }
  struct DepthGuard {
    int& d;
    ~DepthGuard() { --d; }
  } guard{call_depth_};
  const std::vector<Param>& params = def.params;
  std::unordered_map<std::string, Value> frame;
  std::vector<Value> varargs;
  for (size_t k = 0; k < a.positional.size(); ++k) {
    if (k < params.size()) {
      frame[params[k].name] = a.positional[k];
    } else {
      varargs.push_back(a.positional[k]);
    }
  }
  if (!is_caller && !pending_caller_.is_undefined()) {
    frame["caller"] = pending_caller_;
    pending_caller_ = Value::undefined();
  }
  Value kwargs = Value::make_dict();
  for (auto& kv : a.keyword) {
    const std::string& key = kv.first;  // named, not a structured binding: clang 14 cannot capture those
    const Value& val = kv.second;
    auto it = std::find_if(params.begin(), params.end(), [&](const Param& p) { return p.name == key; });
    if (it == params.end()) {
      kwargs.dict->set(Value::string(key), val);
    } else {
      if (frame.count(key)) fail_at(a.pos, "macro '" + def.name + "' got multiple values for argument '" + key + "'");
      frame[key] = val;
    }
  }
  // Caller blocks run in the scope of the call site; macros in a fresh scope
  // over the template's globals.
  const size_t saved_base = base_;
  base_ = is_caller ? defining_depth : frames_.size();
  frames_.emplace_back(std::move(frame));
  std::string text;
  try {
    auto& f = frames_.back();
    for (const Param& p : params) {
      if (f.count(p.name)) continue;
      f[p.name] = p.default_value ? eval(*p.default_value) : Value::undefined("'" + p.name + "' is undefined");
    }
    f["varargs"] = Value::make_list(std::move(varargs), /*tuple=*/true);
    f["kwargs"] = kwargs;
    text = capture(is_caller ? def.body : def.body);
  } catch (...) {
    frames_.pop_back();
    base_ = saved_base;
    throw;
  }
  frames_.pop_back();
  base_ = saved_base;
  return Value::string(std::move(text));
}

ChatTemplate::ChatTemplate(std::string_view source) : program_(parse_template(source)), source_(source) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const RenderOptions& options) const {
  Interpreter in(options);
  in.set_global("messages", from_json(messages));
  in.set_global("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  in.set_global("bos_token", Value::string(options.bos_token));
  in.set_global("eos_token", Value::string(options.eos_token));
  in.set_global("tools", Value::none());
  in.set_global("documents", Value::none());
  if (options.extra.is_object())
    for (auto it = options.extra.begin(); it != options.extra.end(); ++it) in.set_global(it.key(), from_json(it.value()));
  try {
    return in.run(program_->body);
  } catch (const LoopControl&) {
    throw TemplateError(1, 1, "'break' or 'continue' outside of a loop");
  }
}

// llama.cpp's built-in chatml template, written in Jinja.
ChatTemplate ChatTemplate::chatml() {
  return ChatTemplate(
      "{%- for message in messages -%}"
      "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
      "{%- endfor -%}"
      "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}");
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<Message>& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const Message& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  RenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = tmpl.bos_token();
  options.eos_token = tmpl.eos_token();
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages") {
        msgs = it.value();
      } else {
        options.extra[it.key()] = it.value();
      }
    }
  }
  return tmpl.render(msgs, options);
}

}  // namespace lumen::chat
