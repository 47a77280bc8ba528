# Gemma 2 decoder-only transformer, computed as llama.cpp computes it: the
# embedding scaled by sqrt(n_embd), NEOX rope, attention with the query scale
# llama.cpp derives (1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 27B
# model, the one with 46 layers: no GGUF key carries query_pre_attn_scalar),
# logit soft-capping in attention and on the output, sliding-window attention
# on alternating layers (llama.cpp's swa pattern 2: even layers), RMS norms
# after attention and after the FFN as well as before, a GELU-gated FFN, and
# the output head tied to the token embedding.
model gemma2                      # the general.architecture value this program accepts

# ---------------------------------------------------------------- hyperparameters
param n_vocab        : int   = len("tokenizer.ggml.tokens")
param n_ctx          : int   = key("{arch}.context_length")
param n_embd         : int   = key("{arch}.embedding_length")
param n_layer        : int   = key("{arch}.block_count")
param n_ff           : int   = key("{arch}.feed_forward_length")
param n_head         : int   = key("{arch}.attention.head_count")
param n_head_kv      : int   = key("{arch}.attention.head_count_kv", default = n_head)
param head_dim       : int   = key("{arch}.attention.key_length", default = n_embd / n_head)
param rope_base      : float = key("{arch}.rope.freq_base", default = 10000.0)
param rms_eps        : float = key("{arch}.attention.layer_norm_rms_epsilon")
param attn_softcap   : float = key("{arch}.attn_logit_softcapping", default = 50.0)
param final_softcap  : float = key("{arch}.final_logit_softcapping", default = 30.0)
param window         : int   = key("{arch}.attention.sliding_window", default = 4096)
param window_pattern : int   = key("{arch}.attention.sliding_window_pattern", default = 2)

let n_embd_q  = n_head * head_dim
let n_embd_kv = n_head_kv * head_dim
# The query scale is 1/sqrt(q_scale_dim): head_dim, or n_embd / n_head for the
# 27B model (46 layers). min(1, |n_layer - 46|) is 0 for it and 1 otherwise.
let q_scale_dim = head_dim * min(1, max(n_layer - 46, 46 - n_layer)) +
                  (n_embd / n_head) * (1 - min(1, max(n_layer - 46, 46 - n_layer)))

check n_head % n_head_kv == 0 : "n_head must be a multiple of n_head_kv"
check head_dim % 2 == 0       : "rope needs an even head_dim"

# ------------------------------------------------------------------------ weights
weight tok_embd : any[n_vocab, n_embd]  = "token_embd.weight"
weight out_norm : f32[n_embd]           = "output_norm.weight"
weight output   : any[n_vocab, n_embd]  = "token_embd.weight"    # always tied, as llama.cpp loads gemma2

layer weights (i in n_layer) {
  attn_norm      : f32[n_embd]              = "blk.{i}.attn_norm.weight"
  wq             : any[n_embd_q, n_embd]    = "blk.{i}.attn_q.weight"
  wk             : any[n_embd_kv, n_embd]   = "blk.{i}.attn_k.weight"
  wv             : any[n_embd_kv, n_embd]   = "blk.{i}.attn_v.weight"
  wo             : any[n_embd, n_embd_q]    = "blk.{i}.attn_output.weight"
  post_attn_norm : f32[n_embd]              = "blk.{i}.post_attention_norm.weight"
  ffn_norm       : f32[n_embd]              = "blk.{i}.ffn_norm.weight"
  wgate          : any[n_ff, n_embd]        = "blk.{i}.ffn_gate.weight"
  wup            : any[n_ff, n_embd]        = "blk.{i}.ffn_up.weight"
  wdown          : any[n_embd, n_ff]        = "blk.{i}.ffn_down.weight"
  post_ffn_norm  : f32[n_embd]              = "blk.{i}.post_ffw_norm.weight"
}

# ------------------------------------------------------------------------ forward
forward(tokens : i32[N]) -> f32[1, n_vocab] {
  x = scale(embed(tok_embd, tokens), sqrt(n_embd))
  for l in layers {
    h = rms_norm(x, attn_norm[l], rms_eps)
    q = rope(matmul(h, wq[l]), heads = n_head, dim = head_dim, base = rope_base, mode = neox)
    k = rope(matmul(h, wk[l]), heads = n_head_kv, dim = head_dim, base = rope_base, mode = neox)
    v = matmul(h, wv[l])
    a = attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim, scale = 1 / sqrt(q_scale_dim),
                  softcap = attn_softcap, window = window, window_pattern = window_pattern)
    x = x + rms_norm(matmul(a, wo[l]), post_attn_norm[l], rms_eps)
    h = rms_norm(x, ffn_norm[l], rms_eps)
    f = matmul(gelu(matmul(h, wgate[l])) * matmul(h, wup[l]), wdown[l])
    x = x + rms_norm(f, post_ffn_norm[l], rms_eps)
  }
  h = rms_norm(last(x), out_norm, rms_eps)
  return softcap(matmul(h, output), final_softcap)
}
