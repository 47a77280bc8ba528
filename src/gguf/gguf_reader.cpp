// GGUF v3 reader: maps a file (or takes a caller's buffer), validates all of
// it up front and then serves metadata and zero-copy tensor views.
//
// Validation never trusts a count: every count and length is checked against
// the bytes left in the file before anything is allocated or read, all size
// arithmetic is overflow-checked, and each failure is a gguf::Error naming the
// key or tensor and the byte offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "gguf_internal.h"
#include "lumen/gguf/gguf.h"

namespace lumen::gguf {

using Code = Error::Code;

namespace {

// Read-only mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base_ != nullptr) munmap(base_, size_);
  }

  void map(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(Code::Io, 0, fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw Error(Code::Io, 0, fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(Code::Io, 0, fmt::format("{}: not a regular file", path));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {  // mmap of zero bytes fails; an empty file is reported as truncated
      void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        throw Error(Code::Io, 0, fmt::format("{}: cannot map: {}", path, std::strerror(err)));
      }
      base_ = p;
    }
    ::close(fd);
  }

  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(base_), size_}; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
};

// Bounds-checked little-endian cursor. `subject` names what is being read
// ("key 'general.name'", "tensor 'output.weight'") for error messages.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  void set_subject(std::string subject) { subject_ = std::move(subject); }
  const std::string& source() const { return source_; }

  [[noreturn]] void fail(Code code, uint64_t at, std::string_view what) const {
    throw Error(code, at, fmt::format("{}: {}: {} (at byte offset {})", source_, subject_, what, at));
  }

  template <typename T>
  T read(std::string_view field) {
    if (sizeof(T) > remaining()) {
      fail(Code::Truncated, pos_,
           fmt::format("file ends while reading {} ({} bytes needed, {} left)", field, sizeof(T), remaining()));
    }
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view field) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(fmt::format("the length of {}", field));
    if (n > remaining()) {
      fail(Code::BadCount, at, fmt::format("{} has length {} but only {} bytes are left in the file", field, n, remaining()));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  std::span<const uint8_t> bytes_;
  std::string source_;
  std::string subject_ = "header";
  uint64_t pos_ = 0;
};

Scalar read_scalar(Cursor& in, ValueType type) {
  switch (type) {
    case ValueType::U8: return in.read<uint8_t>("a u8");
    case ValueType::I8: return in.read<int8_t>("an i8");
    case ValueType::U16: return in.read<uint16_t>("a u16");
    case ValueType::I16: return in.read<int16_t>("an i16");
    case ValueType::U32: return in.read<uint32_t>("a u32");
    case ValueType::I32: return in.read<int32_t>("an i32");
    case ValueType::F32: return in.read<float>("an f32");
    case ValueType::Bool: return in.read<int8_t>("a bool") != 0;  // any nonzero byte is true, as in ggml
    case ValueType::String: return in.read_string("a string");
    case ValueType::U64: return in.read<uint64_t>("a u64");
    case ValueType::I64: return in.read<int64_t>("an i64");
    case ValueType::F64: return in.read<double>("an f64");
    case ValueType::Array: break;  // callers handle arrays
  }
  in.fail(Code::BadValueType, in.pos(), "internal: array read as a scalar");
}

ValueType read_value_type(Cursor& in, std::string_view field) {
  const uint64_t at = in.pos();
  const uint32_t raw = in.read<uint32_t>(field);
  if (!detail::is_valid_value_type(raw)) in.fail(Code::BadValueType, at, fmt::format("unknown value type {}", raw));
  return static_cast<ValueType>(raw);
}

Value read_value(Cursor& in, ValueType type) {
  Value value;
  value.type = type;
  if (type != ValueType::Array) {
    value.data = read_scalar(in, type);
    return value;
  }
  Array array;
  const uint64_t type_at = in.pos();
  array.elem_type = read_value_type(in, "the array element type");
  if (array.elem_type == ValueType::Array) in.fail(Code::BadValueType, type_at, "nested arrays are not allowed");
  const uint64_t count_at = in.pos();
  const uint64_t count = in.read<uint64_t>("the array length");
  if (count > in.remaining() / detail::min_value_bytes(array.elem_type)) {
    in.fail(Code::BadCount, count_at,
            fmt::format("array of {} {} does not fit in the {} bytes left in the file", count,
                        to_string(array.elem_type), in.remaining()));
  }
  array.items.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) array.items.push_back(read_scalar(in, array.elem_type));
  value.data = std::move(array);
  return value;
}

