// Execution: runs a resolved plan (session_plan.h) over the rows of one pass.
// Every op is one parallel_for over tasks that always cover the same rows the
// same way, so results do not depend on the thread count. Attention stores
// the pass's K and V in the KV cache (kv_cache.h) and reads it back.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>
#include <vector>

#include "lumen/common/internal_error.h"
#include "lumen/common/numeric.h"
#include "lumen/quant/quant.h"
#include "lumen/runtime/kernels.h"
#include "lumen/target/packed_4bit.h"
#include "lumen/target/packed_kquant.h"
#include "session_impl.h"

namespace lumen::runtime {

using program::DType;
using program::Epilogue;
using program::Op;
using ::lumen::ops::OpId;
using program::Section;

void Session::Impl::run_matmul(const ROp& r, const ROp::MatMulKernel& k, const PackedMatMul& mm, int64_t n) {
  const int64_t row_tasks = (mm.rows + k.rows_per_task - 1) / k.rows_per_task;
  // A task over converted weights converts its rows once, for all the tokens.
  const int64_t token_block = n == 1 ? 1 : k.convert_from != DType::Q8_0 ? n : k.tokens_per_task;
  const int64_t token_tasks = (n + token_block - 1) / token_block;
  const int64_t group = pack_row_group(model->isa);
  const bool residual = r.op->epilogue == Epilogue::Residual || r.op->epilogue == Epilogue::BiasResidual;
  const RView& x = r.in[0];
  const RView& y = r.out;
  const int64_t halves = r.op->epilogue == Epilogue::SiluMul ? 2 : 1;  // gate and up groups alternate
  pool->parallel_for(row_tasks * token_tasks, [&](int64_t task, int thread) {
    const int64_t row0 = (task % row_tasks) * k.rows_per_task;
    const int64_t tok0 = (task / row_tasks) * token_block;
    MatMulArgs args{};
    args.w = mm.w + row0 / group * mm.group_bytes;
    args.bias = mm.bias != nullptr ? mm.bias + row0 : nullptr;
    // Float weights read the f32 rows (target/weight_formats.h matmul_input_dtype).
    const bool f32_input = x.dtype == DType::F32;
    args.x_stride = x.stride / static_cast<int64_t>(f32_input ? sizeof(float) : sizeof(ActBlock));
    args.y_stride = y.stride / static_cast<int64_t>(sizeof(float));
    args.r_stride = residual ? r.residual.stride / static_cast<int64_t>(sizeof(float)) : 0;
    args.k_blocks = mm.k / kQ8Block;
    args.m_rows = std::min(k.rows_per_task, mm.rows - row0);
    if (k.convert_from != DType::Q8_0) {
      const int64_t groups = (args.m_rows + group - 1) / group * halves;
      PageBuffer& converted = scratch[static_cast<size_t>(thread)].weights;
      const bool kquant = has_expanded_kquant(k.convert_from);  // expanded for the k-quant GEMM
      const auto need =
          static_cast<size_t>(groups * args.k_blocks * (kquant ? expanded_kquant_block_bytes(k.convert_from) : kPackedBlockBytes));
      if (converted.size() < need) converted = PageBuffer(need);
      if (kquant) {
        expand_kquant(k.convert_from, args.w, groups, args.k_blocks, converted.data());
      } else {
        convert_packed_to_q8_0(k.convert_from, model->isa, args.w, groups, args.k_blocks, converted.data());
      }
      args.w = converted.data();
    }
    if (f32_input) {
      args.x_f32 = x.f32(tok0);
    } else {
      args.x = x.act(tok0);
    }
    args.y = y.f32(tok0) + row0;
    args.residual = residual ? r.residual.f32(tok0) + row0 : nullptr;
    args.n_tokens = std::min(token_block, n - tok0);
    k.fn(&args);
    if (r.quantizes_output)
      for (int64_t t = tok0; t < tok0 + args.n_tokens; ++t)
        quantize_act(y.f32(t) + row0, r.quantized.act(t) + row0 / kQ8Block, args.m_rows);
  });
  if (options.profile) {
    Profile& prof = profile[k.profile_key];
    // The packed weights streamed (padding rows included), whatever their format.
    prof.bytes += static_cast<double>((mm.rows + group - 1) / group * mm.group_bytes);
    prof.ops += 2.0 * static_cast<double>(mm.rows * (r.op->epilogue == Epilogue::SiluMul ? 2 : 1)) *
                static_cast<double>(mm.k) * static_cast<double>(n);
  }
}

// One row of an Attention's K/V store: row t's K (already rotated) and V in
// its slot at its position.
void Session::Impl::store_kv_row(const ROp& r, int64_t layer, int64_t t) {
  const int64_t kv_dim = kv.width(r.kv_slot);
  uint8_t* kc = kv.k(layer, r.kv_slot, row_slot[static_cast<size_t>(t)]);
  uint8_t* vc = kv.v(layer, r.kv_slot, row_slot[static_cast<size_t>(t)]);
  const int64_t at = row_pos[static_cast<size_t>(t)] * kv.row_bytes(r.kv_slot);
  switch (kv.type()) {
    case KvType::F16:
      kernels::to_f16(r.in[1].f32(t), reinterpret_cast<uint16_t*>(kc + at), kv_dim);
      kernels::to_f16(r.in[2].f32(t), reinterpret_cast<uint16_t*>(vc + at), kv_dim);
      break;
    case KvType::F32:
      std::memcpy(kc + at, r.in[1].f32(t), static_cast<size_t>(kv_dim) * sizeof(float));
      std::memcpy(vc + at, r.in[2].f32(t), static_cast<size_t>(kv_dim) * sizeof(float));
      break;
    case KvType::Q8_0:
      kernels::to_q8_0(r.in[1].f32(t), reinterpret_cast<BlockQ8_0*>(kc + at), kv_dim);
      kernels::to_q8_0(r.in[2].f32(t), reinterpret_cast<BlockQ8_0*>(vc + at), kv_dim);
      break;
  }
}

void Session::Impl::run_attention(const ROp& r, int64_t layer, int64_t n) {
  const int64_t kv_dim = kv.width(r.kv_slot);
  const bool windowed = r.window > 0 && (r.window_pattern == 0 || layer % r.window_pattern < r.window_pattern - 1);
  // Store this batch's K (already rotated) and V in their slots at their
  // positions, unless the row run before the op did (ROp::kv_stored_by_run).
  if (!r.kv_stored_by_run) pool->parallel_for(n, [&](int64_t t, int) { store_kv_row(r, layer, t); });
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
    const uint8_t* kc = kv.k(layer, r.kv_slot, run.slot);
    const uint8_t* vc = kv.v(layer, r.kv_slot, run.slot);
    kernels::AttentionBlock b{};
    b.q = r.in[0].f32(t0) + kv_head * group * r.head_dim;
    b.q_token_stride = r.in[0].stride / static_cast<int64_t>(sizeof(float));
    b.k = kc + kv.bytes_of(kv_head * r.head_dim);
    b.v = vc + kv.bytes_of(kv_head * r.head_dim);
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
    switch (kv.type()) {
      case KvType::F16: kernels::attention_block_f16(b); break;
      case KvType::F32: kernels::attention_block_f32(b); break;
      case KvType::Q8_0: kernels::attention_block_q8_0(b); break;
    }
    if (r.quantizes_output) {
      const int64_t col0 = kv_head * group * r.head_dim;
      for (int64_t t = t0; t < t0 + b.n_tokens; ++t)
        quantize_act(r.out.f32(t) + col0, r.quantized.act(t) + col0 / kQ8Block, group * r.head_dim);
    }
  });
}

