// Pass lower_to_program: scheduled, memory-planned IR -> program::Program
// (see passes.h and include/lumen/program/program.h for the target's semantics).
#include <map>
#include <string>
#include <vector>

#include "lumen/passes/passes.h"
#include "lumen/ops/op_table.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using program::Dim;

class Lowering {
 public:
  explicit Lowering(const ir::Module& m) : m_(m), f_(m.forward) {}

  program::Program run() {
    if (!m_.memory) fail("the module has no memory plan (run plan_memory first)");
    program::Program p;
    p.arch = m_.name;
    p.source_name = m_.source;
    lower_params(p);
    for (const auto& c : m_.checks) {
      program::Check check;
      check.lhs = c.lhs;
      check.rhs = c.rhs;
      check.cmp = static_cast<program::Check::Cmp>(c.cmp);  // same order
      check.message = c.message;
      p.checks.push_back(std::move(check));
    }
    lower_weights(p);
    lower_buffers(p);
    for (const auto& op : f_.pre) lower_op(op, p.pre);
    if (f_.loop) {
      p.n_layers = f_.loop->trip_count;
      for (const auto& op : f_.loop->body) lower_op(op, p.layer);
    } else {
      p.n_layers = Dim::constant(0);
    }
    for (const auto& op : f_.post) lower_op(op, p.post);
    p.tokens_buffer = view(f_.tokens).buffer;
    p.logits_buffer = view(f_.result).buffer;
    p.n_ctx_train = context_length(p);
    p.kv_dim = kv_dim_.value_or(Dim::constant(0));
    p.arena_bytes = m_.memory->arena_bytes;
    return p;
  }

 private:
  // The pipeline before this lowering guarantees what it checks (params
  // exist, every value has a buffer, every matmul is scheduled): a failure is
  // a bug in Lumen, not in the user's program.
  [[noreturn]] void fail(const std::string& msg) const { LUMEN_INTERNAL_ERROR("lower_to_program: " + msg); }

  int param_index(const std::string& name) const {
    for (size_t i = 0; i < m_.params.size(); ++i)
      if (m_.params[i].name == name) return static_cast<int>(i);
    fail("unknown param '" + name + "'");
  }

  void lower_params(program::Program& p) {
    for (const auto& param : m_.params) {
      program::HParam h;
      h.name = param.name;
      h.kind = param.kind == ir::Param::Kind::Int ? program::HParam::Kind::Int : program::HParam::Kind::Float;
      switch (param.source) {
        case ir::Param::Source::Key:
          h.gguf_key = param.gguf_key;
          h.default_value = param.default_value;
          h.derived = param.default_expr;
          h.required = !param.default_value && !param.default_expr;
          break;
        case ir::Param::Source::Length:
          h.gguf_key = "len(" + param.gguf_key + ")";  // the runtime's spelling for an array length
          h.required = true;
          break;
        case ir::Param::Source::Derived:
          h.required = false;
          h.derived = param.derived;
          break;
        case ir::Param::Source::Constant:  // no key: the default is the value
          h.required = false;
          h.default_value = param.default_value;
          break;
      }
      // Integer params are sizes and counts (they divide and multiply
      // shapes): the loader rejects anything below 1 with a message naming
      // the param, before a shape evaluates to zero or divides by it.
      if (h.kind == program::HParam::Kind::Int) h.min_value = 1;
      p.hparams.push_back(std::move(h));
    }
  }

  void lower_weights(program::Program& p) {
    for (const auto& w : m_.weights) {
      program::Weight pw;
      pw.name = w.name;
      pw.gguf_name = w.gguf_name;
      pw.per_layer = w.per_layer;
      LUMEN_ASSERT(!w.types.empty(), "lower_to_program: weight @" + w.name + " has no bound types");
      pw.dtypes = w.types;
      for (auto it = w.shape.rbegin(); it != w.shape.rend(); ++it) pw.shape.push_back(*it);  // ggml order
      pw.fallback = w.fallback;
      pw.optional = w.optional;
      weight_index_[w.name] = static_cast<int>(p.weights.size());
      p.weights.push_back(std::move(pw));
    }
  }

