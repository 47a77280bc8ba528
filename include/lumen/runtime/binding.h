// Binding a compiled program to a GGUF file: hyperparameters resolved from
// metadata (exact types, ranges, checks), every weight found by name and
// checked for dtype and shape, matmul weights repacked for the kernels.
// Everything is checked before anything runs; each failure is a LoadError
// naming the key, tensor or check at fault.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

// One MatMul op of one layer, ready for the kernels.
struct PackedMatMul {
  const uint8_t* w = nullptr;  // packed row groups (gate/up alternating for SiluMul)
  program::DType format = program::DType::Q8_0;  // their packed format (target/weight_formats.h)
  int64_t group_bytes = 0;     // bytes from one row-group position to the next (both halves for SiluMul)
  int64_t rows = 0;            // output rows M (gate rows for SiluMul)
  int64_t k = 0;               // input columns K
  const float* bias = nullptr; // M floats (biases concatenated), or null
};

// One T for each section of the program, indexed by program::Section.
template <typename T>
struct PerSection {
  T pre, layer, post;
  T& operator[](program::Section s) { return s == program::Section::Pre ? pre : s == program::Section::Layer ? layer : post; }
  const T& operator[](program::Section s) const {
    return s == program::Section::Pre ? pre : s == program::Section::Layer ? layer : post;
  }
};

struct BoundModel {
  std::vector<double> hparams;  // resolved, in program order
  int64_t n_layers = 0;
  int64_t n_ctx_train = 0;
  int64_t kv_dim = 0;
  // tensors[weight][layer] (one entry for global weights); null only for an
  // optional weight absent from the file.
  std::vector<std::vector<const gguf::TensorInfo*>> tensors;
  // matmuls[section][op][layer] (one layer outside Section::Layer); empty for non-matmul ops.
  PerSection<std::vector<std::vector<PackedMatMul>>> matmuls;
  uint64_t packed_bytes = 0;
  double pack_seconds = 0;         // packing, or reading the pack cache (key hashing included)
  std::string pack_cache = "off";  // off, hit, miss, corrupt or stale (the last three rebuild it)
  std::string pack_cache_path;     // the cache file read or written ("" if none)
  std::string pack_cache_how;      // on a hit: "mapped, N% on 2 MiB pages", or "read" and why not mapped

  // The tensor of `weight` for `layer` (any layer for a global weight).
  const gguf::TensorInfo* tensor(int weight, int64_t layer) const {
    const auto& per_layer = tensors[static_cast<size_t>(weight)];
    return per_layer.size() == 1 ? per_layer[0] : per_layer[static_cast<size_t>(layer)];
  }

  // One mapping, on huge pages where the kernel gives them: anonymous memory,
  // or the pack cache file mapped read-only (never written through).
  std::shared_ptr<uint8_t> packed_storage;
  std::vector<std::vector<float>> bias_storage;
};

class ThreadPool;

// Throws LoadError. With release_file_pages (only for an mmapped file, never
// for File::from_memory), the file pages of the weights are dropped from this
// process once the load has read them (hashed, checked or repacked), so it
// holds one copy of the weights: the packed one, and the rows it reads in place.
// Repacking runs on `pool`. With a pack_cache_dir, the packed weights are read
// from its cache file for this model, target and GGUF contents when that file
// is intact, and written there otherwise (pack_cache.h). An intact file is
// mapped in place when map_pack_cache_file and the mapping lands on 2 MiB
// pages, else read into anonymous huge pages.
BoundModel bind_model(const CompiledModel& model, const gguf::File& file, bool release_file_pages,
                      ThreadPool& pool, const std::string& pack_cache_dir = "", bool map_pack_cache_file = true);

// Resolves only the hparams (and runs the checks and the architecture test).
std::vector<double> resolve_hparams(const program::Program& program, const gguf::File& file);

}  // namespace lumen::runtime