std::string describe_dims(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace

struct File::Impl {
  Mapping mapping;
  std::span<const uint8_t> bytes;
  std::string path;
  uint32_t version = 0;
  uint64_t alignment = detail::kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string_view, size_t> key_index;
  std::unordered_map<std::string_view, size_t> tensor_index;

  void parse();
  void parse_metadata(Cursor& in, uint64_t n_kv);
  void parse_tensor_infos(Cursor& in, uint64_t n_tensors, std::vector<uint64_t>& info_offsets);
  void check_tensor_data(Cursor& in, const std::vector<uint64_t>& info_offsets);
  const Value* typed(std::string_view key) const;
  [[noreturn]] void wrong_type(std::string_view key, std::string_view wanted) const;
};

void File::Impl::parse() {
  Cursor in(bytes, path);
  const uint32_t magic = in.read<uint32_t>("the magic");
  if (magic != detail::kMagic) in.fail(Code::BadMagic, 0, "not a GGUF file (bad magic)");
  version = in.read<uint32_t>("the version");
  if ((version & 0xFFFFu) == 0 && version != 0) {
    in.fail(Code::BadVersion, 4, fmt::format("version {:#x} looks byte-swapped: big-endian files are not supported", version));
  }
  if (version < 2 || version > detail::kVersion) {
    in.fail(Code::BadVersion, 4, fmt::format("unsupported GGUF version {} (supported: 2 and 3)", version));
  }
  const uint64_t n_tensors = in.read<uint64_t>("the tensor count");
  const uint64_t n_kv = in.read<uint64_t>("the metadata count");
  // Each entry takes at least this many bytes, so larger counts cannot fit.
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;             // key length, type, 1-byte value
  constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, ne[0], type, offset
  if (n_kv > in.remaining() / kMinKvBytes) {
    in.fail(Code::BadCount, 16, fmt::format("metadata count {} is too large for a {}-byte file", n_kv, in.size()));
  }
  if (n_tensors > in.remaining() / kMinTensorInfoBytes) {
    in.fail(Code::BadCount, 8, fmt::format("tensor count {} is too large for a {}-byte file", n_tensors, in.size()));
  }
  parse_metadata(in, n_kv);
  std::vector<uint64_t> info_offsets;
  parse_tensor_infos(in, n_tensors, info_offsets);
  data_offset = detail::align_up(in.pos(), alignment);
  check_tensor_data(in, info_offsets);
}

void File::Impl::parse_metadata(Cursor& in, uint64_t n_kv) {
  metadata.reserve(static_cast<size_t>(n_kv));
  key_index.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue kv;
    kv.offset = in.pos();
    in.set_subject(fmt::format("metadata entry {}", i));
    kv.key = in.read_string("the key");
    if (kv.key.empty()) in.fail(Code::BadKey, kv.offset, "empty key");
    in.set_subject(fmt::format("key '{}'", kv.key));
    const ValueType type = read_value_type(in, "the value type");
    kv.value = read_value(in, type);
    metadata.push_back(std::move(kv));
    const KeyValue& stored = metadata.back();
    if (!key_index.emplace(stored.key, metadata.size() - 1).second) {
      in.fail(Code::DuplicateKey, stored.offset, "duplicate key");
    }
  }
  if (auto it = key_index.find(detail::kAlignmentKey); it != key_index.end()) {
    const KeyValue& kv = metadata[it->second];
    in.set_subject(fmt::format("key '{}'", kv.key));
    if (kv.value.type != ValueType::U32) {
      in.fail(Code::BadKey, kv.offset, fmt::format("must be u32, not {}", to_string(kv.value.type)));
    }
    const uint32_t a = std::get<uint32_t>(kv.value.scalar());
    if (a == 0 || (a & (a - 1)) != 0) in.fail(Code::BadAlignment, kv.offset, fmt::format("alignment {} is not a power of two", a));
    alignment = a;
  }
}

