model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_head : int = key("{arch}.attention.head_count")
let head_dim = n_embd / n_head
check n_embd % n_head == 0 : "n_embd must be a multiple of n_head"
weight w : q8_0[n_embd, n_embd] = "w.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  q = rope(x, heads = n_head, dim = head_dim, mode = neox)
  return matmul(last(q), w)
}
