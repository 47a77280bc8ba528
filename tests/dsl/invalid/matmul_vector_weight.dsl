model tiny
param n_embd : int = key("{arch}.embedding_length")
param n_vocab : int = len("tokenizer.ggml.tokens")
weight tok : q8_0[n_vocab, n_embd] = "token_embd.weight"
weight out : f32[n_embd] = "output.weight"
forward(tokens : i32[N]) -> f32[1, n_vocab] {
  x = embed(tok, tokens)
  return matmul(last(x), out)
}
