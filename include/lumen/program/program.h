// The scheduled program: what lumenc's last pass produces, what model.so
// carries (serialized), and what lumen-run executes. Plain typed structures,
// no behaviour beyond evaluation and (de)serialization.
//
// Sizes are symbolic: expressions over hyperparameters (resolved from GGUF
// metadata at load time) and the batch size N (tokens in one call). One
// program serves prefill (N > 1) and decode (N == 1).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/ops/dim.h"
#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"

namespace lumen::program {

// ---------------------------------------------------------------- expressions
// Sizes are the one language of sizes (ops/dim.h), with hparams by name.
using ops::Dim;

// ------------------------------------------------------------ model interface
// Element types, operators and matmul epilogues are the one list's (ops/op_list.h);
// the program text spells them by their enumerator ("Q8_0", "RmsNorm").
using ops::DType;
using ops::Epilogue;
using ops::OpId;
using ops::to_string;

struct HParam {
  enum class Kind : uint8_t { Int, Float };
  std::string name;       // DSL name, "n_embd"
  std::string gguf_key;   // "qwen2.embedding_length"; empty when purely derived;
                          // "len(KEY)" (Int only): the element count of the array KEY
  Kind kind = Kind::Int;
  bool required = true;   // the key must be present (when no default and no derived)
  std::optional<double> default_value;  // used when the key is absent
  std::optional<Dim> derived;           // computed from earlier hparams when the key is absent
  std::optional<double> min_value, max_value;  // range the loader enforces
};

// The resolved hparam values by name, to evaluate the program's dims.
class HParamValues {
 public:
  // `values` in program order (as resolved so far: NaN for not yet), kept by
  // reference; floats are truncated toward zero where a dim uses them.
  HParamValues(const std::vector<HParam>& hparams, std::span<const double> values);
  // Throws ops::DimError on division by zero or overflow, or when `d` uses an
  // hparam with no value (unknown, not resolved yet, not an integer).
  int64_t eval(const Dim& d, int64_t n_tokens) const;

 private:
  std::map<std::string, size_t, std::less<>> index_;
  std::span<const double> values_;
};

// A check on the resolved hparams: lhs <cmp> rhs, else `message`.
struct Check {
  enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
  Dim lhs, rhs;
  Cmp cmp = Cmp::Eq;
  std::string message;
};

struct Weight {
  std::string name;        // DSL name, "wq"
  std::string gguf_name;   // "blk.{i}.attn_q.weight": {i} is the layer index
  bool per_layer = false;
  // The types of its tensors, as compiled for one file's (driver::compile):
  // one per layer where a layer weight's layers differ, else one (every
  // layer's). Without a file, `any` weights are Q8_0.
  std::vector<DType> dtypes;
  std::vector<Dim> shape;      // ggml order: shape[0] is the row length
  std::string fallback;        // gguf name used when gguf_name is absent ("token_embd.weight")
  bool optional = false;       // may be absent: bound to null, and the ops taking it do without

