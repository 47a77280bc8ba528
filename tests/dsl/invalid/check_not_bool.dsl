model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_head : int = key("{arch}.attention.head_count")
check n_embd % n_head : "n_embd must be a multiple of n_head"
