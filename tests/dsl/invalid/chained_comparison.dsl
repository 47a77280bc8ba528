model tiny
param n_embd : int = key("{arch}.embedding_length")
check 0 < n_embd < 100000 : "n_embd out of range"