  // The type compiled for layer `layer`'s tensor (0 for a global weight);
  // nullopt past the layers the program was compiled for.
  std::optional<DType> type_of_layer(int64_t layer) const;
};
// The tensor name of `pattern` ("blk.{i}.attn_q.weight") for layer `layer`.
std::string layer_tensor_name(std::string_view pattern, int64_t layer);

// ------------------------------------------------------------- activations
// An activation tensor: `rows` x `cols` elements of `dtype`, row-major, at
// `offset` bytes into the arena. Offsets come from memory planning
// (liveness-based); buffers whose live ranges do not overlap may share bytes.
struct Buffer {
  std::string name;
  DType dtype = DType::F32;
  Dim rows;     // usually N; 1 for last-token values
  Dim cols;     // elements per row (for ActQ8: the logical K, a multiple of 32)
  Dim offset;   // bytes into the arena, 64-byte aligned for every N
};

// A column range of a buffer (all rows).
struct View {
  int buffer = -1;
  Dim col_offset;  // in elements
  Dim cols;
};

// --------------------------------------------------------------------- ops
// The ops of the list with `in_program`; how each reads the fields of Op is
// in docs/runtime.md ("Program text format").

enum class RopeMode : uint8_t { Normal, Neox };

// ------------------------------------------------------------ matmul kernels
enum class KernelKind : uint8_t {
  Gemv,   // one token (decode)
  Gemm,   // many tokens (prefill), in register tiles of tile_m rows x tile_n tokens
  Batch,  // 2 to kBatchMaxTokens tokens (the decode steps of several sequences):
          // the weights streamed once, as by the GEMV, for all tokens of a weight block
};
const char* to_string(KernelKind k);  // "gemv", "gemm", "batch"

// Which generated matmul kernel an op calls: the schedule names it, codegen
// generates it, model.so's kernel table and the runtime's lookup are keyed by
// it. The ISA is not part of it (one model.so holds kernels for one ISA), but
// the schedule picks a Gemm's tile for its target: the tile is the register
// tile the kernel really runs, so one name is one kernel, and a tile that
// does not fit an ISA's registers is refused for it (fits()).
//
// Text form (program text, kernel table, profiles), written only by
// to_string() and read only by parse_kernel_id():
//   "gemv[.<weight>].<epilogue>", "batch[.<weight>].<epilogue>"  or
//   "gemm[.<weight>].<epilogue>.m<tile_m>n<tile_n>"
// with the epilogue as to_string(Epilogue) and the weight format as
// to_string(DType), spelled only when it is not Q8_0 (so the names of the
// Q8_0 kernels, and model.so files holding them, stay what they were):
// "gemm.bias.m48n4", "gemv.q5_0.bias", "gemm.f16.none.m48n8".
struct KernelId {
  KernelKind kind = KernelKind::Gemv;
  Epilogue epilogue = Epilogue::None;
  int64_t tile_m = kGemvTileM;  // Gemm: the register tile's rows, a multiple of 16 in [16, 1024]
  int64_t tile_n = kGemvTileN;  // Gemm: the register tile's tokens, in [1, 64]
  // The packed weight format the kernel streams (target/weight_formats.h):
  // one of kPackedFormats; a Gemm's is Q8_0 (Q4_0 and Q5_0 weights are
  // converted to it per task), a k-quant, Q4_1 or Q5_1 (each task expands its rows,
  // target/packed_kquant.h expand_kquant, and the GEMM reads those) or a
  // float format (F16, BF16, F32: the GEMM reads the packed weights).
  DType weight = DType::Q8_0;

  // A Gemv's and a Batch's tiles are fixed values, not register tiles (codegen
  // gives each ISA its own, kernel_support.h), so that equal kernels compare
  // equal; a Batch serves 2..kBatchMaxTokens tokens.
  static constexpr int64_t kGemvTileM = 16, kGemvTileN = 1;
  static constexpr int64_t kBatchTileM = 32, kBatchMaxTokens = 8;
  static KernelId gemv(Epilogue e, DType weight = DType::Q8_0) {
    return KernelId{KernelKind::Gemv, e, kGemvTileM, kGemvTileN, weight};
  }
  static KernelId batch(Epilogue e, DType weight = DType::Q8_0) {
    return KernelId{KernelKind::Batch, e, kBatchTileM, kBatchMaxTokens, weight};
  }
  static KernelId gemm(Epilogue e, int64_t tile_m, int64_t tile_n, DType weight = DType::Q8_0) {
    return KernelId{KernelKind::Gemm, e, tile_m, tile_n, weight};
  }
  friend auto operator<=>(const KernelId&, const KernelId&) = default;
};
std::string to_string(const KernelId& k);
// The inverse of to_string(KernelId): nullopt, and the reason in *why, for
// any text to_string cannot produce or whose kernel would be invalid.
std::optional<KernelId> parse_kernel_id(std::string_view text, std::string* why = nullptr);
// Whether `k` is a kernel at all (tile bounds; a Gemv's or Batch's tile is the
// fixed one; the weight a packed format, Q8_0 or a k-quant for a Gemm).
bool is_valid(const KernelId& k, std::string* why = nullptr);
// Whether codegen can generate `k` for `isa`: it is_valid (every packed
// format has kernels on every ISA), and a Gemm's tile fits the ISA's
// registers (target/kernel_registers.h).
bool fits(const KernelId& k, Isa isa, std::string* why = nullptr);
// An assembler symbol for `k` ("lumen_gemm_bias_m48n4"): emitted model.so
// names its kernels with it, so profilers and disassemblers show them.
std::string kernel_symbol(const KernelId& k);

// The kernels of one matmul for the layers whose weights are packed in one
// format (target/weight_formats.h's packed_format of their type).
struct MatMulKernels {
  DType format = DType::Q8_0;  // the packed weight format the kernels read
  KernelId decode_kernel;      // for N == 1
  KernelId batch_kernel;       // for 2 <= N <= KernelId::kBatchMaxTokens (several sequences' decode steps)
  KernelId prefill_kernel;     // for larger N: a Gemm (its tile the prefill register tile; Q8_0, which a
                               // set of Q4_0/Q5_0 converts each task's rows to, or the set's k-quant,
                               // expanded per task), or batch_kernel (it walks any number of tokens in
                               // its token tiles)

