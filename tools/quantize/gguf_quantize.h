// `lumen-gguf quantize`: a GGUF rewritten in one of llama-quantize's file
// types, with llama-quantize's per-tensor types (quant/file_types.h), ggml's
// quantizers (quant/quant.h) and llama-quantize's layout of the output.
#pragma once

#include <string>

namespace lumen::gguf {

struct QuantizeOptions {
  std::string input, output, file_type;
  bool allow_requantize = false;
  unsigned n_threads = 1;
};

struct QuantizeSummary {
  int n_tensors = 0;
  int n_fallback = 0;     // llama-quantize's "N of M tensor(s) required fallback quantization"
  int n_k_quantized = 0;  // M - N of that line
};

// Writes options.output. Throws std::runtime_error with a one-line message
// for an unknown or refused file type, an input that cannot be read, and an
// already quantized tensor to convert without allow_requantize.
QuantizeSummary quantize_file(const QuantizeOptions& options);

}  // namespace lumen::gguf
