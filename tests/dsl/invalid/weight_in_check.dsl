model tiny
param n_embd : int = key("{arch}.embedding_length")
weight w : f32[n_embd] = "w.weight"
check w > 0 : "w must be positive"
