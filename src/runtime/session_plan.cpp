// Planning: the program resolved for one batch size (session_plan.h). Every
// buffer and view is evaluated and bounds-checked against the arena, every op
// gets its hparams, its matmul kernel and thread split, and is checked against
// the op table's type rule on this binding's weights, so that running it
// cannot go out of bounds. Also the batched post section's template.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lumen/ops/op_table.h"
#include "lumen/quant/quant.h"
#include "lumen/runtime/kernels.h"
#include "lumen/target/packed_kquant.h"
#include "lumen/target/weight_formats.h"
#include "session_impl.h"

namespace lumen::runtime {

using program::DType;
using program::Op;
using ::lumen::ops::OpId;
using program::Section;
using kernels::kMaxHeadDim;

namespace {

// The bytes a view's rows span in the arena.
std::pair<const uint8_t*, const uint8_t*> extent(const RView& v) {
  const int64_t row = ::lumen::ops::row_bytes(v.dtype, v.cols);
  return {v.base, v.base + (v.rows - 1) * v.stride + row};
}

bool overlaps(const RView& a, const RView& b) {
  const auto [a0, a1] = extent(a);
  const auto [b0, b1] = extent(b);
  return a0 < b1 && b0 < a1;
}

// Whether writing `out` row by row while `in` is read row by row (row i of
// each in one task, any order across tasks) reads what the ops one after the
// other would: the two never share bytes, or they address the same rows
// (one buffer: row i of one is only ever row i of the other).
bool row_safe(const RView& out, const RView& in) {
  if (!overlaps(out, in)) return true;
  return out.stride == in.stride && out.rows == in.rows && std::abs(out.base - in.base) < out.stride;
}

// Marks the runs of consecutive row-local ops of one section (ROp::row_run):
// each task of a run computes one row through all its ops in order, so every
// value is the one the ops computed one after the other, provided no op of
// the run writes bytes another row of the run reads (row_safe). An Attention
// after a run stores its K/V rows in the run (kv_stored_by_run).
void mark_row_runs(std::vector<ROp>& ops) {
  for (size_t i = 0; i < ops.size();) {
    size_t end = i;
    auto fits = [&](size_t j) {
      const ROp& r = ops[j];
      if (!::lumen::ops::row(r.op->kind).row_local || r.in.empty() || r.out.buffer < 0) return false;
      if (r.in[0].rows != ops[i].in[0].rows || r.out.rows != r.in[0].rows) return false;
      // What it writes against what the run reads, and what it reads or
      // writes against what the run wrote before it.
      for (size_t a = i; a <= j; ++a)
        for (const RView& in : ops[a].in)
          if (!row_safe(r.out, in)) return false;
      for (size_t a = i; a < j; ++a) {
        if (!row_safe(r.out, ops[a].out)) return false;
        for (const RView& in : r.in)
          if (!row_safe(ops[a].out, in)) return false;
      }
      return true;
    };
    while (end < ops.size() && fits(end)) ++end;
    if (end == i) {
      ++i;
      continue;
    }
    // The K and V rows the Attention stores are rows of the run's rows (the
    // store writes only the KV cache).
    const bool attention = end < ops.size() && ops[end].op->kind == OpId::Attention && ops[end].in.size() >= 3 &&
                           ops[end].in[1].rows == ops[i].in[0].rows && ops[end].in[2].rows == ops[i].in[0].rows;
    if (end - i > 1 || attention) {
      ops[i].row_run = static_cast<int>(end - i);
      ops[i].starts_row_run = true;
      for (size_t j = i + 1; j < end; ++j) ops[j].row_run = 0;
      if (attention) ops[end].kv_stored_by_run = true;
    }
    i = end;
  }
}

// Folds each Quantize of a MatMul's or an Attention's whole output into the
// producer's tasks (ROp::quantizes_output) when every task writes whole
// 32-column blocks: a MatMul's tasks cover rows_per_task output columns, an
// Attention's the heads of one KV head. Activation blocks are quantized one
// by one, so each block gets the bits the Quantize op would give it.
void mark_folded_quantize(std::vector<ROp>& ops) {
  for (size_t i = 1; i < ops.size(); ++i) {
    ROp& q = ops[i];
    ROp& producer = ops[i - 1];
    if (q.op->kind != OpId::Quantize || q.row_run != 1 || q.starts_row_run || q.in.size() != 1 || producer.out.buffer < 0) continue;
    const RView& x = q.in[0];
    if (!x.same_place(producer.out) || x.cols != producer.out.cols || x.rows != producer.out.rows ||
        producer.quantizes_output || x.cols % kQ8Block != 0)
      continue;
    bool whole_blocks = false;
    if (producer.op->kind == OpId::MatMul) {
      whole_blocks = !producer.matmul.empty();
      for (const ROp::MatMulKernel& k : producer.matmul) whole_blocks = whole_blocks && k.rows_per_task % kQ8Block == 0;
    } else if (producer.op->kind == OpId::Attention) {
      whole_blocks = producer.head_dim % kQ8Block == 0;
    }
    // The producer's other tasks still read its inputs (and the Attention
    // its K and V) while one quantizes: the quantized rows must not share
    // their bytes (plan_memory keeps them apart; an older model.so may not).
    for (const RView& in : producer.in) whole_blocks = whole_blocks && !overlaps(q.out, in);
    if (producer.residual.buffer >= 0) whole_blocks = whole_blocks && !overlaps(q.out, producer.residual);
    whole_blocks = whole_blocks && !overlaps(q.out, producer.out);
    if (!whole_blocks) continue;
    producer.quantized = q.out;
    producer.quantizes_output = true;
    q.folded_into_producer = true;
  }
}

}  // namespace

const Plan& Session::Impl::plan_for(int64_t n) {
  auto found = plans.find(n);
  if (found != plans.end()) return found->second;
  const program::Program& p = program();
  const program::HParamValues hparams(p.hparams, bound.hparams);
  auto eval = [&](const program::Dim& e, const std::string& what) {
    try {
      return hparams.eval(e, n);
    } catch (const lumen::ops::DimError& err) {
      throw LoadError("program: cannot evaluate " + what + " for N=" + std::to_string(n) + ": " + err.what());
    }
  };
  auto eval_required = [&](const std::optional<program::Dim>& e, const std::string& what) {
    if (!e) throw LoadError("program: " + what + " is missing");
    return eval(*e, what);
  };
  int64_t arena_bytes = eval(p.arena_bytes, "the arena size");
  if (arena_bytes < 0) throw LoadError("program: negative arena size");
  if (static_cast<uint64_t>(arena_bytes) > arena.size()) {
    arena = PageBuffer(static_cast<size_t>(arena_bytes));
    plans.clear();  // every cached plan points into the old arena
    stats.arena_bytes = static_cast<uint64_t>(arena_bytes);
  }

  struct Layout {
    int64_t rows, cols, offset;
  };
  std::vector<Layout> layout;
  for (const program::Buffer& b : p.buffers) {
    Layout l{eval(b.rows, "the rows of '" + b.name + "'"), eval(b.cols, "the cols of '" + b.name + "'"),
             eval(b.offset, "the offset of '" + b.name + "'")};
    int64_t bytes = 0;
    bool bad_quant = b.dtype == DType::ActQ8 && l.cols % kQ8Block != 0;
    if (l.rows < 1 || l.cols < 1 || l.offset < 0 || l.offset % 64 != 0 || bad_quant ||
        __builtin_mul_overflow(l.rows, row_bytes(b.dtype, l.cols), &bytes) || bytes > arena_bytes - l.offset)
      throw LoadError("program: buffer '" + b.name + "' (rows " + std::to_string(l.rows) + ", cols " +
                      std::to_string(l.cols) + ", offset " + std::to_string(l.offset) + ") is misplaced for N=" +
                      std::to_string(n) + " in an arena of " + std::to_string(arena_bytes) + " bytes");
    layout.push_back(l);
  }
  std::vector<uint8_t*> buffer_base;
  for (const Layout& l : layout) buffer_base.push_back(arena.data() + l.offset);
  auto resolve = [&](const program::View& v, const char* what) {
    if (v.buffer < 0 || v.buffer >= static_cast<int>(p.buffers.size()))
      throw LoadError(std::string("program: ") + what + " refers to no buffer");
    const program::Buffer& b = p.buffers[static_cast<size_t>(v.buffer)];
    const Layout& l = layout[static_cast<size_t>(v.buffer)];
    int64_t off = eval(v.col_offset, std::string("a view of '") + b.name + "'");
    int64_t cols = eval(v.cols, std::string("a view of '") + b.name + "'");
    bool bad_quant = b.dtype == DType::ActQ8 && (off % kQ8Block != 0 || cols % kQ8Block != 0);
    if (off < 0 || cols < 1 || cols > l.cols - off || bad_quant)
      throw LoadError("program: view [" + std::to_string(off) + ", +" + std::to_string(cols) + ") of buffer '" +
                      b.name + "' is out of bounds");
    RView r;
    r.base = arena.data() + l.offset + row_bytes(b.dtype, off);
    r.stride = row_bytes(b.dtype, l.cols);
    r.rows = l.rows;
    r.cols = cols;
    r.dtype = b.dtype;
    r.buffer = v.buffer;
    return r;
  };

  Plan plan;
  plan.n = n;
  plan.buffer_base = std::move(buffer_base);
  auto whole = [&](int buffer, const char* what) {
    if (buffer < 0 || buffer >= static_cast<int>(p.buffers.size()))
      throw LoadError(std::string("program: no ") + what + " buffer");
    program::View v{buffer, program::Dim::constant(0), p.buffers[static_cast<size_t>(buffer)].cols};
    return resolve(v, what);
  };
  plan.tokens = whole(p.tokens_buffer, "tokens");
  plan.logits = whole(p.logits_buffer, "logits");
  if (plan.tokens.dtype != DType::I32 || plan.tokens.rows != n)
    throw LoadError("program: the tokens buffer must be I32 with N rows");
  if (plan.logits.dtype != DType::F32) throw LoadError("program: the logits buffer must be F32");

  for (Section s : program::kSections) {
    int kv_slots = 0;
    for (size_t i = 0; i < p.ops(s).size(); ++i) {
      const Op& op = p.ops(s)[i];
      ROp r;
      r.op = &op;
      for (const program::View& v : op.inputs) r.in.push_back(resolve(v, "an op input"));
      if (op.output.buffer >= 0) r.out = resolve(op.output, "an op output");
      if (op.residual.buffer >= 0) r.residual = resolve(op.residual, "a residual");
      auto hparam_value = [&](int index, const char* what) {
        if (index < 0 || index >= static_cast<int>(bound.hparams.size()))
          throw LoadError(std::string("program: ") + ::lumen::ops::id_name(op.kind) + " has no " + what + " hparam");
        return static_cast<float>(bound.hparams[static_cast<size_t>(index)]);
      };
      if (op.kind == OpId::RmsNorm || op.kind == OpId::RmsNormQuant) r.eps = hparam_value(op.eps_hparam, "eps");
      if (op.kind == OpId::Rope) r.rope_base = hparam_value(op.rope_base_hparam, "rope base");
      if (op.kind == OpId::Rope || op.kind == OpId::Attention) {
        r.n_heads = eval_required(op.n_heads, "n_heads");
        r.head_dim = eval_required(op.head_dim, "head_dim");
      }
      if (op.kind == OpId::RmsNorm || op.kind == OpId::RmsNormQuant) {
        // Per head when n_heads is given: groups of cols / n_heads.
        r.n_heads = op.n_heads ? eval(*op.n_heads, "n_heads") : 1;
        r.head_dim = r.n_heads >= 1 && !r.in.empty() ? r.in[0].cols / r.n_heads : 0;
      }
      if (op.kind == OpId::Attention) {
        r.n_heads_kv = eval_required(op.n_heads_kv, "n_heads_kv");
        const int64_t scale_dim = op.attn_scale_rsqrt ? eval(*op.attn_scale_rsqrt, "the scale") : r.head_dim;
        r.attn_scale = op.attn_scale_hparam >= 0 ? hparam_value(op.attn_scale_hparam, "attention scale")
                                                 : 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(1, scale_dim)));
        r.attn_softcap = op.attn_softcap_hparam >= 0 ? hparam_value(op.attn_softcap_hparam, "soft-capping") : 0.0f;
        r.window = op.window ? eval(*op.window, "the sliding window") : 0;
        r.window_pattern = op.window_pattern ? eval(*op.window_pattern, "the window pattern") : 0;
        r.kv_slot = kv_slots++;
      }
      // A row kernel's scalar: the square root of a size (scale's factor_sqrt), else an hparam.
      if (const kernels::RowKernel* k = kernels::row_kernel(op.kind); k && k->reads_scalar)
        r.scalar = op.scalar_sqrt ? std::sqrt(static_cast<float>(eval(*op.scalar_sqrt, "the scalar")))
                                  : hparam_value(op.scalar_hparam, "scalar");
      r.profile_key = ::lumen::ops::id_name(op.kind);
      // The rows this matmul sees decide the kernel: after Last it is one.
      if (op.kind == OpId::MatMul) choose_kernel(r, s, i, r.in.size() == 1 ? r.in[0].rows : 0);
      check_op(r, s, i, n);
      plan.sections[s].push_back(std::move(r));
    }
  }
  if (options.fuse_ops) {
    mark_row_runs(plan.sections[Section::Layer]);
    mark_folded_quantize(plan.sections[Section::Layer]);
  }
  // Prompts of many lengths (chat) and server steps of every size up to
  // --parallel + --chunk: keep the cache bounded.
  if (plans.size() >= 64) plans.clear();
  return plans.emplace(n, std::move(plan)).first->second;
}