void File::Impl::parse_tensor_infos(Cursor& in, uint64_t n_tensors, std::vector<uint64_t>& info_offsets) {
  tensors.reserve(static_cast<size_t>(n_tensors));
  info_offsets.reserve(static_cast<size_t>(n_tensors));
  tensor_index.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    const uint64_t at = in.pos();
    in.set_subject(fmt::format("tensor info {}", i));
    t.name = in.read_string("the tensor name");
    if (t.name.empty()) in.fail(Code::BadTensor, at, "empty tensor name");
    in.set_subject(fmt::format("tensor '{}'", t.name));
    if (t.name.size() > detail::kMaxTensorName) {
      in.fail(Code::BadTensor, at, fmt::format("name is {} bytes long (at most {})", t.name.size(), detail::kMaxTensorName));
    }
    const uint64_t dims_at = in.pos();
    const uint32_t n_dims = in.read<uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > detail::kMaxDims) {
      in.fail(Code::BadTensor, dims_at, fmt::format("n_dims {} is outside 1..{}", n_dims, detail::kMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(in.read<int64_t>("a dimension"));
    const uint64_t type_at = in.pos();
    const uint32_t raw_type = in.read<uint32_t>("the tensor type");
    const std::optional<TypeTraits> traits = type_traits(raw_type);
    if (!traits) in.fail(Code::BadTensor, type_at, fmt::format("unknown tensor type {}", raw_type));
    t.type = static_cast<TensorType>(raw_type);
    const char* why = "";
    const auto size = detail::tensor_size(*traits, t.ne, &why);
    if (!size) in.fail(Code::BadTensor, dims_at, fmt::format("{} {} {}", traits->name, describe_dims(t.ne), why));
    t.n_elements = size->n_elements;
    t.n_bytes = size->n_bytes;
    info_offsets.push_back(in.pos());
    t.offset = in.read<uint64_t>("the data offset");
    tensors.push_back(std::move(t));
    if (!tensor_index.emplace(tensors.back().name, tensors.size() - 1).second) {
      in.fail(Code::DuplicateTensor, at, "duplicate tensor name");
    }
  }
}

// Data must be aligned, inside the file and without overlap. Gaps between
// tensors are tolerated (llama.cpp is stricter and wants them packed).
void File::Impl::check_tensor_data(Cursor& in, const std::vector<uint64_t>& info_offsets) {
  const uint64_t file_size = bytes.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& t = tensors[i];
    in.set_subject(fmt::format("tensor '{}'", t.name));
    if (t.offset % alignment != 0) {
      in.fail(Code::BadOffset, info_offsets[i], fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, alignment));
    }
    const bool inside = data_offset <= file_size && t.offset <= file_size - data_offset &&
                        t.n_bytes <= file_size - data_offset - t.offset;
    if (!inside) {
      in.fail(Code::BadOffset, info_offsets[i],
              fmt::format("data at offset {} + {} bytes in the data section (starting at {}) runs past the end of the {}-byte file",
                          t.offset, t.n_bytes, data_offset, file_size));
    }
    t.data = bytes.data() + data_offset + t.offset;
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = tensors[order[k - 1]];
    const TensorInfo& cur = tensors[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes) {
      in.set_subject(fmt::format("tensor '{}'", cur.name));
      in.fail(Code::BadOffset, info_offsets[order[k]],
              fmt::format("data at offset {} overlaps tensor '{}' (offset {}, {} bytes)", cur.offset, prev.name,
                          prev.offset, prev.n_bytes));
    }
  }
}

File File::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->mapping.map(path);
  impl->bytes = impl->mapping.bytes();
  impl->parse();
  return File(std::move(impl));
}

