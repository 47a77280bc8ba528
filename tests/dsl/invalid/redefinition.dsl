model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_ff : int = key("{arch}.feed_forward_length")
param n_layer : int = key("{arch}.block_count")
param n_embd : int = key("{arch}.hidden_size")