  void lower_buffers(program::Program& p) {
    const auto& buffers = m_.memory->buffers;
    for (size_t i = 0; i < buffers.size(); ++i) {
      const auto& b = buffers[i];
      program::Buffer pb;
      pb.name = buffer_name(b, i);
      pb.dtype = b.dtype;
      pb.rows = b.rows;
      pb.cols = b.cols;
      pb.offset = b.offset;
      for (ValueId v : b.values) buffer_of_[v] = static_cast<int>(i);
      p.buffers.push_back(std::move(pb));
    }
    // Column offsets: views shift their source's, everything else starts at 0.
    auto visit = [&](const ir::Op& op) {
      if (op.kind == ops::OpId::View) col_offset_[op.result] = offset_of(op.operands.at(0)) + op.attr("offset")->dim;
      else if (op.kind == ops::OpId::Rope) col_offset_[op.result] = offset_of(op.operands.at(0));
      else if (op.residual != ir::kNoValue && buffer_of_.count(op.residual) && buffer_of_.count(op.result) &&
               buffer_of_[op.residual] == buffer_of_[op.result])
        col_offset_[op.result] = offset_of(op.residual);
    };
    for (const auto& op : f_.pre) visit(op);
    if (f_.loop) {
      for (const auto& c : f_.loop->carried) col_offset_[c.arg] = offset_of(c.init);
      for (const auto& op : f_.loop->body) visit(op);
      for (const auto& c : f_.loop->carried) col_offset_[c.result] = offset_of(c.arg);
    }
    for (const auto& op : f_.post) visit(op);
  }

  // "tokens", "logits", else the op that first writes the buffer and its
  // index: "embed1", "matmul3".
  std::string buffer_name(const ir::ArenaBuffer& b, size_t index) const {
    for (ValueId v : b.values) {
      if (v == f_.tokens) return "tokens";
      if (v == f_.result) return "logits";
    }
    std::string name = "buffer";
    for_each_op(f_, [&](const ir::Op& op) {
      if (!b.values.empty() && op.result == b.values.front()) name = ir::to_string(op.kind);
    });
    name += std::to_string(index);
    return name;
  }

  using ValueId = ir::ValueId;
  ir::Dim offset_of(ValueId v) const {
    auto it = col_offset_.find(v);
    return it == col_offset_.end() ? ir::Dim::constant(0) : it->second;
  }

  program::View view(ValueId v) const {
    auto it = buffer_of_.find(v);
    if (it == buffer_of_.end()) fail("a value has no buffer in the memory plan");
    const ir::Type& t = f_.type(v);
    program::View out;
    out.buffer = it->second;
    out.col_offset = offset_of(v);
    out.cols = t.shape.size() == 2 ? t.shape[1] : Dim::constant(1);
    return out;
  }

  std::vector<int> weights(const std::vector<ir::WeightRef>& refs) const {
    std::vector<int> out;
    for (const auto& r : refs) out.push_back(weight_index_.at(r.name));
    return out;
  }

