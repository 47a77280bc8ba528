// The executor: runs a bound program over batches of tokens. It owns the
// activation arena (laid out by the program's symbolic offsets, resolved and
// checked once per batch size into a Plan), the KV cache, the thread pool and
// the per-thread scratch. Every op is one parallel_for over tasks that always
// cover the same rows the same way, so results do not depend on the thread count.
#include "lumen/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lumen/common/internal_error.h"
#include "lumen/common/numeric.h"
#include "lumen/ops/op_table.h"
#include "lumen/runtime/binding.h"
#include "lumen/target/page_buffer.h"
#include "lumen/runtime/ops.h"
#include "lumen/runtime/thread_pool.h"

namespace lumen::runtime {
namespace {

using program::DType;
using program::Epilogue;
using program::Op;
using ::lumen::ops::OpId;
using program::Section;
using ops::kMaxHeadDim;

// Rows are sized by the type list's blocks; these are the blocks the kernels read.
using ::lumen::ops::row_bytes;
static_assert(::lumen::ops::row(DType::Q8_0).block_bytes == sizeof(BlockQ8_0) &&
              ::lumen::ops::row(DType::Q8_0).block_elems == kQ8Block);
static_assert(::lumen::ops::row(DType::ActQ8).block_bytes == sizeof(ActBlock) &&
              ::lumen::ops::row(DType::ActQ8).block_elems == kQ8Block);

// A view resolved for one batch size: where its rows are in the arena.
struct RView {
  uint8_t* base = nullptr;  // row 0 at the view's first column
  int64_t stride = 0;       // bytes between rows
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::F32;
  int buffer = -1;

  float* f32(int64_t row) const { return reinterpret_cast<float*>(base + row * stride); }
  int32_t* i32(int64_t row) const { return reinterpret_cast<int32_t*>(base + row * stride); }
  ActBlock* act(int64_t row) const { return reinterpret_cast<ActBlock*>(base + row * stride); }
  bool same_place(const RView& o) const { return base == o.base && stride == o.stride; }
};

// An op resolved for one batch size.
struct ROp {
  const Op* op = nullptr;
  std::vector<RView> in;
  RView out, residual;
  int64_t n_heads = 0, n_heads_kv = 0, head_dim = 0;
  float eps = 0, rope_base = 0;
  // Attention: score scale, soft-capping (0: none), sliding window (0: none)
  // and its layer pattern, the op's KV cache slot within a layer.
  float attn_scale = 0, attn_softcap = 0;
  float scalar = 0;  // the op's scalar attribute (Scale's factor, a cap)
  int64_t window = 0, window_pattern = 0;
  int kv_slot = -1;
  MatMulFn kernel = nullptr;
  int64_t rows_per_task = 0, tokens_per_task = 0;
  std::string profile_key;
};

struct Plan {
  int64_t n = 0;
  PerSection<std::vector<ROp>> sections;
  RView tokens, logits;
  std::vector<uint8_t*> buffer_base;  // row 0, column 0 of every buffer
};

// A contiguous run of rows of one pass that belong to one sequence (KV slot),
// at consecutive positions from pos0.
struct SeqRun {
  int slot = 0;
  int64_t row0 = 0, n = 0, pos0 = 0;
};

// The post ops run on k gathered rows at once (the output head reads its
// weights once for every sequence of a step): the ops of plan_for(1) with the
// buffers the post section writes moved to a side arena of k rows.
struct PostTemplate {
  bool batchable = false;
  std::vector<ROp> ops;
  std::vector<std::vector<bool>> side_in;  // per op and input: a side buffer (else Last's source)
  std::vector<bool> side_out, side_residual;
  RView logits;
};

struct ThreadScratch {
  std::vector<float> row;      // a normalized row before quantization
  std::vector<float> cos_sin;  // rope angles of one position
};

struct Profile {
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;  // weight bytes streamed (matmuls)
  double ops = 0;    // multiply-adds x 2 (matmuls)
};

}  // namespace

struct Session::Impl {
  std::shared_ptr<const CompiledModel> model;
  std::optional<gguf::File> file;
  BoundModel bound;
  SessionOptions options;
  std::unique_ptr<ThreadPool> pool;
  int n_threads = 1;
  int64_t n_ctx = 0, n_batch = 0, n_vocab = 0;
  int n_seq = 1;
  std::vector<int64_t> positions;  // tokens in each KV slot
  int64_t slot_bytes = 0;          // KV bytes of one slot
  int64_t max_token_id = INT64_MAX;  // exclusive bound from the embedding tables
  int64_t kv_elem = 2;
  // The KV cache: per layer, per attention op of the layer section (its
  // slot), K then V, n_ctx rows of that op's K width each.
  std::vector<int64_t> kv_width, kv_slot_offset;
  int64_t kv_layer_bytes = 0;
  PageBuffer kv, arena;
  std::map<int64_t, Plan> plans;
  std::vector<ThreadScratch> scratch;
  std::vector<float> logits, all_logits;
  // The rows of the pass being run: each token's slot and position, and the
  // runs of consecutive rows of one sequence (attention works per run).
  std::vector<int> row_slot;
  std::vector<int64_t> row_pos;
  std::vector<SeqRun> runs;
  int64_t post_rows = 16;  // most rows per batched post pass
  PageBuffer post_arena;
  PostTemplate post_template;
  std::map<int64_t, std::vector<ROp>> post_plans;
  // step() results: logits of the kept rows, and where each entry's start.
  std::vector<float> step_out;
  std::vector<size_t> step_first;
  std::vector<int64_t> step_kept, step_size;
  LoadStats stats;
  std::map<std::string, Profile> profile;

