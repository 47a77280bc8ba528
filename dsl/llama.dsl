# Llama family decoder-only transformer (Llama 2, Llama 3.x, Mistral),
# computed as llama.cpp computes it: no Q/K/V biases, normal (adjacent-pair)
# rope with Llama 3's frequency factors when the file has them
# (`rope_freqs.weight`, the "llama3" rope scaling baked into divisors),
# grouped-query attention, SiLU-gated FFN, and an output head that may be tied
# to the token embedding.
model llama                       # the general.architecture value this program accepts

# ---------------------------------------------------------------- hyperparameters
param n_vocab   : int   = len("tokenizer.ggml.tokens")
param n_ctx     : int   = key("{arch}.context_length")
param n_embd    : int   = key("{arch}.embedding_length")
param n_layer   : int   = key("{arch}.block_count")
param n_ff      : int   = key("{arch}.feed_forward_length")
param n_head    : int   = key("{arch}.attention.head_count")
param n_head_kv : int   = key("{arch}.attention.head_count_kv", default = n_head)
param head_dim  : int   = key("{arch}.attention.key_length", default = n_embd / n_head)
param rope_base : float = key("{arch}.rope.freq_base", default = 10000.0)
param rms_eps   : float = key("{arch}.attention.layer_norm_rms_epsilon")

let n_embd_q  = n_head * head_dim
let n_embd_kv = n_head_kv * head_dim

check n_head % n_head_kv == 0 : "n_head must be a multiple of n_head_kv"
check head_dim % 2 == 0       : "rope needs an even head_dim"

# ------------------------------------------------------------------------ weights
weight tok_embd   : any[n_vocab, n_embd]  = "token_embd.weight"
weight out_norm   : f32[n_embd]           = "output_norm.weight"
weight output     : any[n_vocab, n_embd]  = "output.weight" else "token_embd.weight"   # tied when absent
weight rope_freqs : f32[head_dim / 2]     = "rope_freqs.weight" optional               # Llama 3.1+

layer weights (i in n_layer) {
  attn_norm : f32[n_embd]              = "blk.{i}.attn_norm.weight"
  wq        : any[n_embd_q, n_embd]    = "blk.{i}.attn_q.weight"
  wk        : any[n_embd_kv, n_embd]   = "blk.{i}.attn_k.weight"
  wv        : any[n_embd_kv, n_embd]   = "blk.{i}.attn_v.weight"
  wo        : any[n_embd, n_embd_q]    = "blk.{i}.attn_output.weight"
  ffn_norm  : f32[n_embd]              = "blk.{i}.ffn_norm.weight"
  wgate     : any[n_ff, n_embd]        = "blk.{i}.ffn_gate.weight"
  wup       : any[n_ff, n_embd]        = "blk.{i}.ffn_up.weight"
  wdown     : any[n_embd, n_ff]        = "blk.{i}.ffn_down.weight"
}

# ------------------------------------------------------------------------ forward
forward(tokens : i32[N]) -> f32[1, n_vocab] {
  x = embed(tok_embd, tokens)
  for l in layers {
    h = rms_norm(x, attn_norm[l], rms_eps)
    q = rope(matmul(h, wq[l]), heads = n_head, dim = head_dim, base = rope_base, mode = normal, freqs = rope_freqs)
    k = rope(matmul(h, wk[l]), heads = n_head_kv, dim = head_dim, base = rope_base, mode = normal, freqs = rope_freqs)
    v = matmul(h, wv[l])
    a = attention(q, k, v, heads = n_head, kv_heads = n_head_kv, dim = head_dim)
    x = x + matmul(a, wo[l])
    h = rms_norm(x, ffn_norm[l], rms_eps)
    x = x + matmul(silu(matmul(h, wgate[l])) * matmul(h, wup[l]), wdown[l])
  }
  h = rms_norm(last(x), out_norm, rms_eps)
  return matmul(h, output)
}
