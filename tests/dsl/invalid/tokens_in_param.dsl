model tiny
param n_ctx : int = key("{arch}.context_length", default = N)