  const program::Program& program() const { return model->program; }

  const gguf::TensorInfo* tensor(int weight, int64_t layer) const { return bound.tensor(weight, layer); }
  // Sequence slot after sequence slot; within one, per layer, per attention
  // op of the layer section (op_slot), K then V.
  uint8_t* k_cache(int64_t layer, int op_slot, int seq) const {
    return kv.data() + static_cast<size_t>(seq * slot_bytes + layer * kv_layer_bytes +
                                           kv_slot_offset[static_cast<size_t>(op_slot)]);
  }
  uint8_t* v_cache(int64_t layer, int op_slot, int seq) const {
    return k_cache(layer, op_slot, seq) + static_cast<size_t>(n_ctx * kv_width[static_cast<size_t>(op_slot)] * kv_elem);
  }

  const Plan& plan_for(int64_t n);
  void choose_kernel(ROp& r, Section s, size_t i, int64_t rows) const;
  void build_post_template();
  const std::vector<ROp>& post_plan_for(int64_t k);
  void forward(const Plan& plan, std::span<const int32_t> tokens, std::span<const int64_t> kept, float* out);
  void run_post(const Plan& plan, std::span<const int64_t> kept, float* out);
  void check_op(const ROp& r, Section section, size_t index, int64_t n) const;
  void run_op(const ROp& r, Section section, size_t index, int64_t layer, int64_t take_row);
  void run_matmul(const ROp& r, const PackedMatMul& mm, int64_t n);
  void run_attention(const ROp& r, int64_t layer, int64_t n);
};

// ------------------------------------------------------------------ planning

const Plan& Session::Impl::plan_for(int64_t n) {
  auto found = plans.find(n);
  if (found != plans.end()) return found->second;
  const program::Program& p = program();
  auto eval = [&](const program::Expr& e, const std::string& what) {
    try {
      return e.eval(bound.hparams, n);
    } catch (const program::EvalError& err) {
      throw LoadError("program: cannot evaluate " + what + " for N=" + std::to_string(n) + ": " + err.what());
    }
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
    program::View v{buffer, program::Expr::constant(0), p.buffers[static_cast<size_t>(buffer)].cols};
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
        r.n_heads = eval(op.n_heads, "n_heads");
        r.head_dim = eval(op.head_dim, "head_dim");
      }
      if (op.kind == OpId::RmsNorm || op.kind == OpId::RmsNormQuant) {
        // Per head when n_heads is given: groups of cols / n_heads.
        r.n_heads = op.n_heads.terms.empty() ? 1 : eval(op.n_heads, "n_heads");
        r.head_dim = r.n_heads >= 1 && !r.in.empty() ? r.in[0].cols / r.n_heads : 0;
      }
      if (op.kind == OpId::Attention) {
        r.n_heads_kv = eval(op.n_heads_kv, "n_heads_kv");
        const int64_t scale_dim = op.attn_scale_rsqrt.terms.empty() ? r.head_dim : eval(op.attn_scale_rsqrt, "the scale");
        r.attn_scale = op.attn_scale_hparam >= 0 ? hparam_value(op.attn_scale_hparam, "attention scale")
                                                 : 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(1, scale_dim)));
        r.attn_softcap = op.attn_softcap_hparam >= 0 ? hparam_value(op.attn_softcap_hparam, "soft-capping") : 0.0f;
        r.window = op.window.terms.empty() ? 0 : eval(op.window, "the sliding window");
        r.window_pattern = op.window_pattern.terms.empty() ? 0 : eval(op.window_pattern, "the window pattern");
        r.kv_slot = kv_slots++;
      }
      if (op.kind == OpId::Scale)
        r.scalar = op.scalar_sqrt.terms.empty() ? hparam_value(op.scalar_hparam, "scale factor")
                                                : std::sqrt(static_cast<float>(eval(op.scalar_sqrt, "the scale factor")));
      if (op.kind == OpId::Softcap) r.scalar = hparam_value(op.scalar_hparam, "cap");
      r.profile_key = ::lumen::ops::id_name(op.kind);
      // The rows this matmul sees decide the kernel: after Last it is one.
      if (op.kind == OpId::MatMul) choose_kernel(r, s, i, r.in.size() == 1 ? r.in[0].rows : 0);
      check_op(r, s, i, n);
      plan.sections[s].push_back(std::move(r));
    }
  }
  // Prompts of many lengths (chat) and server steps of every size up to
  // --parallel + --chunk: keep the cache bounded.
  if (plans.size() >= 64) plans.clear();
  return plans.emplace(n, std::move(plan)).first->second;
}

