model tiny
param n_embd : int = 896
