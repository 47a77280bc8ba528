// llama-quantize's file types and its per-tensor type choice
// (llama_tensor_get_type and the loop around it in llama.cpp's
// src/llama-quant.cpp, without an importance matrix): for a file type and the
// tensors of a GGUF, the type every tensor is written in, so that
// `lumen-gguf quantize` writes what llama-quantize writes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/ops/op_list.h"

namespace lumen::quant {

// The ftype rules below branch on; the id is llama.cpp's LLAMA_FTYPE_*,
// written into general.file_type.
enum class FileTypeId : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9, Q2_K = 10,
  Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15, Q5_K_S = 16, Q5_K_M = 17,
  Q6_K = 18, IQ4_NL = 25, IQ4_XS = 30, BF16 = 32,
};

struct FileType {
  const char* name;       // as llama-quantize spells it ("Q4_K_M")
  FileTypeId id;
  ops::DType default_type;  // the type of a tensor no rule singles out
};

// The one table of the file types lumen-gguf writes (aliases included:
// "Q4_K" is Q4_K_M, as in llama-quantize).
inline constexpr FileType kFileTypes[] = {
    {"F32", FileTypeId::F32, ops::DType::F32},          {"F16", FileTypeId::F16, ops::DType::F16},
    {"BF16", FileTypeId::BF16, ops::DType::BF16},       {"Q8_0", FileTypeId::Q8_0, ops::DType::Q8_0},
    {"Q4_0", FileTypeId::Q4_0, ops::DType::Q4_0},       {"Q4_1", FileTypeId::Q4_1, ops::DType::Q4_1},
    {"Q5_0", FileTypeId::Q5_0, ops::DType::Q5_0},       {"Q5_1", FileTypeId::Q5_1, ops::DType::Q5_1},
    {"Q2_K", FileTypeId::Q2_K, ops::DType::Q2_K},       {"Q3_K_S", FileTypeId::Q3_K_S, ops::DType::Q3_K},
    {"Q3_K_M", FileTypeId::Q3_K_M, ops::DType::Q3_K},   {"Q3_K", FileTypeId::Q3_K_M, ops::DType::Q3_K},
    {"Q3_K_L", FileTypeId::Q3_K_L, ops::DType::Q3_K},   {"Q4_K_S", FileTypeId::Q4_K_S, ops::DType::Q4_K},
    {"Q4_K_M", FileTypeId::Q4_K_M, ops::DType::Q4_K},   {"Q4_K", FileTypeId::Q4_K_M, ops::DType::Q4_K},
    {"Q5_K_S", FileTypeId::Q5_K_S, ops::DType::Q5_K},   {"Q5_K_M", FileTypeId::Q5_K_M, ops::DType::Q5_K},
    {"Q5_K", FileTypeId::Q5_K_M, ops::DType::Q5_K},     {"Q6_K", FileTypeId::Q6_K, ops::DType::Q6_K},
    {"IQ4_NL", FileTypeId::IQ4_NL, ops::DType::IQ4_NL}, {"IQ4_XS", FileTypeId::IQ4_XS, ops::DType::IQ4_XS},
};

// The file type named `name` (case-insensitive, as llama-quantize), or nullopt.
std::optional<FileType> parse_file_type(std::string_view name);

// Whether `name` is one of llama-quantize's file types that lumen-gguf does
// not write because their types want an importance matrix (IQ1_*, IQ2_*,
// IQ3_*, Q2_K_S) — for a clear refusal rather than "unknown".
bool needs_importance_matrix(std::string_view name);

// What the rules read of the model: the GGUF's general.architecture and
// {arch}.block_count / attention.head_count(_kv) / expert_count.
struct QuantModel {
  std::string arch;
  uint32_t n_layer = 0;
  uint32_t n_head = 0;
  uint32_t n_head_kv = 0;
  uint32_t n_expert = 0;
};

struct QuantTensor {
  std::string name;
  std::vector<int64_t> ne;  // as in the GGUF (ne[0] the row length)
  ops::DType type;          // its type in the input file
};

struct TypeChoice {
  std::vector<ops::DType> types;  // per tensor, in the order given
  int n_fallback = 0;             // tensors whose chosen type did not fit their rows
  int n_k_quantized = 0;          // tensors whose chosen type fit
};

// The order llama-quantize writes tensors in (llama_model_loader's
// weights_map): by layer number ("blk.N."; tensors outside a layer first),
// then by name. Indices into `tensors`.
std::vector<size_t> llama_quantize_order(const std::vector<QuantTensor>& tensors);

// The type of every tensor as llama-quantize writes it for file type ft.
// Throws std::runtime_error with llama-quantize's reason for a model it
// refuses (a tensor of an expert model outside a layer, an attn_v count that
// is not n_layer).
TypeChoice choose_tensor_types(const std::vector<QuantTensor>& tensors, const QuantModel& model, const FileType& ft);

}  // namespace lumen::quant
