model tiny
param n_embd : int = key("{arch}.embedding_length", default = 896.5)
