model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_ff : int = key("{arch}.feed_forward_length")
param n_layer : int = key("{arch}.block_count")
param n_head : int = key("{arch}.attention.head_count")
param n_head_kv : int = key("{arch}.attention.head_count_kv")
let head_dim = n_embd / n_head
check n_embd % n_head == 0 : "n_embd must be a multiple of n_head"
weight w : q8_0[n_embd, n_embd] = "w.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  a = attention(x, x, x, heads = n_head, kv_heads = n_head_kv, dim = head_dim)
  return matmul(last(a), w)
}
