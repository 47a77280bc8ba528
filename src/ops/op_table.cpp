// The table of operators and their type rules (see ops/op_table.h).
#include "lumen/ops/op_table.h"

#include <algorithm>

#include "lumen/common/internal_error.h"

namespace lumen::ops {

std::string TensorType::str() const {
  std::string s = to_string(dtype);
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].text();
  return s + "]";
}

bool same_type(const TensorType& a, const TensorType& b, const DimFacts& facts) {
  if (a.dtype != b.dtype || a.shape.size() != b.shape.size()) return false;
  for (size_t i = 0; i < a.shape.size(); ++i)
    if (!facts.equal(a.shape[i].sym, b.shape[i].sym)) return false;
  return true;
}

namespace {

// ------------------------------------------------------------ rule helpers

Verdict ok(TensorType t) {
  Verdict v;
  v.result = std::move(t);
  return v;
}

Verdict at_operand(int i, std::string msg) {
  Verdict v;
  v.operand = i;
  v.message = std::move(msg);
  return v;
}

Verdict at_attr(const char* name, std::string msg) {
  Verdict v;
  v.attr = name;
  v.message = std::move(msg);
  return v;
}

Verdict at_op(std::string msg) { return at_operand(-1, std::move(msg)); }

bool eq(const OpCall& c, const ShapeDim& a, const ShapeDim& b) { return c.facts->equal(a.sym, b.sym); }

// " (add a check that a % b == 0)" when only unproven divisibility keeps a and b apart.
std::string hint(const OpCall& c, const ShapeDim& a, const ShapeDim& b) {
  std::vector<std::string> facts = c.facts->missing_facts(a.sym, b.sym);
  if (facts.empty()) return "";
  std::string s = " (equal only if ";
  for (size_t i = 0; i < facts.size(); ++i) s += (i ? " and " : "") + facts[i];
  return s + ": add a check)";
}

ShapeDim sum(const ShapeDim& a, const ShapeDim& b) { return {a.dim + b.dim, a.sym + b.sym}; }
ShapeDim product(const ShapeDim& a, const ShapeDim& b) { return {a.dim * b.dim, a.sym * b.sym}; }

bool is_matrix(const TensorType& t, DType dtype) { return t.dtype == dtype && t.shape.size() == 2; }

// An f32 [rows, cols] activation; else an error naming the operand.
std::optional<Verdict> need_activation(const OpCall& c, int i, const char* op, const char* what) {
  const TensorType& t = c.operands[static_cast<size_t>(i)];
  if (is_matrix(t, DType::F32)) return std::nullopt;
  return at_operand(i, std::string("'") + op + "' needs an f32 [rows, columns] tensor for '" + what + "', found " +
                           t.str());
}

// An activation with one row per token (ops that read positions or keep the KV cache).
std::optional<Verdict> need_token_rows(const OpCall& c, int i, const char* op, const char* what) {
  const TensorType& t = c.operands[static_cast<size_t>(i)];
  const ShapeDim& n = c.tokens;
  if (eq(c, t.shape[0], n)) return std::nullopt;
  return at_operand(i, std::string("'") + op + "' needs one row per token for '" + what + "' (" + n.text() +
                           " rows), found " + t.str());
}

// ------------------------------------------------------------------ rules

// What matmul weights and embedding tables may be: every weight type of the
// list, or Any (the file's, bound per tensor when compiled for a file). The
// schedule gives each its kernels by its packed format (target/weight_formats.h).
bool any_weight_type(DType t) { return row(t).weight || t == DType::Any; }

Verdict embed(const OpCall& c) {
  const TensorType& table = c.operands[0];
  const TensorType& ids = c.operands[1];
  if (table.shape.size() != 2 || !any_weight_type(table.dtype))
    return at_operand(0, "embed needs a 2-D table of a weight type (or any), found " + table.str());
  if (ids.dtype != DType::I32 || ids.shape.size() != 1)
    return at_operand(1, "embed needs i32 token ids [N], found " + ids.str());
  return ok({DType::F32, {ids.shape[0], table.shape[1]}});
}

Verdict rms_norm_to(const OpCall& c, DType out) {
  if (auto e = need_activation(c, 0, "rms_norm", "x")) return *e;
  const TensorType& x = c.operands[0];
  const TensorType& w = c.operands[1];
  if (auto heads = c.sizes.find("heads"); heads != c.sizes.end()) {
    // Per head: each of `heads` groups of a row is normalized with the same weight (Qwen3's Q/K norms).
    if (w.dtype != DType::F32 || w.shape.size() != 1)
      return at_operand(1, "rms_norm weight must be f32[D] (one head) with heads = " + heads->second.text() + ", found " + w.str());
    ShapeDim width = product(heads->second, w.shape[0]);
    if (!eq(c, width, x.shape[1]))
      return at_operand(1, "rms_norm weight must be f32[D] with " + heads->second.text() + " * D = " + x.shape[1].text() +
                               " to match " + x.str() + ", found " + w.str() + hint(c, width, x.shape[1]));
    return ok({out, x.shape});
  }
  if (w.dtype != DType::F32 || w.shape.size() != 1 || !eq(c, w.shape[0], x.shape[1]))
    return at_operand(1, "rms_norm weight must be f32[" + x.shape[1].text() + "] to match " + x.str() +
                             ", found " + w.str() + (w.shape.size() == 1 ? hint(c, w.shape[0], x.shape[1]) : ""));
  return ok({out, x.shape});
}
Verdict rms_norm(const OpCall& c) { return rms_norm_to(c, DType::F32); }
Verdict rms_norm_quant(const OpCall& c) { return rms_norm_to(c, DType::ActQ8); }

Verdict quantize(const OpCall& c) {
  if (auto e = need_activation(c, 0, "quantize", "x")) return *e;
  return ok({DType::ActQ8, c.operands[0].shape});
}

Verdict matmul(const OpCall& c) {
  const TensorType& x = c.operands[0];
  if (x.shape.size() != 2 || (x.dtype != DType::F32 && x.dtype != DType::ActQ8))
    return at_operand(0, "'matmul' needs an f32 [rows, columns] tensor for 'x', found " + x.str());
  const Epilogue e = c.epilogue;
  const std::string epi = to_string(e);
  const size_t n_weights = c.operands.size() - 1;
  bool has_bias = e == Epilogue::Bias || e == Epilogue::BiasResidual;
  bool has_residual = e == Epilogue::Residual || e == Epilogue::BiasResidual;
  if (has_bias != !c.biases.empty() || (has_bias && c.biases.size() != n_weights))
    return at_attr("epilogue", "epilogue " + epi + " needs " + (has_bias ? "one bias per weight" : "no bias"));
  if (has_residual != c.residual.has_value())
    return at_attr("epilogue", "epilogue " + epi + (has_residual ? " needs" : " takes no") + " residual");
  if (e == Epilogue::SiluMul && n_weights != 2) return at_attr("epilogue", "epilogue silu_mul needs two weights (gate, up)");
  std::optional<ShapeDim> rows;
  for (size_t i = 0; i < n_weights; ++i) {
    const TensorType& w = c.operands[i + 1];
    int at = static_cast<int>(i + 1);
    if (w.shape.size() != 2) return at_operand(at, "'matmul' needs a 2-D weight [rows, row_length], found " + w.str());
    if (!any_weight_type(w.dtype))
      return at_operand(at, "'matmul' needs a weight of a weight type (or any), found " + w.str());
    if (!eq(c, w.shape[1], x.shape[1]))
      return at_op("matmul shapes do not match: " + x.str() + " times " + w.str() + " (row length " +
                                x.shape[1].text() + " vs " + w.shape[1].text() + ")" + hint(c, x.shape[1], w.shape[1]));
    if (has_bias) {
      const TensorType& b = c.biases[i];
      if (b.dtype != DType::F32 || b.shape.size() != 1 || !eq(c, b.shape[0], w.shape[0]))
        return at_attr("epilogue", "a bias of 'matmul' must be f32[" + w.shape[0].text() + "], found " + b.str());
    }
    if (e == Epilogue::SiluMul) rows = w.shape[0];
    else rows = rows ? sum(*rows, w.shape[0]) : w.shape[0];
  }
  // Of one shape; their types may differ where one kernel reads both (fuse_gate_up: one packed format).
  if (e == Epilogue::SiluMul) {
    TensorType up = c.operands[2];
    up.dtype = c.operands[1].dtype;
    if (!same_type(c.operands[1], up, *c.facts))
      return at_operand(2, "the gate and up weights of 'matmul' differ in shape");
  }
  TensorType result{DType::F32, {x.shape[0], *rows}};
  if (c.residual && !same_type(*c.residual, result, *c.facts))
    return at_attr("epilogue", "the residual of 'matmul' is " + c.residual->str() + ", not " + result.str());
  return ok(std::move(result));
}

Verdict rope(const OpCall& c) {
  if (auto e = need_activation(c, 0, "rope", "x")) return *e;
  if (auto e = need_token_rows(c, 0, "rope", "x")) return *e;
  const TensorType& x = c.operands[0];
  const ShapeDim& heads = c.sizes.at("heads");
  const ShapeDim& dim = c.sizes.at("dim");
  ShapeDim width = product(heads, dim);
  if (!eq(c, x.shape[1], width))
    return at_operand(0, "'rope': the row length " + x.shape[1].text() + " of " + x.str() + " is not heads * dim (" +
                             width.text() + ")" + hint(c, x.shape[1], width));
  if (!c.facts->divides(SymDim::constant(2), dim.sym))
    return at_attr("dim", "'rope' needs an even dim: add a check that " + dim.text() + " % 2 == 0");
  if (c.operands.size() > 1) {  // frequency factors: one divisor per rotated pair (Llama 3's rope_freqs)
    const TensorType& f = c.operands[1];
    ShapeDim half{dim.dim / Dim::constant(2), dim.sym / SymDim::constant(2)};
    if (f.dtype != DType::F32 || f.shape.size() != 1 || !eq(c, f.shape[0], half))
      return at_operand(1, "rope's freqs must be f32[" + half.text() + "], one factor per rotated pair, found " + f.str());
  }
  return ok(x);
}

Verdict attention(const OpCall& c) {
  static const char* const names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    if (auto e = need_activation(c, i, "attention", names[i])) return *e;
    if (auto e = need_token_rows(c, i, "attention", names[i])) return *e;
  }
  const TensorType& q = c.operands[0];
  const TensorType& k = c.operands[1];
  const TensorType& v = c.operands[2];
  const ShapeDim& heads = c.sizes.at("heads");
  const ShapeDim& kv_heads = c.sizes.count("kv_heads") ? c.sizes.at("kv_heads") : heads;
  const ShapeDim& dim = c.sizes.at("dim");
  ShapeDim q_width = product(heads, dim), kv_width = product(kv_heads, dim);
  if (!eq(c, q.shape[1], q_width))
    return at_operand(0, "'attention': the row length " + q.shape[1].text() + " of " + q.str() + " is not heads * dim (" +
                             q_width.text() + ")" + hint(c, q.shape[1], q_width));
  if (!eq(c, k.shape[1], kv_width))
    return at_operand(1, "'attention': the row length " + k.shape[1].text() + " of " + k.str() +
                             " is not kv_heads * dim (" + kv_width.text() + ")" + hint(c, k.shape[1], kv_width));
  if (!same_type(k, v, *c.facts))
    return at_operand(2, "'attention' needs k and v of the same shape, found " + k.str() + " and " + v.str());
  if (!c.facts->divides(kv_heads.sym, heads.sym))
    return at_attr(c.sizes.count("kv_heads") ? "kv_heads" : "heads",
                   "'attention' needs heads to be a multiple of kv_heads: add a check that " + heads.text() + " % " +
                       kv_heads.text() + " == 0");
  return ok(q);
}