// The rows decide the kernel: one row the GEMV, a few rows (the decode steps
// of several sequences) the batch kernel, more the prefill GEMM.
void Session::Impl::choose_kernel(ROp& r, Section s, size_t i, int64_t rows) const {
  const Op& op = *r.op;
  const bool batch = rows >= 2 && rows <= program::KernelId::kBatchMaxTokens;
  const program::KernelId& id = rows == 1 ? op.schedule.decode_kernel
                                : batch   ? op.schedule.batch_kernel
                                          : op.schedule.prefill_kernel;
  auto k = model->kernels.find(id);
  if (k == model->kernels.end())
    throw LoadError("the model has no matmul kernel '" + program::to_string(id) + "' (" + to_string(s) + " op " +
                    std::to_string(i) + ")");
  r.kernel = k->second;
  r.profile_key = "MatMul " + program::to_string(id);
  const int64_t group = pack_row_group(model->isa);
  // A prefill task covers whole register tiles: a task that ends inside
  // a tile would run the slower edge body on every token tile. The
  // kernel may run fewer groups than tile_m asks (its ISA's registers,
  // or gate and up sharing them), so the unit is a multiple of every
  // row tile up to tile_m: 96 rows for m48 (48, 32 and 16 divide it).
  int64_t unit = group;
  if (id.kind != program::KernelKind::Gemv)
    for (int64_t tile_rows = 2 * group; tile_rows <= id.tile_m; tile_rows += group) unit = std::lcm(unit, tile_rows);
  r.rows_per_task = std::max<int64_t>(unit, (op.schedule.rows_per_task + unit - 1) / unit * unit);
  r.tokens_per_task = std::max<int64_t>(1, op.schedule.tokens_per_task);
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
      if (model->kernels.count(r.op->schedule.prefill_kernel) == 0) return;
      for (const PackedMatMul& mm : bound.matmuls[Section::Post][i])
        if (mm.k != r.in[0].cols || mm.rows != r.out.cols) return;
    }
    t.ops.push_back(std::move(r));
  }
  t.logits = move(one.logits);
  t.batchable = true;
  post_template = std::move(t);
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

namespace op_table = ::lumen::ops;  // (runtime/ops.h is the runtime's own lumen::runtime::ops)

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
                      op_table::id_name(op.kind) + "): " + what);
  };
  const op_table::OpInfo& info = op_table::op_info(op.kind);
  static const op_table::DimFacts no_facts;  // constants compare by value
  const int64_t layers = section == Section::Layer ? bound.n_layers : 1;
  for (const RView& v : r.in) need(v.buffer >= 0, "an input has no buffer");
  need(r.out.buffer >= 0 || op.kind == OpId::Rope, "the output has no buffer");
  for (int64_t l = 0; l < layers; ++l) {
    op_table::OpCall call;
    call.facts = &no_facts;
    call.tokens = op_table::SymDim::constant(n);
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
    if ((op.kind == OpId::RmsNorm || op.kind == OpId::RmsNormQuant) && !op.n_heads.terms.empty())
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
        gguf::TensorType t = tensor(op.weights[0], l)->type;
        need(t == gguf::TensorType::Q8_0 || t == gguf::TensorType::F32 || t == gguf::TensorType::F16,
             "the table must be Q8_0, F16 or F32");
      }
      break;
    case OpId::MatMul:
      need(r.in.size() == 1 && r.in[0].dtype == DType::ActQ8, "input must be ActQ8");
      for (const PackedMatMul& mm : bound.matmuls[section][index]) {
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
    case OpId::Softcap: need(r.scalar > 0, "the cap must be positive"); break;
    default: break;
  }
}

// ----------------------------------------------------------------- execution

void Session::Impl::run_matmul(const ROp& r, const PackedMatMul& mm, int64_t n) {
  const int64_t row_tasks = (mm.rows + r.rows_per_task - 1) / r.rows_per_task;
  const int64_t token_block = n == 1 ? 1 : r.tokens_per_task;
  const int64_t token_tasks = (n + token_block - 1) / token_block;
  const int64_t group = pack_row_group(model->isa);
  const bool residual = r.op->epilogue == Epilogue::Residual || r.op->epilogue == Epilogue::BiasResidual;
  const RView& x = r.in[0];
  const RView& y = r.out;
  pool->parallel_for(row_tasks * token_tasks, [&](int64_t task, int) {
    const int64_t row0 = (task % row_tasks) * r.rows_per_task;
    const int64_t tok0 = (task / row_tasks) * token_block;
    MatMulArgs args{};
    args.w = mm.w + row0 / group * mm.group_bytes;
    args.x = x.act(tok0);
    args.y = y.f32(tok0) + row0;
    args.bias = mm.bias != nullptr ? mm.bias + row0 : nullptr;
    args.residual = residual ? r.residual.f32(tok0) + row0 : nullptr;
    args.x_stride = x.stride / static_cast<int64_t>(sizeof(ActBlock));
    args.y_stride = y.stride / static_cast<int64_t>(sizeof(float));
    args.r_stride = residual ? r.residual.stride / static_cast<int64_t>(sizeof(float)) : 0;
    args.k_blocks = mm.k / kQ8Block;
    args.m_rows = std::min(r.rows_per_task, mm.rows - row0);
    args.n_tokens = std::min(token_block, n - tok0);
    r.kernel(&args);
  });
  if (options.profile) {
    Profile& prof = profile[r.profile_key];
    prof.bytes += static_cast<double>(mm.rows * (r.op->epilogue == Epilogue::SiluMul ? 2 : 1)) *
                  static_cast<double>(row_bytes(DType::Q8_0, mm.k));
    prof.ops += 2.0 * static_cast<double>(mm.rows * (r.op->epilogue == Epilogue::SiluMul ? 2 : 1)) *
                static_cast<double>(mm.k) * static_cast<double>(n);
  }
}