// What a row-local op's rows read besides their views, resolved once per
// op and layer before its rows run (row_inputs), not per row.
Session::Impl::RowInputs Session::Impl::row_inputs(const ROp& r, int64_t layer) const {
  const Op& op = *r.op;
  RowInputs in;
  const gguf::TensorInfo* t = op.weights.empty() ? nullptr : tensor(op.weights[0], layer);
  if (t != nullptr) in.weight = t->data;
  switch (op.kind) {
    case OpId::Embed:
      in.table_stride = static_cast<int64_t>(t->n_bytes) / t->ne[1];
      // The table may be of any weight type (the plan checked it is one).
      in.table_type = *::lumen::ops::dtype_of_ggml(static_cast<uint32_t>(t->type));
      break;
    case OpId::RmsNorm:
    case OpId::RmsNormQuant:
    case OpId::Quantize:
    case OpId::Rope:
    case OpId::Add:
    case OpId::Mul:
    case OpId::Silu:
    case OpId::SiluMul:
    case OpId::Softmax: break;
    default:
      // An element-wise op with a row kernel: kernels.h says which ops have one.
      in.row_kernel = kernels::row_kernel(op.kind);
      LUMEN_ASSERT(in.row_kernel != nullptr && ::lumen::ops::row(op.kind).row_local,
                   std::string("no row kernel runs ") + ::lumen::ops::id_name(op.kind));
      break;
  }
  return in;
}

