// GGUF v3: a validating, zero-copy reader over an mmap'd file and a writer
// that produces byte-identical files for the same content.
//
// Every failure of the reader is a gguf::Error whose message names the key or
// tensor at fault and the byte offset where the problem was found. The reader
// validates the whole file before handing out anything: callers never see a
// partially checked tensor table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lumen::gguf {

// Metadata value types, numbered as in the GGUF specification.
enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
  String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view to_string(ValueType t);

// Tensor element types, numbered as ggml_type. Only types with a known block
// layout are accepted by the reader; see type_traits().
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35,
};
struct TypeTraits {
  std::string_view name;  // "Q8_0"
  uint32_t block_size;    // elements per block (1 for plain types)
  uint32_t type_size;     // bytes per block
};
// Traits of a known type, or nullopt for ids the reader rejects.
std::optional<TypeTraits> type_traits(uint32_t raw_type);
std::string_view to_string(TensorType t);

// Typed error: `code` says what kind of problem, what() is the one-line message.
class Error : public std::runtime_error {
 public:
  enum class Code {
    Io,             // cannot open / stat / map the file
    Truncated,      // a read ran past the end of the file
    BadMagic,
    BadVersion,
    BadCount,       // n_tensors / n_kv / array count / string length too large for the file
    BadValueType,   // unknown metadata value type, or nested array
    DuplicateKey,
    BadKey,         // empty key, or a well-known key with the wrong type (general.alignment)
    BadAlignment,
    BadTensor,      // n_dims, dims, overflow, unknown tensor type, row not a whole number of blocks
    DuplicateTensor,
    BadOffset,      // tensor data outside the data section, misaligned or overlapping
    WrongType,      // typed getter asked for a key of another type
    MissingKey,
  };
  Error(Code code, uint64_t offset, const std::string& message);
  Code code() const { return code_; }
  uint64_t offset() const { return offset_; }

 private:
  Code code_;
  uint64_t offset_;
};

// One metadata value. Arrays hold scalars or strings (never nested arrays).
// Values are copied out of the file; tensor data stays in the mapping (zero-copy).
struct Array;
using Scalar = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                            std::string, uint64_t, int64_t, double>;
struct Array {
  ValueType elem_type = ValueType::U8;
  std::vector<Scalar> items;  // every item holds the alternative of elem_type
};
struct Value {
  ValueType type = ValueType::U8;
  std::variant<Scalar, Array> data;

  const Scalar& scalar() const { return std::get<Scalar>(data); }
  const Array& array() const { return std::get<Array>(data); }
};

struct KeyValue {
  std::string key;
  Value value;
  uint64_t offset = 0;  // byte offset of the key in the file (0 for values built in memory)
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> ne;   // ne[0] is the contiguous (row) dimension, as in ggml
  uint64_t offset = 0;       // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the File lives
};

class File {
 public:
  // Maps and fully validates the file. Throws gguf::Error.
  static File open(const std::string& path);
  // Validates a buffer the caller keeps alive (tests, fuzzing).
  static File from_memory(std::span<const uint8_t> bytes);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  uint32_t version() const;
  uint64_t alignment() const;
  uint64_t data_offset() const;   // byte offset of the data section
  uint64_t file_size() const;
  const std::string& path() const;

  const std::vector<KeyValue>& metadata() const;
  const KeyValue* find(std::string_view key) const;
  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* find_tensor(std::string_view name) const;

  // Typed access. nullopt when the key is absent; Error(WrongType) naming the
  // key when it is present with another type. Integer getters accept any
  // integer type whose value fits.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;   // F32 or F64
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  // Whole arrays; Error(WrongType) when the element type differs.
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Builds a GGUF v3 file in memory. Keys and tensors keep insertion order; data
// is laid out exactly as llama.cpp's writer does (sequential, padded to the
// alignment), so reading and writing a file again gives the same bytes.
class Writer {
 public:
  void set(std::string key, Value value);     // replaces an existing key in place
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string(std::string key, std::string v);
  void set_string_array(std::string key, std::vector<std::string> v);
  void set_i32_array(std::string key, std::vector<int32_t> v);
  void set_f32_array(std::string key, std::vector<float> v);
  // ne as in ggml (ne[0] = row length). bytes.size() must equal the tensor's size.
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> ne,
                  std::vector<uint8_t> bytes);
  // Streaming variant for large files: `fill` is called with the tensor's
  // whole (zeroed) data buffer while the file is written, one tensor at a time.
  using TensorFill = std::function<void(std::span<uint8_t>)>;
  void add_tensor(std::string name, TensorType type, std::vector<int64_t> ne, TensorFill fill);
  void set_alignment(uint32_t alignment);  // also writes general.alignment

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws gguf::Error(Io)

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
    uint64_t n_bytes = 0;
    TensorFill fill;  // set instead of bytes for streamed tensors
  };
  uint64_t checked_tensor_bytes(const std::string& name, TensorType type, const std::vector<int64_t>& ne) const;
  std::vector<uint8_t> header_bytes() const;
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace lumen::gguf
