model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_ff : int = key("{arch}.feed_forward_length")
param n_layer : int = key("{arch}.block_count")
check n_embd % 2 == 0 : "n_embd must be even"
weight w : q8_0[n_embd, n_embd] = "w.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  q = rope(x, heads = 1, dim = n_embd, mode = gptj)
  return matmul(last(q), w)
}
