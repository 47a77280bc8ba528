model tiny
param n_embd : int = key("{model}.embedding_length")
