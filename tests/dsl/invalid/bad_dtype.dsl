model tiny
param n_embd : int = key("{arch}.embedding_length")
weight w : q9_9[n_embd, n_embd] = "w.weight"
