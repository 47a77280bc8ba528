// The program resolved for one batch size (session_plan.cpp makes it): every
// view as a place in the arena, every op with its hparams evaluated, its
// matmul kernel and thread split chosen, checked against the op table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/program/program.h"
#include "lumen/runtime/binding.h"
#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

// Rows are sized by the type list's blocks; these are the blocks the kernels read.
using ::lumen::ops::row_bytes;
static_assert(::lumen::ops::row(program::DType::Q8_0).block_bytes == sizeof(BlockQ8_0) &&
              ::lumen::ops::row(program::DType::Q8_0).block_elems == kQ8Block);
static_assert(::lumen::ops::row(program::DType::ActQ8).block_bytes == sizeof(ActBlock) &&
              ::lumen::ops::row(program::DType::ActQ8).block_elems == kQ8Block);

// A view resolved for one batch size: where its rows are in the arena.
struct RView {
  uint8_t* base = nullptr;  // row 0 at the view's first column
  int64_t stride = 0;       // bytes between rows
  int64_t rows = 0;
  int64_t cols = 0;
  program::DType dtype = program::DType::F32;
  int buffer = -1;

  float* f32(int64_t row) const { return reinterpret_cast<float*>(base + row * stride); }
  int32_t* i32(int64_t row) const { return reinterpret_cast<int32_t*>(base + row * stride); }
  ActBlock* act(int64_t row) const { return reinterpret_cast<ActBlock*>(base + row * stride); }
  bool same_place(const RView& o) const { return base == o.base && stride == o.stride; }
};

// An op resolved for one batch size.
struct ROp {
  const program::Op* op = nullptr;
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
  // Layer ops: consecutive row-local ops (the op list's row_local) run row by
  // row in one parallel_for, one join for the run (mark_row_runs,
  // session_plan.cpp). The run's first op has row_run = its length, the
  // others 0, an op outside a run 1. An Attention right after a run has its
  // K/V store done by the run's rows (kv_stored_by_run): a run of one op
  // before it is a run too.
  int row_run = 1;
  bool starts_row_run = false;  // the first op of a run (a run of one before an Attention too)
  bool kv_stored_by_run = false;
  // A Quantize right after a MatMul or an Attention, of exactly its output,
  // whose tasks each write whole 32-column blocks (mark_folded_quantize):
  // each task of the producer quantizes the blocks it wrote into
  // `quantized`, and the Quantize does not run (folded_into_producer).
  RView quantized;
  bool quantizes_output = false, folded_into_producer = false;
  std::string profile_key;
  // MatMul: the kernel for this plan's rows of each packed format of the
  // schedule, and each layer's (an index into `matmul` by its weights'
  // format; one entry outside the layer section).
  struct MatMulKernel {
    MatMulFn fn = nullptr;
    int64_t rows_per_task = 0, tokens_per_task = 0;
    // A GEMM over weights packed in another format (Q4_0, Q5_0): each task
    // converts its rows to packed Q8_0 first; over a k-quant (Q4_K, Q5_K,
    // Q6_K): each task expands its rows (packed_kquant.h). Q8_0: none.
    program::DType convert_from = program::DType::Q8_0;
    std::string profile_key;
  };
  std::vector<MatMulKernel> matmul;
  std::vector<size_t> layer_kernel;
  const MatMulKernel& matmul_for(int64_t layer) const {
    return matmul[layer_kernel[layer_kernel.size() == 1 ? 0 : static_cast<size_t>(layer)]];
  }
};

struct Plan {
  int64_t n = 0;
  PerSection<std::vector<ROp>> sections;
  RView tokens, logits;
  std::vector<uint8_t*> buffer_base;  // row 0, column 0 of every buffer
};

// The post ops run on k gathered rows at once (the output head reads its
// weights once for every sequence of a step): the ops of plan_for(1) with the
// buffers the post section writes moved to a side arena of k rows.
struct PostTemplate {
  bool batchable = false;
  std::vector<ROp> ops;
  RView logits;
};

}  // namespace lumen::runtime