// Rows from which a Q4_0/Q5_0 prefill runs the Q8_0 GEMM on converted rows
// rather than the batch kernel: lumen-bench-kernels measured the batch
// kernel faster at 32 tokens on every shape and the converted GEMM faster on
// Q4_0's at 512 (docs/kernels.md); 64 lies between, not tuned.
constexpr int64_t kConvertedGemmMinTokens = 64;

// The rows decide the kernel: one row the GEMV, a few rows (the decode steps
// of several sequences) the batch kernel, more the prefill GEMM; each layer
// runs the kernels of its weights' packed format (target/weight_formats.h).
void Session::Impl::choose_kernel(ROp& r, Section s, size_t i, int64_t rows) const {
  const Op& op = *r.op;
  const bool batch = rows >= 2 && rows <= program::KernelId::kBatchMaxTokens;
  auto where = [&] { return " (" + std::string(to_string(s)) + " op " + std::to_string(i) + ")"; };
  r.matmul.clear();
  for (const program::MatMulKernels& f : op.schedule.formats) {
    program::KernelId id = rows == 1 ? f.decode_kernel : batch ? f.batch_kernel : f.prefill_kernel;
    // A GEMM that does not read the set's packed weights as they are (Q8_0
    // converted from Q4_0/Q5_0, a k-quant's or Q4_1's expanded blocks) converts once
    // per task: below kConvertedGemmMinTokens the batch kernel is faster
    // (docs/kernels.md). Both give every row the GEMV's bits.
    auto converts = [&f](const program::KernelId& k) {
      return k.kind == program::KernelKind::Gemm && (k.weight != f.format || has_expanded_kquant(k.weight));
    };
    if (converts(id) && rows < kConvertedGemmMinTokens) id = f.batch_kernel;
    const bool converted = converts(id);
    auto k = model->kernels.find(id);
    if (k == model->kernels.end())
      throw LoadError("the model has no matmul kernel '" + program::to_string(id) + "'" + where());
    // A prefill task covers whole register tiles (a Gemm's tile is the one it
    // runs): a task that ends inside a tile would run the slower edge body on
    // every token tile. Other kernels' tasks are whole row groups.
    const int64_t unit = id.kind == program::KernelKind::Gemm ? id.tile_m : pack_row_group(model->isa);
    r.matmul.push_back({k->second, std::max<int64_t>(unit, (op.schedule.rows_per_task + unit - 1) / unit * unit),
                        std::max<int64_t>(1, op.schedule.tokens_per_task),
                        converted ? f.format : DType::Q8_0,
                        "MatMul " + program::to_string(id)});
  }
  r.profile_key = r.matmul.front().profile_key;
  // Every layer's weights are of one format (the schedule fused only those).
  const program::Weight& w = program().weights[static_cast<size_t>(op.weights.at(0))];
  r.layer_kernel.assign(s == Section::Layer ? static_cast<size_t>(bound.n_layers) : 1, 0);
  for (size_t layer = 0; layer < r.layer_kernel.size(); ++layer) {
    const std::optional<DType> type = w.type_of_layer(static_cast<int64_t>(layer));
    const program::MatMulKernels* f =
        type ? op.schedule.for_format(packed_format(*type, model->isa, r.in.at(0).dtype)) : nullptr;
    if (f == nullptr)
      throw LoadError("the model has no matmul kernels for layer " + std::to_string(layer) + "'s '" + w.name + "'" + where());
    r.layer_kernel[layer] = static_cast<size_t>(f - op.schedule.formats.data());
  }
}