// add, mul: two activations of one type, or an activation and a weight row
// broadcast over its rows (in either order).
Verdict elementwise(const OpCall& c, const char* verb) {
  if (c.is_weight[0] && c.is_weight[1]) return at_op(std::string("cannot ") + verb + " two weights");
  int act = c.is_weight[0] ? 1 : 0, other = 1 - act;
  const TensorType& a = c.operands[static_cast<size_t>(act)];
  const TensorType& b = c.operands[static_cast<size_t>(other)];
  std::string both = std::string("cannot ") + verb + " " + c.operands[0].str() + " and " + c.operands[1].str();
  if (a.dtype != DType::F32 || b.dtype != DType::F32) return at_op(both + ": both must be f32");
  if (a.shape.size() != 2) return at_operand(act, std::string("cannot ") + verb + " " + a.str() + ": an activation is f32[rows, columns]");
  if (c.is_weight[static_cast<size_t>(other)]) {
    if (b.shape.size() != 1 || !eq(c, b.shape[0], a.shape[1]))
      return at_operand(other, both + ": a weight must be a row f32[" + a.shape[1].text() + "] (broadcast over the rows)" +
                                   (b.shape.size() == 1 ? hint(c, b.shape[0], a.shape[1]) : ""));
    return ok(a);
  }
  if (!same_type(a, b, *c.facts)) {
    std::string why;
    if (a.shape.size() == b.shape.size())
      for (size_t i = 0; i < a.shape.size() && why.empty(); ++i) why = hint(c, a.shape[i], b.shape[i]);
    return at_op(both + ": shapes do not match" + why);
  }
  return ok(a);
}
Verdict add(const OpCall& c) { return elementwise(c, "add"); }
Verdict mul(const OpCall& c) { return elementwise(c, "multiply"); }

