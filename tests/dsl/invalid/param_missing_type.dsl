model tiny
param n_embd = key("{arch}.embedding_length")
