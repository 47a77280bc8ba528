// GGUF v3 writer: header, metadata and tensor infos, then the tensor data laid
// out sequentially, each tensor padded with zeros to the alignment, exactly as
// llama.cpp's writers do. Tensors may be given as bytes or as a fill callback
// so that large files are produced one tensor at a time.
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>

#include <fmt/format.h>

#include "gguf_internal.h"
#include "lumen/gguf/gguf.h"

namespace lumen::gguf {

using Code = Error::Code;

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}

  template <typename T>
  void put(T v) {
    append(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    append(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) { out_.resize(detail::align_up(out_.size(), alignment), 0); }

 private:
  void append(const void* p, size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    if (n != 0) std::memcpy(out_.data() + at, p, n);
  }

  std::vector<uint8_t>& out_;
};

[[noreturn]] void bad_value(const std::string& key, std::string_view what) {
  throw Error(Code::BadValueType, 0, fmt::format("gguf writer: key '{}': {}", key, what));
}

void put_scalar(ByteSink& out, const std::string& key, ValueType type, const Scalar& s) {
  // The variant alternative must be the one the declared type stores.
  auto get = [&]<typename T>(T*) -> const T& {
    if (!std::holds_alternative<T>(s)) bad_value(key, fmt::format("value does not hold a {}", to_string(type)));
    return std::get<T>(s);
  };
  switch (type) {
    case ValueType::U8: out.put(get((uint8_t*)nullptr)); return;
    case ValueType::I8: out.put(get((int8_t*)nullptr)); return;
    case ValueType::U16: out.put(get((uint16_t*)nullptr)); return;
    case ValueType::I16: out.put(get((int16_t*)nullptr)); return;
    case ValueType::U32: out.put(get((uint32_t*)nullptr)); return;
    case ValueType::I32: out.put(get((int32_t*)nullptr)); return;
    case ValueType::F32: out.put(get((float*)nullptr)); return;
    case ValueType::Bool: out.put<int8_t>(get((bool*)nullptr) ? 1 : 0); return;
    case ValueType::String: out.put_string(get((std::string*)nullptr)); return;
    case ValueType::U64: out.put(get((uint64_t*)nullptr)); return;
    case ValueType::I64: out.put(get((int64_t*)nullptr)); return;
    case ValueType::F64: out.put(get((double*)nullptr)); return;
    case ValueType::Array: break;
  }
  bad_value(key, "nested arrays are not allowed");
}

void put_value(ByteSink& out, const std::string& key, const Value& value) {
  out.put(static_cast<uint32_t>(value.type));
  if (value.type != ValueType::Array) {
    if (!std::holds_alternative<Scalar>(value.data)) bad_value(key, "type is not array but the value is");
    put_scalar(out, key, value.type, value.scalar());
    return;
  }
  if (!std::holds_alternative<Array>(value.data)) bad_value(key, "type is array but the value is not");
  const Array& array = value.array();
  out.put(static_cast<uint32_t>(array.elem_type));
  out.put<uint64_t>(array.items.size());
  for (const Scalar& item : array.items) put_scalar(out, key, array.elem_type, item);
}

template <typename T>
Value array_value(ValueType elem, std::vector<T> items) {
  Array array;
  array.elem_type = elem;
  array.items.reserve(items.size());
  for (T& item : items) array.items.emplace_back(std::in_place_type<T>, std::move(item));
  return Value{ValueType::Array, std::move(array)};
}

}  // namespace

