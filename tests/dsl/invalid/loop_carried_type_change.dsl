model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_ff : int = key("{arch}.feed_forward_length")
param n_layer : int = key("{arch}.block_count")
weight emb : q8_0[n_embd, n_embd] = "token_embd.weight"
layer weights (i in n_layer) {
  norm : f32[n_embd] = "blk.{i}.norm.weight"
  up : q8_0[n_ff, n_embd] = "blk.{i}.up.weight"
  down : q8_0[n_embd, n_ff] = "blk.{i}.down.weight"
}
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(emb, tokens)
  for l in layers {
    x = rms_norm(x, norm[l], 1e-6)
    x = silu(matmul(x, up[l]))
  }
  return matmul(last(x), emb)
}