  Dim dim_attr(const ir::Op& op, const char* name) const {
    const ir::Attr* a = op.attr(name);
    if (!a || a->kind != ir::Attr::Kind::Dim) fail(detail::describe(op) + ": missing attribute " + name);
    return a->dim;
  }
  int param_attr(const ir::Op& op, const char* name) const {
    const ir::Attr* a = op.attr(name);
    if (!a || a->kind != ir::Attr::Kind::Ident) fail(detail::describe(op) + ": missing attribute " + name);
    return param_index(a->text);
  }
  int64_t int_attr(const ir::Op& op, const char* name) const {
    const ir::Attr* a = op.attr(name);
    if (!a || a->kind != ir::Attr::Kind::Int) fail(detail::describe(op) + ": not scheduled (no " + name + ")");
    return a->int_value;
  }
  // A kernel attribute: one kernel per format, comma-separated (as the schedule writes it).
  std::vector<program::KernelId> kernel_attr(const ir::Op& op, const char* name, size_t formats) const {
    const ir::Attr* a = op.attr(name);
    if (!a || a->kind != ir::Attr::Kind::String) fail(detail::describe(op) + ": not scheduled (no " + name + ")");
    std::vector<program::KernelId> out;
    for (const std::string& text : split(a->text)) {
      std::string why;
      std::optional<program::KernelId> k = program::parse_kernel_id(text, &why);
      if (!k) fail(detail::describe(op) + ": " + name + " '" + text + "': " + why);
      out.push_back(*k);
    }
    if (out.size() != formats) fail(detail::describe(op) + ": " + name + " names a kernel per format");
    return out;
  }
  // The packed formats the schedule gave the op kernels for: its `formats`, else Q8_0.
  std::vector<ops::DType> formats_attr(const ir::Op& op) const {
    const ir::Attr* a = op.attr("formats");
    if (!a) return {ops::DType::Q8_0};
    std::vector<ops::DType> out;
    for (const std::string& text : split(a->text)) {
      std::optional<ops::DType> d = ops::parse_dtype_id(text);
      if (!d) fail(detail::describe(op) + ": unknown format '" + text + "'");
      out.push_back(*d);
    }
    return out;
  }
  static std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out(1);
    for (char c : s) {
      if (c == ',') out.emplace_back();
      else out.back() += c;
    }
    return out;
  }

  void lower_op(const ir::Op& op, std::vector<program::Op>& out) {
    if (op.kind == ops::OpId::View) return;  // a column range of its source: no work
    program::Op p;
    p.line = op.line;
    for (ValueId v : op.operands) p.inputs.push_back(view(v));
    p.output = view(op.result);
    p.weights = weights(op.weights);
    p.kind = op.kind;
    switch (op.kind) {
      case ops::OpId::RmsNorm:
      case ops::OpId::RmsNormQuant:
        p.eps_hparam = param_attr(op, "eps");
        if (op.attr("heads")) p.n_heads = dim_attr(op, "heads");
        break;
      case ops::OpId::MatMul:
        p.biases = weights(op.biases);
        p.epilogue = op.epilogue;
        if (op.residual != ir::kNoValue) p.residual = view(op.residual);
      {
        const std::vector<ops::DType> formats = formats_attr(op);
        const auto decode = kernel_attr(op, "decode_kernel", formats.size());
        const auto batch = kernel_attr(op, "batch_kernel", formats.size());
        const auto prefill = kernel_attr(op, "prefill_kernel", formats.size());
        p.schedule.formats.clear();
        for (size_t i = 0; i < formats.size(); ++i) p.schedule.formats.push_back({formats[i], decode[i], batch[i], prefill[i]});
      }
        p.schedule.rows_per_task = int_attr(op, "rows_per_task");
        p.schedule.tokens_per_task = int_attr(op, "tokens_per_task");
        break;
      case ops::OpId::Rope: {
        const ir::Attr* mode = op.attr("mode");
        p.rope_mode = mode && mode->text == "normal" ? program::RopeMode::Normal : program::RopeMode::Neox;
        p.rope_base_hparam = param_attr(op, "base");
        p.n_heads = dim_attr(op, "heads");
        p.head_dim = dim_attr(op, "dim");
        break;
      }
      case ops::OpId::Attention:
        p.n_heads = dim_attr(op, "heads");
        p.n_heads_kv = dim_attr(op, "kv_heads");
        p.head_dim = dim_attr(op, "dim");
        if (!kv_dim_) kv_dim_ = f_.type(op.operands.at(1)).shape.at(1);
        if (op.attr("scale")) p.attn_scale_hparam = param_attr(op, "scale");
        if (op.attr("scale_rsqrt")) p.attn_scale_rsqrt = dim_attr(op, "scale_rsqrt");
        if (op.attr("softcap")) p.attn_softcap_hparam = param_attr(op, "softcap");
        if (op.attr("window")) p.window = dim_attr(op, "window");
        if (op.attr("window_pattern")) p.window_pattern = dim_attr(op, "window_pattern");
        break;
      case ops::OpId::Scale:
        if (op.attr("factor_sqrt"))
          p.scalar_sqrt = dim_attr(op, "factor_sqrt");
        else
          p.scalar_hparam = param_attr(op, "factor");
        break;
      default:
        // An elementwise op's one scalar attribute (a cap) is the program op's scalar.
        for (const ops::AttrSpec& a : ops::op_info(op.kind).attrs)
          if (a.kind == ops::AttrKind::Scalar && a.required) p.scalar_hparam = param_attr(op, a.name);
        break;
    }
    out.push_back(std::move(p));
  }

  // The training context length: the standard GGUF key "<arch>.context_length",
  // through the param that reads it. A program without such a param still
  // bounds --ctx by it: it gets an hparam of its own for the key, required,
  // so that a GGUF without the key fails to bind naming it (docs/runtime.md).
  Dim context_length(program::Program& p) const {
    const std::string key = m_.name + ".context_length";
    for (const ir::Param& param : m_.params)
      if (param.source == ir::Param::Source::Key && param.gguf_key == key) return Dim::param(param.name);
    program::HParam h;
    h.name = "n_ctx_train";
    auto taken = [&p](const std::string& name) {
      for (const program::HParam& other : p.hparams)
        if (other.name == name) return true;
      return false;
    };
    while (taken(h.name)) h.name += "_";
    h.gguf_key = key;
    h.kind = program::HParam::Kind::Int;
    h.required = true;
    h.min_value = 1;
    p.hparams.push_back(std::move(h));
    return Dim::param(p.hparams.back().name);
  }

  const ir::Module& m_;
  const ir::Function& f_;
  std::map<std::string, int> weight_index_;
  std::map<ValueId, int> buffer_of_;
  std::map<ValueId, ir::Dim> col_offset_;
  std::optional<Dim> kv_dim_;
};

}  // namespace

program::Program lower_to_program(const ir::Module& m) { return Lowering(m).run(); }

}  // namespace lumen::passes