void Writer::set(std::string key, Value value) {
  // The data layout follows general.alignment, however it is set.
  if (key == detail::kAlignmentKey) {
    if (value.type != ValueType::U32 || !std::holds_alternative<Scalar>(value.data) ||
        !std::holds_alternative<uint32_t>(value.scalar())) {
      throw Error(Code::BadKey, 0, fmt::format("gguf writer: key '{}' must be u32", key));
    }
    const uint32_t a = std::get<uint32_t>(value.scalar());
    if (a == 0 || (a & (a - 1)) != 0) {
      throw Error(Code::BadAlignment, 0, fmt::format("gguf writer: alignment {} is not a power of two", a));
    }
    alignment_ = a;
  }
  for (KeyValue& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back(KeyValue{std::move(key), std::move(value), 0});
}

void Writer::set_u32(std::string key, uint32_t v) { set(std::move(key), Value{ValueType::U32, Scalar(v)}); }
void Writer::set_i32(std::string key, int32_t v) { set(std::move(key), Value{ValueType::I32, Scalar(v)}); }
void Writer::set_f32(std::string key, float v) { set(std::move(key), Value{ValueType::F32, Scalar(v)}); }
void Writer::set_bool(std::string key, bool v) { set(std::move(key), Value{ValueType::Bool, Scalar(v)}); }
void Writer::set_string(std::string key, std::string v) {
  set(std::move(key), Value{ValueType::String, Scalar(std::in_place_type<std::string>, std::move(v))});
}
void Writer::set_string_array(std::string key, std::vector<std::string> v) {
  set(std::move(key), array_value(ValueType::String, std::move(v)));
}
void Writer::set_i32_array(std::string key, std::vector<int32_t> v) {
  set(std::move(key), array_value(ValueType::I32, std::move(v)));
}
void Writer::set_f32_array(std::string key, std::vector<float> v) {
  set(std::move(key), array_value(ValueType::F32, std::move(v)));
}

void Writer::set_alignment(uint32_t alignment) { set_u32(std::string(detail::kAlignmentKey), alignment); }

uint64_t Writer::checked_tensor_bytes(const std::string& name, TensorType type, const std::vector<int64_t>& ne) const {
  const auto traits = type_traits(static_cast<uint32_t>(type));
  if (!traits) throw Error(Code::BadTensor, 0, fmt::format("gguf writer: tensor '{}': unknown type", name));
  if (name.empty() || name.size() > detail::kMaxTensorName) {
    throw Error(Code::BadTensor, 0, fmt::format("gguf writer: tensor '{}': name must be 1..{} bytes", name, detail::kMaxTensorName));
  }
  if (ne.empty() || ne.size() > detail::kMaxDims) {
    throw Error(Code::BadTensor, 0, fmt::format("gguf writer: tensor '{}': needs 1..{} dims", name, detail::kMaxDims));
  }
  const char* why = "";
  const auto size = detail::tensor_size(*traits, ne, &why);
  if (!size) throw Error(Code::BadTensor, 0, fmt::format("gguf writer: tensor '{}' {}", name, why));
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) throw Error(Code::DuplicateTensor, 0, fmt::format("gguf writer: duplicate tensor '{}'", name));
  }
  return size->n_bytes;
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  const uint64_t n_bytes = checked_tensor_bytes(name, type, ne);
  if (bytes.size() != n_bytes) {
    throw Error(Code::BadTensor, 0,
                fmt::format("gguf writer: tensor '{}' needs {} bytes, got {}", name, n_bytes, bytes.size()));
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne), std::move(bytes), n_bytes, {}});
}

void Writer::add_tensor(std::string name, TensorType type, std::vector<int64_t> ne, TensorFill fill) {
  const uint64_t n_bytes = checked_tensor_bytes(name, type, ne);
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne), {}, n_bytes, std::move(fill)});
}

// Everything before the data section, padded to the alignment.
std::vector<uint8_t> Writer::header_bytes() const {
  std::vector<uint8_t> bytes;
  ByteSink out(bytes);
  out.put(detail::kMagic);
  out.put(detail::kVersion);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kv_.size());
  for (const KeyValue& kv : kv_) {
    out.put_string(kv.key);
    put_value(out, kv.key, kv.value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    out.put_string(t.name);
    out.put(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put(d);
    out.put(static_cast<uint32_t>(t.type));
    out.put(offset);
    offset = detail::align_up(offset + t.n_bytes, alignment_);
  }
  out.pad_to(alignment_);
  return bytes;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> bytes = header_bytes();
  for (const PendingTensor& t : tensors_) {
    const size_t start = bytes.size();
    if (t.fill) {
      bytes.resize(start + t.n_bytes);
      t.fill(std::span<uint8_t>(bytes.data() + start, t.n_bytes));
    } else {
      bytes.insert(bytes.end(), t.bytes.begin(), t.bytes.end());
    }
    bytes.resize(detail::align_up(bytes.size(), alignment_), 0);
  }
  return bytes;
}

void Writer::write(const std::string& path) const {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "wb"));
  if (!file) throw Error(Code::Io, 0, fmt::format("{}: cannot create: {}", path, std::strerror(errno)));
  auto put = [&](const uint8_t* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, file.get()) != n) {
      throw Error(Code::Io, 0, fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    }
  };
  const std::vector<uint8_t> header = header_bytes();
  put(header.data(), header.size());
  const std::vector<uint8_t> zeros(alignment_, 0);
  std::vector<uint8_t> buffer;
  for (const PendingTensor& t : tensors_) {
    if (t.fill) {
      // One buffer, reused: only one generated tensor is held at a time, and
      // the pages stay mapped instead of faulting in again for every tensor.
      buffer.assign(t.n_bytes, 0);
      t.fill(std::span<uint8_t>(buffer));
      put(buffer.data(), buffer.size());
    } else {
      put(t.bytes.data(), t.bytes.size());
    }
    put(zeros.data(), detail::align_up(t.n_bytes, alignment_) - t.n_bytes);
  }
  if (std::fclose(file.release()) != 0) throw Error(Code::Io, 0, fmt::format("{}: close failed: {}", path, std::strerror(errno)));
}

}  // namespace lumen::gguf
