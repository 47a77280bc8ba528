// Lookups by name in the one list of operators, types and epilogues (see ops/op_list.h).
#include "lumen/ops/op_list.h"

namespace lumen::ops {

std::optional<OpId> parse_op(std::string_view name) {
  for (const OpRow& r : kOps)
    if (name == r.name) return r.id;
  return std::nullopt;
}

std::optional<OpId> parse_op_id(std::string_view text) {
  for (const OpRow& r : kOps)
    if (text == r.id_name) return r.id;
  return std::nullopt;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeRow& r : kDTypes)
    if (name == r.name) return r.id;
  return std::nullopt;
}

std::optional<DType> parse_dtype_id(std::string_view text) {
  for (const DTypeRow& r : kDTypes)
    if (text == r.id_name) return r.id;
  return std::nullopt;
}

std::optional<DType> dtype_of_ggml(uint32_t ggml_type) {
  for (const DTypeRow& r : kDTypes)
    if (r.ggml_type >= 0 && static_cast<uint32_t>(r.ggml_type) == ggml_type) return r.id;
  return std::nullopt;
}

std::optional<Epilogue> parse_epilogue(std::string_view name) {
  for (const EpilogueRow& r : kEpilogues)
    if (name == r.name) return r.id;
  return std::nullopt;
}

}  // namespace lumen::ops