// The post section on gathered rows: batchable when it starts with Last
// and every other view is a buffer written inside the post section (the usual
// final norm and output head). Those buffers move to a side arena of
// post_rows rows, so the arena's layout (one row after Last) is untouched.
void Session::Impl::build_post_template() {
  const program::Program& p = program();
  const Plan& one = plan_for(1);
  PostTemplate t;
  const std::vector<ROp>& ops = one.sections.post;
  if (ops.empty() || ops[0].op->kind != OpId::Last) return;
  std::vector<bool> written(p.buffers.size(), false);
  for (const ROp& r : ops)
    if (r.out.buffer >= 0) written[static_cast<size_t>(r.out.buffer)] = true;
  if (p.logits_buffer < 0 || !written[static_cast<size_t>(p.logits_buffer)]) return;
  std::vector<int64_t> side_offset(p.buffers.size(), -1);
  int64_t side_bytes = 0;
  std::vector<int64_t> stride(p.buffers.size(), 0);
  auto note = [&](const RView& v) {
    const size_t b = static_cast<size_t>(v.buffer);
    if (side_offset[b] >= 0) return;
    stride[b] = v.stride;
    side_offset[b] = side_bytes;
    side_bytes += (v.stride * post_rows + 63) / 64 * 64;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const ROp& r = ops[i];
    for (size_t j = 0; j < r.in.size(); ++j) {
      const bool source = i == 0 && j == 0;
      if (!source && !written[static_cast<size_t>(r.in[j].buffer)]) return;
      if (!source) note(r.in[j]);
    }
    if (r.out.buffer >= 0) note(r.out);
    if (r.residual.buffer >= 0) {
      if (!written[static_cast<size_t>(r.residual.buffer)]) return;
      note(r.residual);
    }
  }
  post_arena = PageBuffer(static_cast<size_t>(std::max<int64_t>(side_bytes, 64)));
  auto move = [&](RView v) {
    const size_t b = static_cast<size_t>(v.buffer);
    v.base = post_arena.data() + side_offset[b] + (v.base - one.buffer_base[b]);
    v.stride = stride[b];
    v.rows = post_rows;
    return v;
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    ROp r = ops[i];
    for (size_t j = 0; j < r.in.size(); ++j)
      if (i != 0 || j != 0) r.in[j] = move(r.in[j]);
    if (r.out.buffer >= 0) r.out = move(r.out);
    if (r.residual.buffer >= 0) r.residual = move(r.residual);
    if (r.op->kind == OpId::MatMul) {
      for (const program::MatMulKernels& f : r.op->schedule.formats)
        if (model->kernels.count(f.prefill_kernel) == 0) return;
      for (const PackedMatMul& mm : bound.matmuls[Section::Post][i])
        if (mm.k != r.in[0].cols || mm.rows != r.out.cols) return;
    }
    t.ops.push_back(std::move(r));
  }
  t.logits = move(one.logits);
  t.batchable = true;
  post_template = std::move(t);
}