Verdict same_as_input(const OpCall& c, const char* op) {
  if (auto e = need_activation(c, 0, op, "x")) return *e;
  return ok(c.operands[0]);
}
Verdict silu(const OpCall& c) { return same_as_input(c, "silu"); }
Verdict scale(const OpCall& c) { return same_as_input(c, "scale"); }
Verdict gelu(const OpCall& c) { return same_as_input(c, "gelu"); }
Verdict softcap(const OpCall& c) { return same_as_input(c, "softcap"); }
Verdict softmax(const OpCall& c) { return same_as_input(c, "softmax"); }

Verdict silu_mul(const OpCall& c) {
  if (auto e = need_activation(c, 0, "silu_mul", "gate")) return *e;
  if (!same_type(c.operands[0], c.operands[1], *c.facts))
    return at_operand(1, "'silu_mul': shapes do not match: " + c.operands[0].str() + " and " + c.operands[1].str());
  return ok(c.operands[0]);
}

Verdict last(const OpCall& c) {
  if (auto e = need_activation(c, 0, "last", "x")) return *e;
  if (auto e = need_token_rows(c, 0, "last", "x")) return *e;
  return ok({DType::F32, {ShapeDim::of(1), c.operands[0].shape[1]}});
}

Verdict view(const OpCall& c) {
  const TensorType& x = c.operands[0];
  if (x.shape.size() != 2) return at_operand(0, "'view' needs a [rows, columns] tensor, found " + x.str());
  return ok({x.dtype, {x.shape[0], c.sizes.at("cols")}});
}