// One row of a row-local op (the op list's row_local): the same arithmetic
// whether the op runs alone or in a row run.
void Session::Impl::run_row(const ROp& r, const RowInputs& in, int64_t i, int thread) {
  const Op& op = *r.op;
  const float* w = reinterpret_cast<const float*>(in.weight);  // the f32 weight of a norm, rope, add or mul
  switch (op.kind) {
    case OpId::Embed:
      quant::dequantize_row(in.table_type, in.weight + *r.in[0].i32(i) * in.table_stride, r.out.f32(i), r.out.cols);
      break;
    case OpId::RmsNorm:
    case OpId::RmsNormQuant: {
      const int64_t cols = r.in[0].cols, group = r.head_dim;
      if (op.kind == OpId::RmsNorm) {
        for (int64_t c = 0; c < cols; c += group) kernels::rms_norm(r.in[0].f32(i) + c, w, r.out.f32(i) + c, group, r.eps);
      } else {
        float* tmp = scratch[static_cast<size_t>(thread)].row.data();
        for (int64_t c = 0; c < cols; c += group) kernels::rms_norm(r.in[0].f32(i) + c, w, tmp + c, group, r.eps);
        quantize_act(tmp, r.out.act(i), cols);
      }
      break;
    }
    case OpId::Quantize: quantize_act(r.in[0].f32(i), r.out.act(i), r.in[0].cols); break;
    case OpId::Rope: {
      const RView& target = r.out.buffer >= 0 ? r.out : r.in[0];
      float* x = target.f32(i);
      if (!target.same_place(r.in[0])) std::memcpy(x, r.in[0].f32(i), static_cast<size_t>(r.in[0].cols) * sizeof(float));
      float* cos_sin = scratch[static_cast<size_t>(thread)].cos_sin.data();
      kernels::rope_angles(row_pos[static_cast<size_t>(i)], r.head_dim, r.rope_base, cos_sin, w);  // w: freq factors
      kernels::rope(x, r.n_heads, r.head_dim, cos_sin, op.rope_mode);
      break;
    }
    case OpId::Add:
    case OpId::Mul:
    case OpId::Silu:
    case OpId::SiluMul: {
      const int64_t cols = r.in[0].cols;
      const float* a = r.in[0].f32(i);
      const float* b = r.in.size() > 1 ? r.in[1].f32(i) : w;
      float* y = r.out.f32(i);
      for (int64_t c = 0; c < cols; ++c) {
        switch (op.kind) {
          case OpId::Add: y[c] = a[c] + b[c]; break;
          case OpId::Mul: y[c] = a[c] * b[c]; break;
          case OpId::Silu: y[c] = kernels::silu(a[c]); break;
          default: y[c] = kernels::silu(a[c]) * b[c]; break;
        }
      }
      break;
    }
    case OpId::Softmax: kernels::softmax_row(r.in[0].f32(i), r.out.f32(i), r.in[0].cols); break;
    default: in.row_kernel->run(r.in[0].f32(i), r.out.f32(i), r.in[0].cols, r.scalar); break;
  }
}