// Hidden states are the output of the final norm: the post section must
// start with last() and an RMS norm of its row (fused with the head's
// activation quantization or not), which run_hidden then applies to any row
// of the pass, in f32, with the same kernel.
void Session::Impl::find_hidden_norm() {
  const std::vector<ROp>& ops = plan_for(1).sections.post;
  if (ops.size() < 2 || ops[0].op->kind != OpId::Last) return;
  const ROp& norm = ops[1];
  if (norm.op->kind != OpId::RmsNorm && norm.op->kind != OpId::RmsNormQuant) return;
  if (norm.op->weights.size() != 1 || norm.in.empty() || !norm.in[0].same_place(ops[0].out) ||
      norm.in[0].cols != ops[0].in[0].cols)
    return;
  hidden_norm = 1;
  n_embd = norm.in[0].cols;
}

// The template with its side views cut to k rows and the matmuls on their kernels for k rows.
const std::vector<ROp>& Session::Impl::post_plan_for(int64_t k) {
  auto found = post_plans.find(k);
  if (found != post_plans.end()) return found->second;
  std::vector<ROp> ops = post_template.ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    ROp& r = ops[i];
    for (size_t j = 0; j < r.in.size(); ++j)
      if (i != 0 || j != 0) r.in[j].rows = k;
    if (r.out.buffer >= 0) r.out.rows = k;
    if (r.residual.buffer >= 0) r.residual.rows = k;
    if (r.op->kind == OpId::MatMul) choose_kernel(r, Section::Post, i, k);
  }
  return post_plans.emplace(k, std::move(ops)).first->second;
}


