model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_layer : int = key("{arch}.block_count")
layer weights (i in n_layer) {
  norm : f32[n_embd] = "blk.norm.weight"
}