void Session::Impl::run_op(const ROp& r, Section section, size_t index, int64_t layer, int64_t take_row) {
  const Op& op = *r.op;
  auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const int64_t rows = r.in.empty() ? 0 : r.in[0].rows;
  switch (op.kind) {
    case OpId::MatMul: {
      const int64_t at = section == Section::Layer ? layer : 0;
      run_matmul(r, r.matmul_for(at), bound.matmuls[section][index][static_cast<size_t>(at)], rows);
      break;
    }
    case OpId::Attention: run_attention(r, layer, rows); break;
    case OpId::Last:
      std::memmove(r.out.f32(0), r.in[0].f32(take_row), static_cast<size_t>(r.in[0].cols) * sizeof(float));
      break;
    case OpId::View: LUMEN_INTERNAL_ERROR("a view in the program (its reader refuses one)");
    default: {
      const RowInputs in = row_inputs(r, layer);
      pool->parallel_for(rows, [&](int64_t i, int thread) { run_row(r, in, i, thread); });
      break;
    }
  }
  if (options.profile) {
    // A matmul's time goes to the kernel its layer ran (layers differ in format).
    const int64_t at = section == Section::Layer ? layer : 0;
    Profile& prof = profile[op.kind == OpId::MatMul ? r.matmul_for(at).profile_key : r.profile_key];
    prof.calls += 1;
    prof.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

// A row run (ROp::row_run) from ops[first]: one parallel_for whose task i
// runs row i through every op of the run in order, then, when the op after
// the run is an Attention, stores row i's K and V. With --profile the run's
// time is shared among its ops (the K/V store's share goes to the Attention)
// by the thread time each spent.
void Session::Impl::run_row_run(const std::vector<ROp>& ops, size_t first, int64_t layer) {
  const size_t end = first + static_cast<size_t>(ops[first].row_run);
  const ROp* attention = end < ops.size() && ops[end].kv_stored_by_run ? &ops[end] : nullptr;
  const int64_t rows = ops[first].in[0].rows;
  const size_t width = end - first + 1;
  std::vector<RowInputs> inputs;
  inputs.reserve(end - first);
  for (size_t j = first; j < end; ++j) inputs.push_back(row_inputs(ops[j], layer));
  if (!options.profile) {
    pool->parallel_for(rows, [&](int64_t i, int thread) {
      for (size_t j = first; j < end; ++j) run_row(ops[j], inputs[j - first], i, thread);
      if (attention != nullptr) store_kv_row(*attention, layer, i);
    });
    return;
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> spent(static_cast<size_t>(pool->size()) * width, 0.0);
  const Clock::time_point start = Clock::now();
  pool->parallel_for(rows, [&](int64_t i, int thread) {
    double* mine = spent.data() + static_cast<size_t>(thread) * width;
    Clock::time_point t0 = Clock::now();
    for (size_t j = first; j <= end; ++j) {
      if (j < end) run_row(ops[j], inputs[j - first], i, thread);
      else if (attention != nullptr) store_kv_row(*attention, layer, i);
      const Clock::time_point t1 = Clock::now();
      mine[j - first] += std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
    }
  });
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> per_op(width, 0.0);
  double total = 0;
  for (size_t t = 0; t < spent.size(); ++t) per_op[t % width] += spent[t], total += spent[t];
  for (size_t j = 0; j < width; ++j) {
    if (j + first == end && attention == nullptr) break;
    Profile& prof = profile[ops[first + j].profile_key];
    if (j + first < end) prof.calls += 1;  // the Attention counts its call when it runs
    prof.seconds += total > 0 ? wall * per_op[j] / total : wall / static_cast<double>(width);
  }
}

// One forward pass over the rows set in row_slot/row_pos/runs, then the
// hidden states of hidden_rows (n_embd floats each to hidden_out, in order)
// and the post ops for the kept rows; their logits go to out, n_vocab floats
// each, in order.
void Session::Impl::forward(const Plan& plan, std::span<const int32_t> tokens, std::span<const int64_t> kept,
                            float* out, std::span<const int64_t> hidden_rows, float* hidden_out) {
  const program::Program& p = program();
  const int64_t n = plan.n;
  const ThreadPool::Stats before = options.profile ? pool->stats() : ThreadPool::Stats{};
  for (int64_t i = 0; i < n; ++i) *plan.tokens.i32(i) = tokens[static_cast<size_t>(i)];
  for (size_t i = 0; i < p.pre.size(); ++i) run_op(plan.sections.pre[i], Section::Pre, i, 0, n - 1);
  const std::vector<ROp>& layer_ops = plan.sections.layer;
  for (int64_t layer = 0; layer < bound.n_layers; ++layer) {
    for (size_t i = 0; i < layer_ops.size();) {
      const ROp& r = layer_ops[i];
      if (r.starts_row_run) {
        run_row_run(layer_ops, i, layer);
        i += static_cast<size_t>(r.row_run);
      } else {
        if (!r.folded_into_producer) run_op(r, Section::Layer, i, layer, n - 1);
        ++i;
      }
    }
  }
  run_hidden(plan, hidden_rows, hidden_out);
  run_post(plan, kept, out);
  if (options.profile) {
    PassProfile& prof = n == 1 ? decode_profile : prefill_profile;
    const ThreadPool::Stats& after = pool->stats();
    prof.passes += 1;
    prof.tokens += n;
    prof.pool.calls += after.calls - before.calls;
    prof.pool.joins += after.joins - before.joins;
    prof.pool.joined_tasks += after.joined_tasks - before.joined_tasks;
    prof.pool.join_seconds += after.join_seconds - before.join_seconds;
    prof.pool.wait_seconds += after.wait_seconds - before.wait_seconds;
    prof.pool.caller_wait_seconds += after.caller_wait_seconds - before.caller_wait_seconds;
  }
}

// The final norm (find_hidden_norm) on rows of the layers' output, before the
// post ops may reuse its memory: per row the arithmetic of run_op's RmsNorm,
// which is also what RmsNormQuant computes before it quantizes.
void Session::Impl::run_hidden(const Plan& plan, std::span<const int64_t> rows, float* out) {
  if (rows.empty()) return;
  const ROp& norm = plan.sections.post[static_cast<size_t>(hidden_norm)];
  const RView& source = plan.sections.post[0].in[0];
  const float* w = reinterpret_cast<const float*>(tensor(norm.op->weights[0], 0)->data);
  const int64_t cols = n_embd, group = norm.head_dim;
  pool->parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t j, int) {
    const float* x = source.f32(rows[static_cast<size_t>(j)]);
    float* y = out + j * cols;
    for (int64_t c = 0; c < cols; c += group) kernels::rms_norm(x + c, w, y + c, group, norm.eps);
  });
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

}  // namespace lumen::runtime
