model tiny
param n_embd : int = key("{arch}.embedding_length")
let head_dim = n_embd / n_head
param n_head : int = key("{arch}.attention.head_count")
