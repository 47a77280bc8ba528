model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_ff : int = key("{arch}.feed_forward_length")
param n_layer : int = key("{arch}.block_count")
weight w : q8_0[n_embd, n_embd] = "w.weight"
weight down : q8_0[n_embd, n_ff] = "down.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  y = matmul(x, down)
  return matmul(last(y), w)
}
