model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
param eps : float = key("{arch}.attention.layer_norm_rms_epsilon")
weight tok : any[n_vocab, n_embd] = "token_embd.weight"
weight norm : any[n_embd] = "output_norm.weight"
forward(tokens : i32[N]) -> f32[1, n_vocab] {
  x = embed(tok, tokens)
  return matmul(rms_norm(last(x), norm, eps), tok)
}
