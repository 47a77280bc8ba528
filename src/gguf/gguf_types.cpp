// GGUF type tables: names of metadata value types, block layouts of tensor
// types, and the typed error. Shared by the reader, the writer and the tools.
#include "lumen/gguf/gguf.h"

#include <array>

namespace lumen::gguf {

std::string_view to_string(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::Bool: return "bool";
    case ValueType::String: return "str";
    case ValueType::Array: return "arr";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "?";
}

namespace {

struct KnownType {
  uint32_t id;
  TypeTraits traits;
};

// Block layouts as in ggml's type_traits table (ggml.c). Removed and
// unknown ids are absent, so the reader rejects them.
constexpr std::array<KnownType, 31> kKnownTypes = {{
    {0, {"F32", 1, 4}},
    {1, {"F16", 1, 2}},
    {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},
    {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},
    {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},
    {12, {"Q4_K", 256, 144}},
    {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},
    {15, {"Q8_K", 256, 292}},
    {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}},
    {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},
    {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}},
    {24, {"I8", 1, 1}},
    {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},
    {27, {"I64", 1, 8}},
    {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},
    {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},
}};

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t raw_type) {
  for (const KnownType& known : kKnownTypes) {
    if (known.id == raw_type) return known.traits;
  }
  return std::nullopt;
}

std::string_view to_string(TensorType t) {
  auto traits = type_traits(static_cast<uint32_t>(t));
  return traits ? traits->name : std::string_view("?");
}

Error::Error(Code code, uint64_t offset, const std::string& message)
    : std::runtime_error(message), code_(code), offset_(offset) {}

}  // namespace lumen::gguf
