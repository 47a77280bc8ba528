// IR text printer: the stable, readable form documented in ir/text.h.
#include <charconv>
#include <map>

#include "lumen/ir/text.h"

namespace lumen::ir {

namespace {

std::string quote(const std::string& s) { return Attr::string(s).str(); }

std::string number(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  return std::string(buf, res.ptr);
}

// Comma-separated list builder (appending only: `"..." + std::string&&`
// trips a GCC 12 -Wrestrict false positive under -O2).
struct List {
  std::string text;
  List& add(const std::string& item) {
    if (!text.empty()) text += ", ";
    text += item;
    return *this;
  }
};

std::string shape_str(const std::vector<Dim>& shape) {
  List list;
  for (const auto& d : shape) list.add(d.str());
  std::string out = "[";
  out += list.text;
  out += "]";
  return out;
}

class Printer {
 public:
  explicit Printer(const Module& m) : m_(m) {}

  std::string run() {
    out_ += "module " + m_.name;
    if (!m_.source.empty()) out_ += " source " + quote(m_.source);
    out_ += "\n\n";
    for (const auto& p : m_.params) print_param(p);
    for (const auto& c : m_.checks) {
      out_ += "check " + c.lhs.str() + " " + to_string(c.cmp) + " " + c.rhs.str() + " : ";
      out_ += quote(c.message);
      out_ += "\n";
    }
    if (!m_.params.empty() || !m_.checks.empty()) out_ += "\n";
    for (const auto& w : m_.weights) print_weight(w);
    if (!m_.weights.empty()) out_ += "\n";
    print_function(m_.forward);
    if (m_.memory) print_memory(*m_.memory);
    return out_;
  }

 private:
  void print_param(const Param& p) {
    out_ += "param " + p.name + " : " + (p.kind == Param::Kind::Int ? "int" : "float") + " = ";
    switch (p.source) {
      case Param::Source::Key:
        out_ += "key(" + quote(p.gguf_key);
        if (p.default_value) out_ += ", default = " + number(*p.default_value);
        if (p.default_expr) out_ += ", default = " + p.default_expr->str();
        out_ += ")";
        break;
      case Param::Source::Length:
        out_ += "len(" + quote(p.gguf_key) + ")";
        break;
      case Param::Source::Derived:
        out_ += p.derived ? p.derived->str() : "0";
        break;
      case Param::Source::Constant:
        out_ += "const(" + number(p.default_value.value_or(0)) + ")";
        break;
    }
    out_ += "\n";
  }

  void print_weight(const Weight& w) {
    out_ += "weight @" + w.name + (w.per_layer ? "[l]" : "") + " : " + to_string(w.dtype);
    out_ += shape_str(w.shape);
    out_ += " = " + quote(w.gguf_name);
    if (!w.fallback.empty()) out_ += " else " + quote(w.fallback);
    if (w.optional) out_ += " optional";
    if (!w.types.empty()) {
      out_ += " types(";
      for (size_t i = 0; i < w.types.size(); ++i) out_ += (i == 0 ? "" : ", ") + std::string(to_string(w.types[i]));
      out_ += ")";
    }
    out_ += "\n";
  }

  std::string name(ValueId v) {
    auto it = numbers_.find(v);
    std::string out = "%";
    if (it == numbers_.end()) {
      out += "<undefined ";
      out += std::to_string(v);
      out += ">";
    } else {
      out += std::to_string(it->second);
    }
    return out;
  }
  std::string define(ValueId v) {
    numbers_[v] = next_++;
    return name(v);
  }
  std::string type_of(const Function& f, ValueId v) {
    if (v < 0 || static_cast<size_t>(v) >= f.values.size()) return "?";
    return f.type(v).str();
  }

  void print_function(const Function& f) {
    out_ += "func @forward(";
    if (f.tokens != kNoValue) {
      out_ += define(f.tokens);
      out_ += " : " + type_of(f, f.tokens);
    }
    out_ += ") -> " + f.result_type.str() + " {\n";
    for (const auto& op : f.pre) print_op(f, op, "  ");
    if (f.loop) print_loop(f, *f.loop);
    for (const auto& op : f.post) print_op(f, op, "  ");
    if (f.result != kNoValue) {
      out_ += "  return ";
      out_ += name(f.result);
      out_ += "\n";
    }
    out_ += "}\n";
  }

  void print_loop(const Function& f, const LayerLoop& loop) {
    // Results are numbered first so that the header reads `%2 = layers ...`.
    List results, args, yields;
    for (const auto& c : loop.carried) results.add(define(c.result));
    for (const auto& c : loop.carried) {
      std::string init = name(c.init);
      std::string arg = define(c.arg);
      arg += " = " + init + " : " + type_of(f, c.arg);
      args.add(arg);
    }
    out_ += "  " + results.text + " = layers " + loop.trip_count.str() + " iter(" + args.text + ") {\n";
    for (const auto& op : loop.body) print_op(f, op, "    ");
    for (const auto& c : loop.carried) yields.add(name(c.yield));
    out_ += "    yield " + yields.text + "\n  }\n";
  }

  void print_op(const Function& f, const Op& op, const char* indent) {
    // Operands are named before the result is defined (SSA: no self-use).
    List inputs, types;
    for (ValueId v : op.operands) {
      inputs.add(name(v));
      types.add(type_of(f, v));
    }
    for (const auto& w : op.weights) inputs.add(w.str());
    List attrs;
    if (op.epilogue != Epilogue::None) {
      std::string epi = "epilogue = ";
      epi += to_string(op.epilogue);
      List args;
      for (const auto& b : op.biases) args.add(b.str());
      if (op.residual != kNoValue) args.add(name(op.residual));
      if (!args.text.empty()) epi += "(" + args.text + ")";
      attrs.add(epi);
    }
    for (const auto& [key, value] : op.attrs) attrs.add(key + " = " + value.str());
    std::string line = indent;
    line += define(op.result);
    line += " = ";
    line += to_string(op.kind);
    line += " " + inputs.text + " : (" + types.text + ") -> " + type_of(f, op.result);
    if (!attrs.text.empty()) line += " {" + attrs.text + "}";
    if (op.line > 0) line += " line " + std::to_string(op.line);
    out_ += line + "\n";
  }

  void print_memory(const MemoryPlan& plan) {
    out_ += "\nmemory arena = " + plan.arena_bytes.str() + " {\n";
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      const auto& b = plan.buffers[i];
      List values;
      for (ValueId v : b.values) values.add(name(v));
      out_ += "  buffer " + std::to_string(i) + " : " + to_string(b.dtype) + "[" + b.rows.str() + ", ";
      out_ += b.cols.str() + "] at " + b.offset.str() + " size " + b.bytes.str() + " holds " + values.text;
      out_ += "\n";
    }
    out_ += "}\n";
  }

  const Module& m_;
  std::string out_;
  std::map<ValueId, int> numbers_;
  int next_ = 0;
};

}  // namespace

std::string print_module(const Module& m) { return Printer(m).run(); }

}  // namespace lumen::ir
