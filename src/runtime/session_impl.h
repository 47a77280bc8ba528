// The state behind Session (session.h), shared by the files that implement
// it: session_plan.cpp resolves and checks the program per batch size,
// session_execute.cpp runs it, kv_cache.h holds the KV cache, session.cpp is
// the public facade.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kv_cache.h"
#include "lumen/runtime/binding.h"
#include "lumen/runtime/kernels.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/thread_pool.h"
#include "lumen/target/page_buffer.h"
#include "session_plan.h"

namespace lumen::runtime {

// A contiguous run of rows of one pass that belong to one sequence (KV slot),
// at consecutive positions from pos0.
struct SeqRun {
  int slot = 0;
  int64_t row0 = 0, n = 0, pos0 = 0;
};

struct ThreadScratch {
  std::vector<float> row;      // a normalized row before quantization
  std::vector<float> cos_sin;  // rope angles of one position
  PageBuffer weights;          // a prefill task's weight rows converted to packed Q8_0
};

struct Profile {
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;  // weight bytes streamed (matmuls)
  double ops = 0;    // multiply-adds x 2 (matmuls)
};

// The pool's joins and waits over forward passes (options.profile), kept
// apart for one-token passes (decode steps) and longer ones (prefill).
struct PassProfile {
  int64_t passes = 0, tokens = 0;
  ThreadPool::Stats pool;
};

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
  int64_t max_token_id = INT64_MAX;  // exclusive bound from the embedding tables
  KvCache kv;
  PageBuffer arena;
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
  // Hidden states (SeqTokens::hidden): the final norm's index in the post
  // section (-1: none), the step's rows of n_embd floats, each entry's first
  // row in them (-1: it asked for none).
  int hidden_norm = -1;
  int64_t n_embd = 0;
  std::vector<float> step_hidden_out;
  std::vector<int64_t> step_hidden_first;
  LoadStats stats;
  std::map<std::string, Profile> profile;
  PassProfile decode_profile, prefill_profile;

  const program::Program& program() const { return model->program; }

  const gguf::TensorInfo* tensor(int weight, int64_t layer) const { return bound.tensor(weight, layer); }

  // session_plan.cpp
  const Plan& plan_for(int64_t n);
  void choose_kernel(ROp& r, program::Section s, size_t i, int64_t rows) const;
  void build_post_template();
  void find_hidden_norm();
  const std::vector<ROp>& post_plan_for(int64_t k);
  void check_op(const ROp& r, program::Section section, size_t index, int64_t n) const;
  // session_execute.cpp
  void forward(const Plan& plan, std::span<const int32_t> tokens, std::span<const int64_t> kept, float* out,
               std::span<const int64_t> hidden_rows = {}, float* hidden_out = nullptr);
  void run_hidden(const Plan& plan, std::span<const int64_t> rows, float* out);
  void run_post(const Plan& plan, std::span<const int64_t> kept, float* out);
  void run_op(const ROp& r, program::Section section, size_t index, int64_t layer, int64_t take_row);
  // What a row-local op reads besides its views, for one layer: its weight
  // (a norm's or mul's f32 vector, rope's frequency factors, an embedding
  // table with its row stride and type), or its row kernel.
  struct RowInputs {
    const uint8_t* weight = nullptr;
    int64_t table_stride = 0;
    program::DType table_type = program::DType::F32;
    const kernels::RowKernel* row_kernel = nullptr;
  };
  RowInputs row_inputs(const ROp& r, int64_t layer) const;
  void run_row(const ROp& r, const RowInputs& in, int64_t row, int thread);
  void run_row_run(const std::vector<ROp>& ops, size_t first, int64_t layer);
  void store_kv_row(const ROp& attention, int64_t layer, int64_t t);
  void run_matmul(const ROp& r, const ROp::MatMulKernel& k, const PackedMatMul& mm, int64_t n);
  void run_attention(const ROp& r, int64_t layer, int64_t n);
};

}  // namespace lumen::runtime
