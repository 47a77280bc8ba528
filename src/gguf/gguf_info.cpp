// `lumen-gguf info`: a gguf-dump style listing of a validated file — header,
// every metadata key with its type and value (long arrays summarized), and
// the tensor table with shapes, types, offsets and sizes in MiB.
#include <fmt/format.h>

#include "lumen/common/quote.h"
#include "lumen/gguf/info.h"

namespace lumen::gguf {

namespace {

constexpr size_t kMaxShownString = 120;

std::string show_scalar(const Scalar& s, bool all) {
  return std::visit(
      [all](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!all && v.size() > kMaxShownString) {
            return quote(v.substr(0, kMaxShownString)) + fmt::format("... ({} bytes)", v.size());
          }
          return quote(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t>) {
          return fmt::format("{}", static_cast<int>(v));
        } else {
          return fmt::format("{}", v);
        }
      },
      s);
}

std::string_view plural(ValueType t) {
  switch (t) {
    case ValueType::String: return "strings";
    case ValueType::Bool: return "bools";
    default: return to_string(t);
  }
}

std::string show_value(const Value& v, bool all) {
  if (v.type != ValueType::Array) return show_scalar(v.scalar(), all);
  const Array& a = v.array();
  const size_t shown = all ? a.items.size() : std::min(a.items.size(), kInfoArrayItems);
  std::string out = "[";
  if (shown < a.items.size()) out += fmt::format("{} {}: ", a.items.size(), plural(a.elem_type));
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + show_scalar(a.items[i], all);
  if (shown < a.items.size()) out += ", ... ";
  return out + "]";
}

std::string type_name(const Value& v) {
  if (v.type == ValueType::Array) return fmt::format("[{}]", to_string(v.array().elem_type));
  return std::string(to_string(v.type));
}

std::string show_dims(const std::vector<int64_t>& ne) {
  std::string out = "[";
  for (size_t i = 0; i < ne.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return out + "]";
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

std::string describe(const File& file, bool all_items) {
  std::string out;
  out += fmt::format("* File: {}\n", file.path());
  out += fmt::format("* GGUF v{}, {} bytes ({:.2f} MiB), alignment {}, data section at byte {}\n", file.version(),
                     file.file_size(), mib(file.file_size()), file.alignment(), file.data_offset());
  out += fmt::format("* {} key/value pairs:\n", file.metadata().size());
  size_t i = 0;
  for (const KeyValue& kv : file.metadata()) {
    out += fmt::format("  {:5}: {:<6} {} = {}\n", ++i, type_name(kv.value), kv.key, show_value(kv.value, all_items));
  }
  uint64_t total = 0;
  for (const TensorInfo& t : file.tensors()) total += t.n_bytes;
  out += fmt::format("* {} tensors, {:.2f} MiB of data:\n", file.tensors().size(), mib(total));
  size_t name_width = 4;
  for (const TensorInfo& t : file.tensors()) name_width = std::max(name_width, t.name.size());
  out += fmt::format("  {:>5}  {:<{}}  {:<5}  {:<20}  {:>12}  {:>10}  {:>12}\n", "#", "name", name_width, "type",
                     "ne", "elements", "MiB", "offset");
  i = 0;
  for (const TensorInfo& t : file.tensors()) {
    out += fmt::format("  {:5}: {:<{}}  {:<5}  {:<20}  {:>12}  {:>10.3f}  {:>12}\n", ++i, t.name, name_width,
                       to_string(t.type), show_dims(t.ne), t.n_elements, mib(t.n_bytes), t.offset);
  }
  return out;
}

}  // namespace lumen::gguf
