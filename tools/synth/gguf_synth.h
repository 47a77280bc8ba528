// The GGUF synthesizer of `lumen-gguf synth`: writes random Qwen2 models for
// tests and benchmarks (tensor names, types and metadata as llama.cpp's qwen2
// loader expects them). A tool, not part of the runtime: it knows where the
// pinned tokenizer package is installed in the source tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lumen/gguf/gguf.h"

namespace lumen::gguf {

// Shape of a synthetic Qwen2 model.
struct SynthConfig {
  std::string name = "synthetic-qwen2";
  uint32_t n_embd = 128;
  uint32_t n_layer = 2;
  uint32_t n_head = 4;
  uint32_t n_head_kv = 2;
  uint32_t n_ff = 352;
  // Per-head width; 0 means n_embd / n_head. Otherwise written as
  // {arch}.attention.key_length and value_length, and Q is n_head * head_dim
  // wide (as in Qwen3 and Gemma, where that differs from n_embd).
  uint32_t head_dim = 0;
  uint32_t n_vocab = 151936;
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
// with head_dim 64: Q is 256 wide, n_embd 128) or "qwen2.5-0.5b".
// Throws std::invalid_argument for other names.
SynthConfig synth_preset(std::string_view preset);

// Path of the pinned tokenizer.json installed by `npm ci --prefix tools/vocab`
// under `source_dir`, or an empty string if it is not installed.
std::string default_vocab_path(const std::string& source_dir);

// Writes the model to `path`, streaming one tensor at a time. Throws
// std::invalid_argument for inconsistent dims or a vocabulary that does not
// fit n_vocab, gguf::Error / json::Error for bad vocab sources and I/O.
void synthesize(const SynthConfig& config, const std::string& path);

}  // namespace lumen::gguf