std::vector<std::string> epilogue_names() {
  std::vector<std::string> names;
  for (const EpilogueRow& e : kEpilogues) names.emplace_back(e.name);
  return names;
}

}  // namespace

const std::vector<OpInfo>& op_table() {
  using R = Role;
  using K = AttrKind;
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> t = {
      {OpId::Embed, {{"table", R::Weight}, {"tokens", R::Activation}}, {}, embed, false,
       "rows of the table picked by the token ids: f32[N, cols]"},
      {OpId::RmsNorm, {{"x", R::Activation}, {"weight", R::Weight}},
       {{"eps", K::Scalar, true}, {"heads", K::Size, false, {}, "one group: the whole row"}}, rms_norm, false,
       "x / sqrt(mean(x^2) + eps) * weight, per row; with heads, per head (weight one head wide)"},
      {OpId::RmsNormQuant, {{"x", R::Activation}, {"weight", R::Weight}},
       {{"eps", K::Scalar, true}, {"heads", K::Size, false, {}, "one group: the whole row"}}, rms_norm_quant, false,
       "rms_norm, then quantize"},
      {OpId::Quantize, {{"x", R::Activation}}, {}, quantize, false,
       "f32 rows to act_q8 blocks (matmul's input)"},
      {OpId::MatMul, {{"x", R::Activation}, {"w", R::Weight, true}},
       {{"epilogue", K::Choice, false, epilogue_names(), "none", true}}, matmul,
       false, "x times the transposed weights (fused: side by side), with an optional epilogue"},
      {OpId::Rope, {{"x", R::Activation}, {"freqs", R::Weight, false, true}},
       {{"heads", K::Size, true},
        {"dim", K::Size, true},
        {"base", K::Scalar, false, {}, "10000"},
        {"mode", K::Choice, false, {"neox", "normal"}, "neox"}},
       rope, false, "rotary position embedding of each head, in place; freqs divide each pair's angle"},
      {OpId::Attention, {{"q", R::Activation}, {"k", R::Activation}, {"v", R::Activation}},
       {{"heads", K::Size, true},
        {"kv_heads", K::Size, false, {}, "heads"},
        {"dim", K::Size, true},
        {"scale", K::Scalar, false, {}, "1/sqrt(dim); also 1 / sqrt(size)"},
        {"scale_rsqrt", K::Size, false, {}, "scale = 1/sqrt(this size), from `scale = 1 / sqrt(size)`", true},
        {"softcap", K::Scalar, false, {}, "none"},
        {"window", K::Size, false, {}, "none"},
        {"window_pattern", K::Size, false, {}, "0: the window on every layer"}},
       attention, true,
       "causal grouped-query attention over this op's KV cache (one per layer), with optional logit soft-capping "
       "and a sliding window on the layers l with pattern == 0 || l % pattern < pattern - 1"},
      {OpId::Add, {{"a", R::Either}, {"b", R::Either}}, {}, add, false, "a + b (a weight row broadcasts)"},
      {OpId::Mul, {{"a", R::Either}, {"b", R::Either}}, {}, mul, false, "a * b (a weight row broadcasts)"},
      {OpId::Silu, {{"x", R::Activation}}, {}, silu, false, "x * sigmoid(x)"},
      {OpId::SiluMul, {{"gate", R::Activation}, {"up", R::Activation}}, {}, silu_mul, false,
       "silu(gate) * up"},
      {OpId::Softmax, {{"x", R::Activation}}, {}, softmax, false, "softmax of each row"},
      {OpId::Last, {{"x", R::Activation}}, {}, last, false, "the last row: f32[1, cols]"},
      {OpId::View, {{"x", R::Activation}}, {{"offset", K::Size, true}, {"cols", K::Size, true}}, view,
       false, "columns [offset, offset + cols) of x"},
      {OpId::Scale, {{"x", R::Activation}},
       // factor is required in the DSL (the lowering says so); the IR carries
       // either it or factor_sqrt.
       {{"factor", K::Scalar, false, {}, "sqrt(factor_sqrt)"},
        {"factor_sqrt", K::Size, false, {}, "factor = sqrt(this size), from `factor = sqrt(size)`", true}},
       scale, false, "x * factor (a param, a number or sqrt(size))"},
      {OpId::Gelu, {{"x", R::Activation}}, {}, gelu, false, "GELU, tanh approximation (as ggml)"},
      {OpId::Softcap, {{"x", R::Activation}}, {{"cap", K::Scalar, true}}, softcap, false,
       "cap * tanh(x / cap)"},
    };
    // In the list's order, with the list's name for each entry; one entry per op.
    std::sort(t.begin(), t.end(), [](const OpInfo& a, const OpInfo& b) { return a.id < b.id; });
    LUMEN_ASSERT(t.size() == kOpCount, "the op table needs one entry per op of the list");
    for (size_t i = 0; i < t.size(); ++i) {
      LUMEN_ASSERT(static_cast<size_t>(t[i].id) == i, std::string("a second entry for op '") + to_string(t[i].id) + "'");
      t[i].name = to_string(t[i].id);
      t[i].in_dsl = row(t[i].id).in_dsl;
    }
    return t;
  }();
  return table;
}

