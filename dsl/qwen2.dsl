# Qwen2 / Qwen2.5 decoder-only transformer, computed as llama.cpp computes it:
# Q/K/V biases, NEOX rope, grouped-query attention, SiLU-gated FFN, and an
# output head that is either separate or tied to the token embedding.
model qwen2                       # the general.architecture value this program accepts

# ---------------------------------------------------------------- hyperparameters
# Bound to GGUF metadata keys; "{arch}" expands to the model name above.
param n_vocab   : int   = len("tokenizer.ggml.tokens")       # length of a metadata array
param n_ctx     : int   = key("{arch}.context_length")
param n_embd    : int   = key("{arch}.embedding_length")
param n_layer   : int   = key("{arch}.block_count")
param n_ff      : int   = key("{arch}.feed_forward_length")
param n_head    : int   = key("{arch}.attention.head_count")
param n_head_kv : int   = key("{arch}.attention.head_count_kv", default = n_head)
param rope_base : float = key("{arch}.rope.freq_base", default = 10000.0)
param rms_eps   : float = key("{arch}.attention.layer_norm_rms_epsilon")

let head_dim  = n_embd / n_head
let n_embd_kv = n_head_kv * head_dim   # rows of K and V: all kv heads side by side

check n_embd % n_head == 0    : "n_embd must be a multiple of n_head"
check n_head % n_head_kv == 0 : "n_head must be a multiple of n_head_kv"
check head_dim % 2 == 0       : "rope needs an even head_dim"

# ------------------------------------------------------------------------ weights
# Shapes are [rows, row_length], a matmul weight's [out_features, in_features]; `any`: the file's type.
weight tok_embd : any[n_vocab, n_embd]  = "token_embd.weight"
weight out_norm : f32[n_embd]           = "output_norm.weight"
weight output   : any[n_vocab, n_embd]  = "output.weight" else "token_embd.weight"   # tied when absent

layer weights (i in n_layer) {
  attn_norm : f32[n_embd]              = "blk.{i}.attn_norm.weight"
  wq        : any[n_embd, n_embd]      = "blk.{i}.attn_q.weight"
  bq        : f32[n_embd]              = "blk.{i}.attn_q.bias"
  wk        : any[n_embd_kv, n_embd]   = "blk.{i}.attn_k.weight"
  bk        : f32[n_embd_kv]           = "blk.{i}.attn_k.bias"
  wv        : any[n_embd_kv, n_embd]   = "blk.{i}.attn_v.weight"
  bv        : f32[n_embd_kv]           = "blk.{i}.attn_v.bias"
  wo        : any[n_embd, n_embd]      = "blk.{i}.attn_output.weight"
  ffn_norm  : f32[n_embd]              = "blk.{i}.ffn_norm.weight"
  wgate     : any[n_ff, n_embd]        = "blk.{i}.ffn_gate.weight"
  wup       : any[n_ff, n_embd]        = "blk.{i}.ffn_up.weight"
  wdown     : any[n_embd, n_ff]        = "blk.{i}.ffn_down.weight"
}

# ------------------------------------------------------------------------ forward
# N is the number of tokens of this call: N > 1 for prefill, N = 1 for decode.
forward(tokens : i32[N]) -> f32[1, n_vocab] {
  x = embed(tok_embd, tokens)                                  # f32[N, n_embd]
  for l in layers {
    # attention block
    h = rms_norm(x, attn_norm[l], rms_eps)
    q = matmul(h, wq[l]) + bq[l]                               # f32[N, n_embd]
    k = matmul(h, wk[l]) + bk[l]                               # f32[N, n_embd_kv]
    v = matmul(h, wv[l]) + bv[l]
    q = rope(q, heads = n_head, dim = head_dim, base = rope_base, mode = neox)
    k = rope(k, heads = n_head_kv, dim = head_dim, base = rope_base, mode = neox)
    a = attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim)
    x = x + matmul(a, wo[l])                                   # residual
    # feed-forward block
    h = rms_norm(x, ffn_norm[l], rms_eps)
    x = x + matmul(silu(matmul(h, wgate[l])) * matmul(h, wup[l]), wdown[l])
  }
  h = rms_norm(last(x), out_norm, rms_eps)                     # the last token only: f32[1, n_embd]
  return matmul(h, output)                                     # logits
}
