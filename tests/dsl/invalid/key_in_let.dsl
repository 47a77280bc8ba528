model tiny
let n_embd = key("{arch}.embedding_length")
