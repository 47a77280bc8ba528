model tiny
param n_embd : int = key("{arch}.embedding_length"
let head_dim = n_embd /
check n_embd > 0 "n_embd must be positive"
weight w : q8_0[n_embd n_embd] = "w.weight"
let ok = 1
