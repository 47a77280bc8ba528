model tiny
param n_embd : int = key("{arch}.embedding_length")
weight w : f32[n_embd] = "blk.{i}.w.weight"