File File::from_memory(std::span<const uint8_t> bytes) {
  auto impl = std::make_unique<Impl>();
  impl->path = "<memory>";
  impl->bytes = bytes;
  impl->parse();
  return File(std::move(impl));
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_offset; }
uint64_t File::file_size() const { return impl_->bytes.size(); }
const std::string& File::path() const { return impl_->path; }
const std::vector<KeyValue>& File::metadata() const { return impl_->metadata; }
const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }

const KeyValue* File::find(std::string_view key) const {
  auto it = impl_->key_index.find(key);
  return it == impl_->key_index.end() ? nullptr : &impl_->metadata[it->second];
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

// ---- typed getters ----

const Value* File::Impl::typed(std::string_view key) const {
  auto it = key_index.find(key);
  return it == key_index.end() ? nullptr : &metadata[it->second].value;
}

void File::Impl::wrong_type(std::string_view key, std::string_view wanted) const {
  auto it = key_index.find(key);
  const KeyValue& kv = metadata[it->second];
  std::string have(to_string(kv.value.type));
  if (kv.value.type == ValueType::Array) have = fmt::format("array of {}", to_string(kv.value.array().elem_type));
  throw Error(Code::WrongType, kv.offset,
              fmt::format("{}: key '{}' has type {}, expected {} (at byte offset {})", path, key, have, wanted, kv.offset));
}

namespace {

// Widens any integer alternative to a signed 128-bit-free pair: (negative?, magnitude).
std::optional<std::pair<bool, uint64_t>> integer_of(const Scalar& s) {
  return std::visit(
      [](const auto& v) -> std::optional<std::pair<bool, uint64_t>> {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, float> || std::is_same_v<T, double> ||
                      std::is_same_v<T, std::string>) {
          return std::nullopt;
        } else if constexpr (std::is_signed_v<T>) {
          if (v < 0) return std::pair{true, static_cast<uint64_t>(-(static_cast<int64_t>(v) + 1)) + 1};
          return std::pair{false, static_cast<uint64_t>(v)};
        } else {
          return std::pair{false, static_cast<uint64_t>(v)};
        }
      },
      s);
}

}  // namespace

std::optional<uint64_t> File::get_uint(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Array) {
    if (auto n = integer_of(v->scalar()); n && !n->first) return n->second;
  }
  impl_->wrong_type(key, "a non-negative integer");
}

std::optional<int64_t> File::get_int(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (v->type != ValueType::Array) {
    if (auto n = integer_of(v->scalar())) {
      constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!n->first && n->second <= kMax) return static_cast<int64_t>(n->second);
      if (n->first && n->second <= kMax + 1) return static_cast<int64_t>(-static_cast<int64_t>(n->second - 1) - 1);
    }
  }
  impl_->wrong_type(key, "an integer that fits int64");
}

std::optional<double> File::get_float(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::F32) return std::get<float>(v->scalar());
  if (v->type == ValueType::F64) return std::get<double>(v->scalar());
  impl_->wrong_type(key, "f32 or f64");
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::Bool) return std::get<bool>(v->scalar());
  impl_->wrong_type(key, "bool");
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (v->type == ValueType::String) return std::get<std::string>(v->scalar());
  impl_->wrong_type(key, "str");
}

namespace {

template <typename T>
std::optional<std::vector<T>> array_of(const Value* v, ValueType elem) {
  if (v->type != ValueType::Array || v->array().elem_type != elem) return std::nullopt;
  std::vector<T> out;
  out.reserve(v->array().items.size());
  for (const Scalar& s : v->array().items) out.push_back(std::get<T>(s));
  return out;
}

}  // namespace

std::optional<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (auto out = array_of<std::string>(v, ValueType::String)) return out;
  impl_->wrong_type(key, "array of str");
}

std::optional<std::vector<int32_t>> File::get_i32_array(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (auto out = array_of<int32_t>(v, ValueType::I32)) return out;
  impl_->wrong_type(key, "array of i32");
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
  const Value* v = impl_->typed(key);
  if (!v) return std::nullopt;
  if (auto out = array_of<float>(v, ValueType::F32)) return out;
  impl_->wrong_type(key, "array of f32");
}

}  // namespace lumen::gguf
