model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_head : int = key("{arch}.attention.head_count")
param n_head_kv : int = key("{arch}.attention.head_count_kv", default = n_head)
let head_dim = n_embd / n_head
check n_embd % n_head == 0 : "n_embd must be a multiple of n_head"
weight w : q8_0[n_embd, n_embd] = "w.weight"
weight wk : q8_0[n_head_kv * head_dim, n_embd] = "k.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  k = matmul(x, wk)
  a = attention(x, k, k, heads = n_head, kv_heads = n_head_kv, dim = head_dim)
  return matmul(last(a), w)
}
