// Helpers shared by the GGUF reader and writer (not part of the public API):
// the file layout constants and overflow-checked size arithmetic.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "lumen/gguf/gguf.h"

namespace lumen::gguf::detail {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxTensorName = 63;  // ggml's GGML_MAX_NAME (64) minus the NUL
constexpr std::string_view kAlignmentKey = "general.alignment";

// Bytes one element of a metadata value occupies; strings count their
// length prefix only (the smallest a string can be).
inline uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::Bool: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::String: return 8;
    case ValueType::Array: return 12;  // element type + count
  }
  return 1;
}

inline bool is_valid_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::F64); }

// Product of the dims and the byte size for a type, or nullopt when a dim is
// not positive, the product overflows int64, or ne[0] is not a whole number
// of blocks. `why` receives a short reason.
struct TensorSize {
  uint64_t n_elements;
  uint64_t n_bytes;
};
inline std::optional<TensorSize> tensor_size(const TypeTraits& traits, std::span<const int64_t> ne,
                                             const char** why) {
  uint64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) {
      *why = "has a dimension that is not positive";
      return std::nullopt;
    }
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d)) {
      *why = "has dimensions whose product overflows int64";
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  if (ne.empty() || static_cast<uint64_t>(ne[0]) % traits.block_size != 0) {
    *why = "has a row length that is not a whole number of blocks";
    return std::nullopt;
  }
  const uint64_t blocks = n / traits.block_size;
  if (blocks > std::numeric_limits<uint64_t>::max() / traits.type_size) {
    *why = "has a byte size that overflows";
    return std::nullopt;
  }
  return TensorSize{n, blocks * traits.type_size};
}

inline uint64_t align_up(uint64_t x, uint64_t alignment) {
  return x + (alignment - x % alignment) % alignment;
}

}  // namespace lumen::gguf::detail