namespace {

namespace op_table = ::lumen::ops;  // the op table (lumen/ops/op_table.h)

// A resolved view as the table sees it: [rows, cols], or [rows] for token ids.
op_table::TensorType table_type(const RView& v) {
  op_table::TensorType t{v.dtype, {op_table::ShapeDim::of(v.rows)}};
  if (v.dtype != DType::I32) t.shape.push_back(op_table::ShapeDim::of(v.cols));
  return t;
}

// A bound GGUF tensor as the table sees it: DSL order [rows, row_length].
op_table::TensorType table_type(const gguf::TensorInfo& t) {
  op_table::TensorType out;
  // Binding accepted only the weight's listed types, so the list has this one.
  out.dtype = *op_table::dtype_of_ggml(static_cast<uint32_t>(t.type));
  for (auto it = t.ne.rbegin(); it != t.ne.rend(); ++it) out.shape.push_back(op_table::ShapeDim::of(*it));
  return out;
}

}  // namespace

// Shapes and dtypes of one resolved op, so that running it cannot go out of
// bounds: the op table's type rule on this binding's values (every layer's
// weights), then what the runtime's kernels add (head_dim limits, ActQ8
// matmul input, attention's window and soft-capping).
void Session::Impl::check_op(const ROp& r, Section section, size_t index, int64_t n) const {
  const Op& op = *r.op;
  auto need = [&](bool ok, const std::string& what) {
    if (!ok)
      throw LoadError(std::string("program: ") + to_string(section) + " op " + std::to_string(index) + " (" +
                      ::lumen::ops::id_name(op.kind) + "): " + what);
  };
  const op_table::OpInfo& info = op_table::op_info(op.kind);
  static const op_table::DimFacts no_facts;  // constants compare by value
  const int64_t layers = section == Section::Layer ? bound.n_layers : 1;
  for (const RView& v : r.in) need(v.buffer >= 0, "an input has no buffer");
  need(r.out.buffer >= 0 || op.kind == OpId::Rope, "the output has no buffer");
  for (int64_t l = 0; l < layers; ++l) {
    op_table::OpCall call;
    call.facts = &no_facts;
    call.tokens = op_table::ShapeDim::of(n);
    size_t next_in = 0, next_w = 0;
    auto take = [&](bool weight) {
      if (weight) {
        const int w = op.weights[next_w++];
        const gguf::TensorInfo* t = tensor(w, l);
        if (t == nullptr && program().weights[static_cast<size_t>(w)].optional) return;  // absent: the op does without
        need(t != nullptr, "a weight is not bound");
        call.operands.push_back(table_type(*t));
      } else {
        call.operands.push_back(table_type(r.in[next_in++]));
      }
      call.is_weight.push_back(weight);
    };
    for (const op_table::OperandSpec& spec : info.operands) {
      do {
        bool ins_left = next_in < r.in.size(), ws_left = next_w < op.weights.size();
        bool weight = spec.role == op_table::Role::Weight || (spec.role == op_table::Role::Either && !ins_left);
        if (weight ? !ws_left : !ins_left) break;
        take(weight);
      } while (spec.variadic);
    }
    while (next_in < r.in.size()) take(false);
    while (next_w < op.weights.size()) take(true);
    if (op.kind == OpId::Rope || op.kind == OpId::Attention) {
      call.sizes["heads"] = op_table::ShapeDim::of(r.n_heads);
      call.sizes["dim"] = op_table::ShapeDim::of(r.head_dim);
    }
    if (op.kind == OpId::Attention) call.sizes["kv_heads"] = op_table::ShapeDim::of(r.n_heads_kv);
    if ((op.kind == OpId::RmsNorm || op.kind == OpId::RmsNormQuant) && op.n_heads)
      call.sizes["heads"] = op_table::ShapeDim::of(r.n_heads);
    if (op.kind == OpId::Rope) call.choices["mode"] = op.rope_mode == program::RopeMode::Normal ? "normal" : "neox";
    if (op.kind == OpId::MatMul) {
      call.epilogue = op.epilogue;
      for (int b : op.biases) {
        const gguf::TensorInfo* t = tensor(b, l);
        need(t != nullptr, "a bias is not bound");
        call.biases.push_back(table_type(*t));
      }
      if (op.residual.buffer >= 0) call.residual = table_type(r.residual);
    }
    op_table::Verdict v = op_table::infer(info, call);
    need(v.ok(), v.message);
    const RView& out = r.out.buffer >= 0 ? r.out : r.in[0];
    need(op_table::same_type(*v.result, table_type(out), no_facts),
         "the output is " + table_type(out).str() + " but the inputs give " + v.result->str());
  }
  switch (op.kind) {
    case OpId::Embed:
      for (int64_t l = 0; l < layers; ++l) {
        const std::optional<DType> t = op_table::dtype_of_ggml(static_cast<uint32_t>(tensor(op.weights[0], l)->type));
        need(t && quant::is_weight_type(*t), "the table must be of a weight type (it is dequantized row by row)");
      }
      break;
    case OpId::MatMul:
      need(r.in.size() == 1, "a matmul has one input");
      for (const PackedMatMul& mm : bound.matmuls[section][index]) {
        // The type rule of target/weight_formats.h: float weights read f32, the others act_q8.
        need(r.in[0].dtype == matmul_input_dtype(mm.format),
             std::string("input must be ") + ::lumen::ops::to_string(matmul_input_dtype(mm.format)) + " for " +
                 ::lumen::ops::to_string(mm.format) + " weights");
        need(mm.k == r.in[0].cols, "the weights' row length must equal the input width");
        need(mm.rows == r.out.cols, "the weights' rows must equal the output width");
      }
      break;
    case OpId::Rope:
      need(r.head_dim >= 2 && r.head_dim <= kMaxHeadDim,
           "head_dim " + std::to_string(r.head_dim) + " is outside what the kernels support (2.." +
               std::to_string(kMaxHeadDim) + ")");
      break;
    case OpId::Attention:
      need(section == Section::Layer, "attention must be in the layer loop (its KV cache is per layer)");
      need(r.head_dim >= 1 && r.head_dim <= kMaxHeadDim,
           "head_dim " + std::to_string(r.head_dim) + " is outside what the kernels support (1.." +
               std::to_string(kMaxHeadDim) + ")");
      need(r.window >= 0 && r.window_pattern >= 0 && r.attn_softcap >= 0 && std::isfinite(r.attn_scale),
           "the window, its pattern and the soft-capping must not be negative");
      break;
    default:
      if (const kernels::RowKernel* k = kernels::row_kernel(op.kind); k && k->scalar_positive) {
        // The attribute's name, as the DSL and the IR spell it (a cap).
        std::string name = "scalar";
        for (const op_table::AttrSpec& a : info.attrs)
          if (a.kind == op_table::AttrKind::Scalar) {
            name = a.name;
            break;
          }
        need(r.scalar > 0, "the " + name + " must be positive");
      }
      break;
  }
}


}  // namespace lumen::runtime
