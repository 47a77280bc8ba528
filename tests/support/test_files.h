// Where the tests find their inputs, and how they read them: a file a test
// needs must be there, so reading one that is not is an error naming it.
#pragma once

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lumen::test_support {

// The shared reference folder (llama.cpp's outputs on a small synthetic model
// and its vocabularies), outside the repository: tests/CMakeLists.txt.
inline std::string shared_reference_dir() { return LUMEN_SHARED_DIR "/reference"; }
// Its model (Qwen2 layout, the real Qwen tokenizer, random weights).
inline std::string tiny_gguf() { return shared_reference_dir() + "/tiny-qwen2-a.gguf"; }

// A file a test reads: a missing or unreadable one is an error naming it, not
// an empty string a comparison could pass on.
inline std::string read_existing_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<float> read_f32_file(const std::string& path) {
  const std::string bytes = read_existing_file(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace lumen::test_support