void Session::Impl::run_attention(const ROp& r, int64_t layer, int64_t n) {
  const int64_t kv_dim = kv_width[static_cast<size_t>(r.kv_slot)];
  const bool windowed = r.window > 0 && (r.window_pattern == 0 || layer % r.window_pattern < r.window_pattern - 1);
  const bool f16 = options.kv_type == KvType::F16;
  // Store this batch's K (already rotated) and V in their slots at their positions.
  pool->parallel_for(n, [&](int64_t t, int) {
    uint8_t* kc = k_cache(layer, r.kv_slot, row_slot[static_cast<size_t>(t)]);
    uint8_t* vc = v_cache(layer, r.kv_slot, row_slot[static_cast<size_t>(t)]);
    const int64_t at = row_pos[static_cast<size_t>(t)] * kv_dim * kv_elem;
    if (f16) {
      ops::to_f16(r.in[1].f32(t), reinterpret_cast<uint16_t*>(kc + at), kv_dim);
      ops::to_f16(r.in[2].f32(t), reinterpret_cast<uint16_t*>(vc + at), kv_dim);
    } else {
      std::memcpy(kc + at, r.in[1].f32(t), static_cast<size_t>(kv_dim) * sizeof(float));
      std::memcpy(vc + at, r.in[2].f32(t), static_cast<size_t>(kv_dim) * sizeof(float));
    }
  });
  const int64_t group = r.n_heads / r.n_heads_kv;
  const float scale = r.attn_scale;
  // Tasks are (kv head, block of kAttentionTokens tokens of one sequence):
  // the block's query heads share each converted K/V row. Fixed block size,
  // so results do not depend on the thread count; a row's scores, softmax and
  // P·V sums run in key order whatever block it is in (keys past a row's
  // causal bound get probability 0), so they do not depend on the batch.
  // A mixed batch is one parallel_for over the blocks of all its sequences.
  constexpr int64_t kAttentionTokens = 16;
  struct Block {
    const SeqRun* run;
    int64_t t0;  // first token of the block within the run
  };
  std::vector<Block> blocks;
  for (const SeqRun& run : runs)
    for (int64_t t0 = 0; t0 < run.n; t0 += kAttentionTokens) blocks.push_back({&run, t0});
  pool->parallel_for(static_cast<int64_t>(blocks.size()) * r.n_heads_kv, [&](int64_t task, int) {
    const Block& blk = blocks[static_cast<size_t>(task / r.n_heads_kv)];
    const SeqRun& run = *blk.run;
    const int64_t t0 = run.row0 + blk.t0, kv_head = task % r.n_heads_kv;
    const uint8_t* kc = k_cache(layer, r.kv_slot, run.slot);
    const uint8_t* vc = v_cache(layer, r.kv_slot, run.slot);
    ops::AttentionBlock b{};
    b.q = r.in[0].f32(t0) + kv_head * group * r.head_dim;
    b.q_token_stride = r.in[0].stride / static_cast<int64_t>(sizeof(float));
    b.k = kc + kv_head * r.head_dim * kv_elem;
    b.v = vc + kv_head * r.head_dim * kv_elem;
    b.row_stride = kv_dim;
    b.n_tokens = std::min(kAttentionTokens, run.n - blk.t0);
    b.n_heads = group;
    b.first_n_keys = run.pos0 + blk.t0 + 1;  // causal: a token sees itself and everything before it
    b.head_dim = r.head_dim;
    b.scale = scale;
    b.softcap = r.attn_softcap;
    b.window = windowed ? r.window : 0;
    b.out = r.out.f32(t0) + kv_head * group * r.head_dim;
    b.out_token_stride = r.out.stride / static_cast<int64_t>(sizeof(float));
    if (f16)
      ops::attention_block_f16(b);
    else
      ops::attention_block_f32(b);
  });
}

