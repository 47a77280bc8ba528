// The non-matmul numeric kernels of the executor, reproducing llama.cpp's
// arithmetic (see docs/runtime.md): RMS norm, rotary embedding, causal GQA
// attention over an f16, f32 or Q8_0 KV cache, element-wise ops.
// Vector versions are picked at run time from cpu_features().
#pragma once

#include <cstdint>

#include "lumen/common/numeric.h"
#include "lumen/ops/op_list.h"
#include "lumen/program/program.h"

namespace lumen::runtime::kernels {

// Largest head_dim of rope and attention: the attention kernels keep a query
// head on the stack. The executor refuses programs beyond it at load time.
inline constexpr int64_t kMaxHeadDim = 1024;

// y = (x * (1/sqrtf(mean(x^2) + eps))) * w, the sum of squares in double.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// cos_sin[2i], cos_sin[2i+1] = cos, sin of pos * base^(-2i/n_dims), the angle
// built by repeated fp32 multiplication as ggml does; n_dims/2 pairs. With
// freq_factors (n_dims/2 of them, Llama 3's rope_freqs) pair i's angle is
// divided by freq_factors[i], as ggml's rope does.
void rope_angles(int64_t pos, int64_t n_dims, float base, float* cos_sin, const float* freq_factors = nullptr);
// Rotates each of n_heads heads of head_dim values in place.
void rope(float* x, int64_t n_heads, int64_t head_dim, const float* cos_sin, program::RopeMode mode);

// One query head against keys [0, n_keys) of a cache whose rows are
// `row_stride` elements apart (k and v point at this kv head's first row).
// F16 cache: q and the softmax probabilities are rounded to f16 like ggml.
// The scores are scale * q·k, then, with softcap > 0, softcap * tanh(score /
// softcap) (logit soft-capping, as ggml's scale-tanh-scale).
// `scores` holds n_keys floats of scratch. Writes head_dim values to out.
struct AttentionHead {
  const float* q;
  const void* k;
  const void* v;
  int64_t row_stride;
  int64_t n_keys;
  int64_t head_dim;
  float scale;
  float* scores;
  float* out;
  float softcap = 0;
};
void attention_head_f16(const AttentionHead& a);
void attention_head_f32(const AttentionHead& a);

// The query heads [0, n_heads) of n_tokens consecutive tokens that share one
// kv head, computed together so each K/V row is converted to f32 once and
// reused by all of them. Token t sees keys [0, first_n_keys + t), or with a
// sliding window w > 0 only the last w of them: [max(0, first_n_keys + t - w),
// first_n_keys + t), as llama.cpp masks a key when pos - key_pos >= w. Head g of
// token t reads q + t * q_token_stride + g * head_dim and writes likewise
// into out. Same rounding points as attention_head_*; results do not depend
// on how callers split tokens into blocks beyond the dot-product order.
struct AttentionBlock {
  const float* q;
  int64_t q_token_stride;
  const void* k;
  const void* v;
  int64_t row_stride;
  int64_t n_tokens;
  int64_t n_heads;
  int64_t first_n_keys;
  int64_t head_dim;
  float scale;
  float* out;
  int64_t out_token_stride;
  int64_t window = 0;  // 0: no sliding window
  float softcap = 0;   // 0: no soft-capping
};
void attention_block_f16(const AttentionBlock& b);
void attention_block_f32(const AttentionBlock& b);
// Q8_0 cache: k and v are BlockQ8_0 rows (row_stride and head_dim multiples of
// 32, counted in elements). The arithmetic of llama.cpp's CPU flash attention
// with a q8_0 K and V (-ctk q8_0 -ctv q8_0 -fa), for each (token, head) on its
// own: q quantized as the cache is (to_q8_0); each score is ggml's x86
// vec_dot_q8_0_q8_0 (per block, the 8 lane sums of 4 int8 products fused with
// d_k * d_q into 8 lane accumulators, then added pairwise), times scale (with
// softcap > 0: softcap * tanh(score * (scale / softcap))); then an online
// softmax over the keys in order: a new maximum M rescales the accumulated
// output and the sum S by expf(M_old - M); every other key adds its
// dequantized V row times expf(s - M) (fused multiply-add) and S = S * ms + vs;
// the output is times 1/S at the end. A row that sees no key gets zeros.
void attention_block_q8_0(const AttentionBlock& b);

// f32 -> f16 rows for the cache (round to nearest even).
void to_f16(const float* x, uint16_t* out, int64_t n);
// f32 -> Q8_0 rows for the cache (n a multiple of 32), as ggml's x86
// quantize_row_q8_0 writes them when llama.cpp copies K and V into a q8_0
// cache: d = amax/127 rounded to f16, q = round_half_even(x * 127/amax).
void to_q8_0(const float* x, BlockQ8_0* out, int64_t n);

float silu(float x);

// y = x * s (y may equal x).
void scale(const float* x, float* y, int64_t n, float s);
// ggml's GELU with GGML_GELU_FP16: 0 at x <= -10, x at x >= 10, otherwise the
// tanh approximation 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) of x
// rounded to f16, the result rounded to f16 (its lookup table).
void gelu(const float* x, float* y, int64_t n);
// y = cap * tanh(x * (1/cap)), as ggml's scale, tanh, scale.
void softcap(const float* x, float* y, int64_t n, float cap);

// The kernel of an element-wise op of the list that maps each row on its own
// with at most one scalar (scale, gelu, softcap): the session reads the scalar,
// checks it and runs the rows through `run` without naming the op.
struct RowKernel {
  void (*run)(const float* x, float* y, int64_t n, float scalar);  // y may equal x
  bool reads_scalar;     // the op's scalar attribute (an hparam, or scale's square root of a size)
  bool scalar_positive;  // the kernel divides by it
};
// `op`'s row kernel, or nullptr when it has none.
const RowKernel* row_kernel(ops::OpId op);

// y = softmax(x) over n values (the Softmax op, one row): exp(x - max) kept in
// f32, summed in double, times (float)(1/sum), as ggml's soft_max does. y may
// equal x. The scalar attention path uses the same arithmetic (kernels.cpp).
void softmax_row(const float* x, float* y, int64_t n);

}  // namespace lumen::runtime::kernels