const OpInfo& op_info(OpId id) { return op_table()[static_cast<size_t>(id)]; }

const OpInfo* find_op(std::string_view name) {
  std::optional<OpId> id = parse_op(name);
  return id ? &op_info(*id) : nullptr;
}

const AttrSpec* find_attr(const OpInfo& op, std::string_view name) {
  for (const AttrSpec& a : op.attrs)
    if (name == a.name) return &a;
  return nullptr;
}

Verdict infer(const OpInfo& op, const OpCall& call) {
  size_t want = op.operands.size();
  bool variadic = !op.operands.empty() && op.operands.back().variadic;
  bool optional = !op.operands.empty() && op.operands.back().optional;
  size_t have = call.operands.size();
  if (have != want && !(variadic && have > want) && !(optional && have + 1 == want)) {
    Verdict v;
    v.message = std::string("'") + op.name + "' takes " + (variadic ? "at least " : "") + std::to_string(want) +
                " operand" + (want == 1 ? "" : "s") + ", has " + std::to_string(have);
    return v;
  }
  for (size_t i = 0; i < have; ++i) {
    const OperandSpec& spec = op.operands[std::min(i, want - 1)];
    bool weight = i < call.is_weight.size() && call.is_weight[i];
    if (spec.role == Role::Weight && !weight)
      return at_operand(static_cast<int>(i), std::string("operand '") + spec.name + "' of '" + op.name +
                                                 "' must be a weight, found a computed " + call.operands[i].str() +
                                                 " value");
    if (spec.role == Role::Activation && weight)
      return at_operand(static_cast<int>(i), std::string("operand '") + spec.name + "' of '" + op.name +
                                                 "' must be a computed value, not a weight");
  }
  for (const AttrSpec& a : op.attrs) {
    if (a.kind == AttrKind::Size && a.required && !call.sizes.count(a.name))
      return at_attr(a.name, std::string("'") + op.name + "' needs attribute '" + a.name + "'");
    if (a.kind == AttrKind::Choice) {
      auto it = call.choices.find(a.name);
      if (it != call.choices.end() && std::find(a.choices.begin(), a.choices.end(), it->second) == a.choices.end()) {
        std::string list;
        for (const auto& ch : a.choices) list += (list.empty() ? "" : ", ") + ch;
        return at_attr(a.name, std::string("attribute '") + a.name + "' of '" + op.name + "' must be one of " + list +
                                   ", not '" + it->second + "'");
      }
    }
  }
  return op.rule(call);
}

}  // namespace lumen::ops