void Session::Impl::run_op(const ROp& r, Section section, size_t index, int64_t layer, int64_t take_row) {
  const Op& op = *r.op;
  auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const int64_t rows = r.in.empty() ? 0 : r.in[0].rows;
  switch (op.kind) {
    case OpId::Embed: {
      const gguf::TensorInfo* t = tensor(op.weights[0], layer);
      const int64_t cols = r.out.cols;
      const int64_t stride = static_cast<int64_t>(t->n_bytes) / t->ne[1];
      pool->parallel_for(rows, [&](int64_t i, int) {
        const uint8_t* src = t->data + *r.in[0].i32(i) * stride;
        float* dst = r.out.f32(i);
        if (t->type == gguf::TensorType::Q8_0)
          dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(src), dst, static_cast<size_t>(cols));
        else if (t->type == gguf::TensorType::F16)
          for (int64_t c = 0; c < cols; ++c) dst[c] = f16_to_f32(reinterpret_cast<const uint16_t*>(src)[c]);
        else
          std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
      });
      break;
    }
    case OpId::RmsNorm:
    case OpId::RmsNormQuant: {
      const float* w = reinterpret_cast<const float*>(tensor(op.weights[0], layer)->data);
      const int64_t cols = r.in[0].cols, group = r.head_dim;
      pool->parallel_for(rows, [&](int64_t i, int thread) {
        if (op.kind == OpId::RmsNorm) {
          for (int64_t c = 0; c < cols; c += group) ops::rms_norm(r.in[0].f32(i) + c, w, r.out.f32(i) + c, group, r.eps);
        } else {
          float* tmp = scratch[static_cast<size_t>(thread)].row.data();
          for (int64_t c = 0; c < cols; c += group) ops::rms_norm(r.in[0].f32(i) + c, w, tmp + c, group, r.eps);
          quantize_act(tmp, r.out.act(i), cols);
        }
      });
      break;
    }
    case OpId::Quantize:
      pool->parallel_for(rows, [&](int64_t i, int) { quantize_act(r.in[0].f32(i), r.out.act(i), r.in[0].cols); });
      break;
    case OpId::MatMul:
      run_matmul(r, bound.matmuls[section][index][static_cast<size_t>(section == Section::Layer ? layer : 0)], rows);
      break;
    case OpId::Rope: {
      const RView& target = r.out.buffer >= 0 ? r.out : r.in[0];
      const gguf::TensorInfo* factors = op.weights.empty() ? nullptr : tensor(op.weights[0], layer);
      const float* freq_factors = factors != nullptr ? reinterpret_cast<const float*>(factors->data) : nullptr;
      pool->parallel_for(rows, [&](int64_t i, int thread) {
        float* x = target.f32(i);
        if (!target.same_place(r.in[0]))
          std::memcpy(x, r.in[0].f32(i), static_cast<size_t>(r.in[0].cols) * sizeof(float));
        float* cos_sin = scratch[static_cast<size_t>(thread)].cos_sin.data();
        ops::rope_angles(row_pos[static_cast<size_t>(i)], r.head_dim, r.rope_base, cos_sin, freq_factors);
        ops::rope(x, r.n_heads, r.head_dim, cos_sin, op.rope_mode);
      });
      break;
    }
    case OpId::Attention: run_attention(r, layer, rows); break;
    case OpId::Add:
    case OpId::Mul:
    case OpId::Silu:
    case OpId::SiluMul: {
      const float* w = !op.weights.empty()
                           ? reinterpret_cast<const float*>(tensor(op.weights[0], layer)->data)
                           : nullptr;
      const int64_t cols = r.in[0].cols;
      pool->parallel_for(rows, [&](int64_t i, int) {
        const float* a = r.in[0].f32(i);
        const float* b = r.in.size() > 1 ? r.in[1].f32(i) : w;
        float* y = r.out.f32(i);
        for (int64_t c = 0; c < cols; ++c) {
          switch (op.kind) {
            case OpId::Add: y[c] = a[c] + b[c]; break;
            case OpId::Mul: y[c] = a[c] * b[c]; break;
            case OpId::Silu: y[c] = ops::silu(a[c]); break;
            default: y[c] = ops::silu(a[c]) * b[c]; break;
          }
        }
      });
      break;
    }
    case OpId::Softmax:
      pool->parallel_for(rows, [&](int64_t i, int) { ops::softmax_row(r.in[0].f32(i), r.out.f32(i), r.in[0].cols); });
      break;
    case OpId::Scale:
    case OpId::Gelu:
    case OpId::Softcap:
      pool->parallel_for(rows, [&](int64_t i, int) {
        const float* x = r.in[0].f32(i);
        float* y = r.out.f32(i);
        const int64_t cols = r.in[0].cols;
        if (op.kind == OpId::Scale)
          ops::scale(x, y, cols, r.scalar);
        else if (op.kind == OpId::Gelu)
          ops::gelu(x, y, cols);
        else
          ops::softcap(x, y, cols, r.scalar);
      });
      break;
    case OpId::Last:
      std::memmove(r.out.f32(0), r.in[0].f32(take_row), static_cast<size_t>(r.in[0].cols) * sizeof(float));
      break;
    case OpId::View: LUMEN_INTERNAL_ERROR("a view in the program (its reader refuses one)");
  }
  if (options.profile) {
    Profile& prof = profile[r.profile_key];
    prof.calls += 1;
    prof.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

// -------------------------------------------------------------------- public

Session::Session(std::shared_ptr<const CompiledModel> model, const std::string& gguf_path,
                 const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  auto start = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  if (!model) throw LoadError("no model");
  s.model = std::move(model);
  s.options = options;
  if (options.n_threads < 0) throw LoadError("the thread count must be >= 1");
  if (options.n_batch < 1) throw LoadError("the batch size must be >= 1");
  if (options.n_ctx < 0) throw LoadError("the context size must be >= 1");
  if (options.n_seq < 1 || options.n_seq > 4096) throw LoadError("the sequence count must be in [1, 4096]");
  s.n_seq = options.n_seq;
  s.positions.assign(static_cast<size_t>(s.n_seq), 0);
  s.post_rows = std::max<int64_t>(16, s.n_seq);
  try {
    s.file.emplace(gguf::File::open(gguf_path));
  } catch (const gguf::Error& e) {
    throw LoadError(e.what());
  }
  s.n_threads = options.n_threads == 0 ? physical_cores() : options.n_threads;
  s.pool = std::make_unique<ThreadPool>(s.n_threads);
  s.bound = bind_model(*s.model, *s.file, /*release_file_pages=*/true, *s.pool, options.pack_cache_dir,
                       options.map_pack_cache);
  const program::Program& p = s.program();

  s.n_ctx = options.n_ctx == 0 ? std::min<int64_t>(4096, s.bound.n_ctx_train) : options.n_ctx;
  if (s.n_ctx < 1 || s.n_ctx > s.bound.n_ctx_train)
    throw LoadError("context size " + std::to_string(s.n_ctx) + " exceeds the model's training context of " +
                    std::to_string(s.bound.n_ctx_train));
  s.n_batch = std::min(options.n_batch, s.n_ctx);
  s.kv_elem = options.kv_type == KvType::F16 ? 2 : 4;

  for (const auto* ops : {&p.pre, &p.layer, &p.post})
    for (const Op& op : *ops) {
      if (op.kind != OpId::Embed || op.weights.size() != 1) continue;
      const auto& tensors = s.bound.tensors[static_cast<size_t>(op.weights[0])];
      for (const gguf::TensorInfo* t : tensors)
        if (t != nullptr && t->ne.size() >= 2) s.max_token_id = std::min(s.max_token_id, t->ne[1]);
    }

  // Plans for decode and for a full batch: every layout and shape error shows now.
  s.plan_for(s.n_batch);
  const Plan& decode = s.plan_for(1);
  s.n_vocab = decode.logits.cols;
  s.build_post_template();

  // One KV cache per attention op of a layer, as wide as its K.
  for (const ROp& r : decode.sections.layer) {
    if (r.op->kind != OpId::Attention) continue;
    const int64_t width = r.in[1].cols;
    if (width < 1 || width > (int64_t{1} << 20)) throw LoadError("KV row width " + std::to_string(width) + " out of range");
    int64_t bytes = 0;
    if (__builtin_mul_overflow(2 * width * s.kv_elem, s.n_ctx, &bytes) ||
        __builtin_add_overflow(s.kv_layer_bytes, bytes, &s.kv_layer_bytes))
      throw LoadError("the KV cache size overflows");
    s.kv_slot_offset.push_back(s.kv_layer_bytes - bytes);
    s.kv_width.push_back(width);
  }
  int64_t kv_bytes = 0;
  if (__builtin_mul_overflow(s.bound.n_layers, s.kv_layer_bytes, &s.slot_bytes) ||
      __builtin_mul_overflow(s.slot_bytes, static_cast<int64_t>(s.n_seq), &kv_bytes))
    throw LoadError("the KV cache size overflows");
  s.kv = PageBuffer(static_cast<size_t>(std::max<int64_t>(kv_bytes, 1)));
  s.stats.kv_bytes = static_cast<uint64_t>(kv_bytes);

  int64_t max_cols = 1, max_head_dim = 2;
  for (Section section : program::kSections)
    for (const ROp& r : decode.sections[section]) {
      for (const RView& v : r.in) max_cols = std::max(max_cols, v.cols);
      max_head_dim = std::max(max_head_dim, r.head_dim);
    }
  s.scratch.resize(static_cast<size_t>(s.n_threads));
  for (ThreadScratch& t : s.scratch) {
    t.row.resize(static_cast<size_t>(max_cols));
    t.cos_sin.resize(static_cast<size_t>(max_head_dim));
  }
  s.logits.resize(static_cast<size_t>(s.n_vocab));
  s.stats.packed_bytes = s.bound.packed_bytes;
  s.stats.pack_seconds = s.bound.pack_seconds;
  s.stats.pack_cache = s.bound.pack_cache;
  s.stats.pack_cache_how = s.bound.pack_cache_how;
  s.stats.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Session::~Session() = default;

// One forward pass over the rows set in row_slot/row_pos/runs, then the post
// ops for the kept rows; their logits go to out, n_vocab floats each, in order.
void Session::Impl::forward(const Plan& plan, std::span<const int32_t> tokens, std::span<const int64_t> kept,
                            float* out) {
  const program::Program& p = program();
  const int64_t n = plan.n;
  for (int64_t i = 0; i < n; ++i) *plan.tokens.i32(i) = tokens[static_cast<size_t>(i)];
  for (size_t i = 0; i < p.pre.size(); ++i) run_op(plan.sections.pre[i], Section::Pre, i, 0, n - 1);
  for (int64_t layer = 0; layer < bound.n_layers; ++layer)
    for (size_t i = 0; i < p.layer.size(); ++i) run_op(plan.sections.layer[i], Section::Layer, i, layer, n - 1);
  run_post(plan, kept, out);
}

// One row: Last picks it and the post ops run on it (decode kernels).
// Several: up to post_rows at a time gathered into the side arena and run
// as one pass (prefill kernels), which gives each row the same bits.
void Session::Impl::run_post(const Plan& plan, std::span<const int64_t> kept, float* out) {
  const program::Program& p = program();
  const size_t count = kept.size();
  if (count == 1 || !post_template.batchable) {
    for (size_t j = 0; j < count; ++j) {
      for (size_t i = 0; i < p.post.size(); ++i) run_op(plan.sections.post[i], Section::Post, i, 0, kept[j]);
      const float* row = plan.logits.f32(plan.logits.rows - 1);
      std::copy(row, row + n_vocab, out + static_cast<int64_t>(j) * n_vocab);
    }
    return;
  }
  const RView& source = plan.sections.post[0].in[0];
  for (size_t g = 0; g < count; g += static_cast<size_t>(post_rows)) {
    const int64_t k = std::min<int64_t>(post_rows, static_cast<int64_t>(count - g));
    const std::vector<ROp>& ops = post_plan_for(k);
    const RView& gathered = ops[0].out;
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(gathered.f32(j), source.f32(kept[g + static_cast<size_t>(j)]),
                  static_cast<size_t>(source.cols) * sizeof(float));
    for (size_t i = 1; i < ops.size(); ++i) run_op(ops[i], Section::Post, i, 0, 0);
    for (int64_t j = 0; j < k; ++j) {
      const float* row = post_template.logits.f32(j);
      std::copy(row, row + n_vocab, out + (static_cast<int64_t>(g) + j) * n_vocab);
    }
  }
}

std::span<const float> Session::eval(std::span<const int32_t> tokens) {
  Impl& s = *impl_;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t position = s.positions[0];
  if (total == 0) throw EvalError("no tokens to evaluate");
  if (total > s.n_ctx - position)
    throw EvalError(std::to_string(total) + " tokens at position " + std::to_string(position) +
                    " exceed the context size of " + std::to_string(s.n_ctx) + " (use --ctx)");
  for (int32_t id : tokens)
    if (id < 0 || id >= s.max_token_id || id >= s.n_vocab)
      throw EvalError("token id " + std::to_string(id) + " is out of range [0, " +
                      std::to_string(std::min(s.max_token_id, s.n_vocab)) + ")");
  if (s.options.all_logits) s.all_logits.assign(static_cast<size_t>(total * s.n_vocab), 0.0f);

  std::vector<int64_t> kept;
  for (int64_t start = 0; start < total; start += s.n_batch) {
    const int64_t n = std::min(s.n_batch, total - start);
    const Plan& plan = s.plan_for(n);
    s.row_slot.assign(static_cast<size_t>(n), 0);
    s.row_pos.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s.row_pos[static_cast<size_t>(i)] = s.positions[0] + i;
    s.runs = {SeqRun{0, 0, n, s.positions[0]}};
    const bool last_batch = start + n == total;
    // The post ops turn rows into logits: the last token's, or every
    // token's when all positions' logits are kept.
    kept.clear();
    if (s.options.all_logits)
      for (int64_t i = 0; i < n; ++i) kept.push_back(i);
    else if (last_batch)
      kept.push_back(n - 1);
    float* out = s.options.all_logits ? s.all_logits.data() + start * s.n_vocab : s.logits.data();
    s.forward(plan, tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n)), kept, out);
    s.positions[0] += n;
  }
  if (s.options.all_logits)
    std::copy(s.all_logits.end() - s.n_vocab, s.all_logits.end(), s.logits.begin());
  return s.logits;
}

