// The GGUF synthesizer of `lumen-gguf synth`: writes random models of the
// qwen2, qwen3, llama (Llama 3) and gemma2 architectures for tests and
// benchmarks (tensor names, types and metadata keys as llama.cpp's converter
// writes them and its loader expects them). A tool, not part of the runtime: it knows where the
// pinned tokenizer package is installed in the source tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lumen/gguf/gguf.h"

namespace lumen::gguf {

// Shape of a synthetic model.
struct SynthConfig {
  std::string arch = "qwen2";  // general.architecture: qwen2, qwen3, llama or gemma2
  std::string name = "synthetic-qwen2";
  uint32_t n_embd = 128;
  uint32_t n_layer = 2;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t n_ff = 352;
  uint32_t n_vocab = 151936;  // 0: the token count of the vocabulary GGUF
  float embd_std = 0.02f;     // token_embd values (a tied head wants the output head's 3/sqrt(n_embd))
  // Per-head width; 0 means n_embd / n_head. Otherwise written as
  // {arch}.attention.key_length and value_length, and Q is n_head * head_dim
  // wide (as in Qwen3 and Gemma, where that differs from n_embd).
  uint32_t head_dim = 0;
  bool qkv_bias = true;       // qwen2: attn_q/k/v biases
  bool qk_norm = false;       // qwen3: attn_q_norm / attn_k_norm, one head wide
  bool rope_freqs = false;    // llama 3.1+: rope_freqs.weight (llama3 rope scaling factors)
  // gemma2: post-attention and post-FFN norms, soft-capping and sliding window keys.
  bool gemma2 = false;
  uint32_t sliding_window = 4096;
  float attn_softcap = 50.0f, final_softcap = 30.0f;
  uint32_t n_ctx = 4096;
  float rope_freq_base = 1e6f;
  float rms_eps = 1e-6f;
  bool tied = false;     // omit output.weight: the LM head reuses token_embd
  uint64_t seed = 1;
  // An existing GGUF (its tokenizer.* keys are copied) or a Hugging Face
  // tokenizer.json (converted as llama.cpp's converter does for Qwen2).
  std::string vocab_from;
  unsigned n_threads = 2;  // quantization threads
};

// "tiny" (the shape of the reference tiny-qwen2-a), "tiny-wide-heads" (tiny
// with head_dim 64: Q is 256 wide, n_embd 128), "qwen2.5-0.5b", or the
// tiny "qwen3", "llama3" and "gemma2" (their vocabulary size comes from the
// --vocab-from GGUF). Throws std::invalid_argument for other names.
SynthConfig synth_preset(std::string_view preset);

// Path of the pinned tokenizer.json installed by `npm ci --prefix tools/vocab`
// under `source_dir`, or an empty string if it is not installed.
std::string default_vocab_path(const std::string& source_dir);

// Writes the model to `path`, streaming one tensor at a time. Throws
// std::invalid_argument for inconsistent dims or a vocabulary that does not
// fit n_vocab, gguf::Error / json::Error for bad vocab sources and I/O.
void synthesize(const SynthConfig& config, const std::string& path);

}  // namespace lumen::gguf