  std::array<KernelId, 3> kernels() const { return {decode_kernel, batch_kernel, prefill_kernel}; }
};

// How one matmul runs: chosen by the scheduling pass, consumed by codegen
// (kernel generation) and the runtime (kernel choice and thread split).
struct MatMulSchedule {
  // One set per distinct packed format among its layers, in first-layer
  // order; the runtime runs a layer on its weights' format's set.
  std::vector<MatMulKernels> formats = {MatMulKernels{}};
  // The thread split, set by the schedule (src/passes/schedule.cpp); 0 until then.
  int64_t rows_per_task = 0;    // output rows per work item (multiple of the pack row group)
  int64_t tokens_per_task = 0;  // prefill: tokens per work item

  // The set for `format`; nullptr when the schedule has none.
  const MatMulKernels* for_format(DType format) const;
  // Every kernel the schedule names, for whoever generates or checks them all.
  std::vector<KernelId> kernels() const;
};

struct Op {
  OpId kind = OpId::Add;
  std::vector<View> inputs;
  View output;
  std::vector<int> weights;  // indices into Program::weights
  std::vector<int> biases;   // MatMul with a Bias epilogue
  View residual;             // MatMul with a Residual epilogue
  Epilogue epilogue = Epilogue::None;
  MatMulSchedule schedule;   // MatMul only

  // Scalar attributes; which ones matter depends on `kind`.
  int eps_hparam = -1;       // RmsNorm*: index of the epsilon hparam
  RopeMode rope_mode = RopeMode::Neox;
  int rope_base_hparam = -1; // Rope: index of freq_base
  // Sizes; absent where the op has none.
  std::optional<Dim> n_heads;     // Rope: heads in the view; Attention: query heads; RmsNorm*: per-head groups
  std::optional<Dim> n_heads_kv;  // Attention
  std::optional<Dim> head_dim;    // Rope (rotated dims = head_dim), Attention
  // Attention only:
  int attn_scale_hparam = -1;    // the score scale; -1: 1/sqrt(attn_scale_rsqrt), else 1/sqrt(head_dim)
  std::optional<Dim> attn_scale_rsqrt;
  int attn_softcap_hparam = -1;  // logit soft-capping softcap*tanh(s/softcap); -1: none
  std::optional<Dim> window;          // sliding window in positions; absent: none
  std::optional<Dim> window_pattern;  // layer l has the window iff pattern == 0 || l % pattern < pattern - 1
                                      // (llama.cpp's swa pattern); absent: every layer
  // The op's scalar attribute (scale's factor, a cap): an hparam, or the square root of a size.
  int scalar_hparam = -1;
  std::optional<Dim> scalar_sqrt;
  int line = 0;              // DSL source line that produced the op (for profiles)
};

// ----------------------------------------------------------------- program
// The three op lists of a program, in the order they run.
enum class Section : uint8_t {
  Pre,    // once per batch, before the layers
  Layer,  // once per layer, weights indexed by the layer
  Post,   // after the layers
};
inline constexpr Section kSections[] = {Section::Pre, Section::Layer, Section::Post};
const char* to_string(Section s);  // "pre", "layer", "post" (the record kinds of the text form)

struct Program {
  std::string arch;          // must equal general.architecture
  std::string source_name;   // "qwen2.dsl"
  std::vector<HParam> hparams;
  std::vector<Check> checks;
  std::vector<Weight> weights;
  std::vector<Buffer> buffers;
  int tokens_buffer = -1;    // I32 [N, 1]: input token ids (filled by the runtime)
  int logits_buffer = -1;    // F32 [1, vocab]: output of the last op
  Dim n_layers;              // trip count of the layer loop
  Dim n_ctx_train;           // context length from the file (upper bound for --ctx)
  Dim kv_dim;                // K (and V) row width per layer in the cache
  std::vector<Op> pre;       // ops before the layer loop
  std::vector<Op> layer;     // ops run once per layer (weights indexed by layer)
  std::vector<Op> post;      // ops after the loop
  Dim arena_bytes;           // total arena size for N tokens

  const std::vector<Op>& ops(Section s) const { return s == Section::Pre ? pre : s == Section::Layer ? layer : post; }
};

// Stable text serialization (embedded in model.so; also `lumenc dump-program`).
std::string serialize(const Program& p);
// Throws ParseError with a line number on malformed input.
Program deserialize(std::string_view text);
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace lumen::program