void Session::step(std::span<const SeqTokens> batch) {
  Impl& s = *impl_;
  int64_t total = 0;
  std::vector<bool> seen(static_cast<size_t>(s.n_seq), false);
  for (const SeqTokens& e : batch) {
    if (e.slot < 0 || e.slot >= s.n_seq)
      throw EvalError("slot " + std::to_string(e.slot) + " is out of range [0, " + std::to_string(s.n_seq) + ")");
    if (seen[static_cast<size_t>(e.slot)]) throw EvalError("slot " + std::to_string(e.slot) + " appears twice in a step");
    seen[static_cast<size_t>(e.slot)] = true;
    const int64_t size = static_cast<int64_t>(e.tokens.size());
    if (size == 0) throw EvalError("slot " + std::to_string(e.slot) + " has no tokens to evaluate");
    const int64_t position = s.positions[static_cast<size_t>(e.slot)];
    if (size > s.n_ctx - position)
      throw EvalError(std::to_string(size) + " tokens at position " + std::to_string(position) + " of slot " +
                      std::to_string(e.slot) + " exceed the context size of " + std::to_string(s.n_ctx));
    for (int32_t id : e.tokens)
      if (id < 0 || id >= s.max_token_id || id >= s.n_vocab)
        throw EvalError("token id " + std::to_string(id) + " is out of range [0, " +
                        std::to_string(std::min(s.max_token_id, s.n_vocab)) + ")");
    total += size;
  }
  if (total == 0) throw EvalError("no tokens to evaluate");
  if (total > s.n_batch)
    throw EvalError(std::to_string(total) + " tokens in one step exceed the batch size of " +
                    std::to_string(s.n_batch));

  std::vector<int32_t> tokens;
  std::vector<int64_t> kept;
  s.row_slot.clear();
  s.row_pos.clear();
  s.runs.clear();
  s.step_first.clear();
  s.step_kept.clear();
  s.step_size.clear();
  for (const SeqTokens& e : batch) {
    const int64_t size = static_cast<int64_t>(e.tokens.size());
    const int64_t row0 = static_cast<int64_t>(tokens.size());
    const int64_t pos0 = s.positions[static_cast<size_t>(e.slot)];
    s.runs.push_back(SeqRun{e.slot, row0, size, pos0});
    for (int64_t i = 0; i < size; ++i) {
      s.row_slot.push_back(e.slot);
      s.row_pos.push_back(pos0 + i);
    }
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    s.step_first.push_back(kept.size());
    s.step_kept.push_back(e.all_logits ? size : 1);
    s.step_size.push_back(size);
    if (e.all_logits)
      for (int64_t i = 0; i < size; ++i) kept.push_back(row0 + i);
    else
      kept.push_back(row0 + size - 1);
  }
  s.step_out.resize(kept.size() * static_cast<size_t>(s.n_vocab));
  const Plan& plan = s.plan_for(total);
  s.forward(plan, tokens, kept, s.step_out.data());
  for (const SeqTokens& e : batch) s.positions[static_cast<size_t>(e.slot)] += static_cast<int64_t>(e.tokens.size());
}

