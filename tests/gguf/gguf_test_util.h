// Helpers for the GGUF tests: a raw byte builder for hand-made (often
// malformed) files, the small valid file the truncation and fuzz seeds use,
// and temporary paths.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <string>
#include <vector>

#include "lumen/gguf/gguf.h"

namespace lumen::gguf::testing {

// Appends little-endian fields; `mark()` returns the current offset so tests
// can assert the offset an error reports.
class RawGguf {
 public:
  template <typename T>
  RawGguf& put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
    return *this;
  }
  RawGguf& str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return put<uint32_t>(version).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  RawGguf& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(4).put<uint32_t>(v); }
  // name, n_dims, dims, type, offset
  RawGguf& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) put<int64_t>(d);
    return put<uint32_t>(type).put<uint64_t>(offset);
  }
  RawGguf& pad(size_t alignment = 32) {
    bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }
  uint64_t mark() const { return bytes.size(); }

  std::vector<uint8_t> bytes;
};

// A small valid file: one key of every value type (arrays of strings and
// numbers included) and three tensors. The last tensor's size is a multiple
// of the alignment, so the file ends with data, not padding: cutting it
// anywhere removes bytes the reader needs.
inline Writer small_writer() {
  Writer w;
  w.set_string("general.architecture", "qwen2");
  w.set("test.u8", Value{ValueType::U8, Scalar(uint8_t{200})});
  w.set("test.i8", Value{ValueType::I8, Scalar(int8_t{-100})});
  w.set("test.u16", Value{ValueType::U16, Scalar(uint16_t{60000})});
  w.set("test.i16", Value{ValueType::I16, Scalar(int16_t{-30000})});
  w.set_u32("test.u32", 4000000000u);
  w.set_i32("test.i32", -2000000000);
  w.set_f32("test.f32", 1.5f);
  w.set_bool("test.bool", true);
  w.set("test.u64", Value{ValueType::U64, Scalar(uint64_t{18000000000000000000ull})});
  w.set("test.i64", Value{ValueType::I64, Scalar(int64_t{-9000000000000000000ll})});
  w.set("test.f64", Value{ValueType::F64, Scalar(0.1)});
  w.set_string("test.str", "héllo\nworld");
  w.set_string_array("test.strings", {"a", "", "ĠĠ ĠĠ", "<|im_end|>"});
  w.set_i32_array("test.i32s", {1, -2, 3});
  w.set_f32_array("test.f32s", {0.5f, -0.25f});
  w.set("test.empty_array", Value{ValueType::Array, Array{ValueType::U64, {}}});
  std::vector<uint8_t> q8(2 * 34);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7);
  w.add_tensor("a.weight", TensorType::Q8_0, {32, 2}, q8);
  std::vector<uint8_t> f16(3 * 2, 0x3c);
  w.add_tensor("b.bias", TensorType::F16, {3}, f16);
  std::vector<uint8_t> f32(8 * 4);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(255 - i);
  w.add_tensor("c.norm", TensorType::F32, {4, 2}, f32);
  return w;
}

inline std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("lumen-gguf-test-" + std::to_string(::getpid()) + "-" + name);
}

}  // namespace lumen::gguf::testing