std::span<const float> Session::step_logits(size_t entry, int64_t token) const {
  const Impl& s = *impl_;
  if (entry >= s.step_first.size()) throw std::out_of_range("no step entry " + std::to_string(entry));
  const int64_t kept = s.step_kept[entry], size = s.step_size[entry];
  const int64_t row = token < 0 ? kept - 1 : token - (size - kept);
  if (row < 0 || row >= kept) throw std::out_of_range("no logits kept for token " + std::to_string(token) + " of entry " +
                                           std::to_string(entry) + " (all_logits)");
  const size_t at = (s.step_first[entry] + static_cast<size_t>(row)) * static_cast<size_t>(s.n_vocab);
  return std::span<const float>(s.step_out.data() + at, static_cast<size_t>(s.n_vocab));
}

int64_t Session::position(int slot) const {
  if (slot < 0 || slot >= impl_->n_seq) throw std::out_of_range("no slot " + std::to_string(slot));
  return impl_->positions[static_cast<size_t>(slot)];
}
void Session::clear(int slot) {
  if (slot < 0 || slot >= impl_->n_seq) throw std::out_of_range("no slot " + std::to_string(slot));
  impl_->positions[static_cast<size_t>(slot)] = 0;
}
int Session::n_seq() const { return impl_->n_seq; }
int64_t Session::n_batch() const { return impl_->n_batch; }

std::span<const float> Session::logits_at(int64_t i) const {
  const Impl& s = *impl_;
  if (!s.options.all_logits || i < 0 || (i + 1) * s.n_vocab > static_cast<int64_t>(s.all_logits.size()))
    throw std::out_of_range("no logits kept for position " + std::to_string(i));
  return std::span<const float>(s.all_logits.data() + i * s.n_vocab, static_cast<size_t>(s.n_vocab));
}

int64_t Session::position() const { return impl_->positions[0]; }
void Session::clear() { impl_->positions[0] = 0; }
int64_t Session::n_ctx() const { return impl_->n_ctx; }
int64_t Session::n_vocab() const { return impl_->n_vocab; }
int Session::n_threads() const { return impl_->n_threads; }
const gguf::File& Session::gguf() const { return *impl_->file; }
const CompiledModel& Session::model() const { return *impl_->model; }
const LoadStats& Session::load_stats() const { return impl_->stats; }

std::string Session::profile_report() const {
  const Impl& s = *impl_;
  if (s.profile.empty()) return "";
  std::vector<std::pair<std::string, Profile>> rows(s.profile.begin(), s.profile.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                               calls     time(ms)     share     GB/s    GOP/s\n";
  for (const auto& [name, prof] : rows) {
    char line[200];
    double gbs = prof.seconds > 0 ? prof.bytes / prof.seconds / 1e9 : 0;
    double gops = prof.seconds > 0 ? prof.ops / prof.seconds / 1e9 : 0;
    std::snprintf(line, sizeof line, "%-30s %7lld %12.3f %8.1f%% %8.2f %8.2f\n", name.c_str(),
                  static_cast<long long>(prof.calls), prof.seconds * 1e3, total > 0 ? 100 * prof.seconds / total : 0,
                  gbs, gops);
    out += line;
  }
  return out;
}

}  // namespace lumen::runtime
