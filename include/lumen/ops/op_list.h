// The one list of operators, element/weight types and matmul epilogues.
// Every stage names them through these enums: the DSL's builtin ops, the IR
// and its text, the program and its text, the runtime's dispatch. Adding an
// operator or a type is one row here (then its rule in op_table.cpp, its
// kernel and its test; docs/architecture.md lists the files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

// X(Id, name, in_dsl, in_program, row_local)
//   Id          the enumerator; also the op's spelling in the program text ("RmsNorm")
//   name        the IR text's and the DSL's name ("rms_norm")
//   in_dsl      callable from the DSL (the others are made by passes)
//   in_program  exists in the scheduled program (an IR `view` becomes a
//               column range of its operand's buffer and disappears)
//   row_local   in the program, output row i reads row i of its inputs only
//               (and weights): the runtime runs a run of consecutive such ops
//               row by row in one parallel_for, one join for all of them
#define LUMEN_OPS(X)                                    \
  X(Embed, "embed", true, true, true)                   \
  X(RmsNorm, "rms_norm", true, true, true)              \
  X(RmsNormQuant, "rms_norm_quant", false, true, true)  \
  X(Quantize, "quantize", false, true, true)            \
  X(MatMul, "matmul", true, true, false)                \
  X(Rope, "rope", true, true, true)                     \
  X(Attention, "attention", true, true, false)          \
  X(Add, "add", true, true, true)                       \
  X(Mul, "mul", true, true, true)                       \
  X(Silu, "silu", true, true, true)                     \
  X(SiluMul, "silu_mul", false, true, true)             \
  X(Softmax, "softmax", true, true, true)               \
  X(Last, "last", true, true, false)                    \
  X(Scale, "scale", true, true, true)                   \
  X(Gelu, "gelu", true, true, true)                     \
  X(Softcap, "softcap", true, true, true)               \
  X(View, "view", false, false, false)

// X(Id, name, ggml_type, block_elems, block_bytes, weight, activation, in_dsl)
//   Id           the enumerator; also the type's spelling in the program text ("Q8_0")
//   name         the DSL's and the IR text's name ("q8_0")
//   ggml_type    the GGUF tensor type id (ggml's GGML_TYPE_*), -1: none (not in files)
//   block_elems  elements per block (1 for scalar types)
//   block_bytes  bytes per block
//   weight       a weight may be of this type (a GGUF tensor of it binds)
//   activation   an activation buffer may hold it
//   in_dsl       may be written in the DSL (act_q8 is made by a pass)
// Any is not a type of data: a weight declared `any` takes its file's type,
// per tensor, when driver::compile binds the program to a file's types; the
// IR holds it until then, a program never (docs/dsl.md, "Weights").
// Q8_0's and ActQ8's blocks are the kernels' (the runtime static_asserts them); a
// file type's block is also the GGUF reader's (TypeList test in tests/runtime).
// The weight types are ggml's (ggml-common.h; include/lumen/quant/blocks.h
// has their block structs); the order of rows is the enumerators' only.
#define LUMEN_DTYPES(X)                                  \
  X(F32, "f32", 0, 1, 4, true, true, true)               \
  X(F16, "f16", 1, 1, 2, true, false, true)              \
  X(Q8_0, "q8_0", 8, 32, 34, true, false, true)          \
  X(ActQ8, "act_q8", -1, 32, 40, false, true, false)     \
  X(I32, "i32", 26, 1, 4, false, true, true)             \
  X(BF16, "bf16", 30, 1, 2, true, false, true)           \
  X(Q4_0, "q4_0", 2, 32, 18, true, false, true)          \
  X(Q4_1, "q4_1", 3, 32, 20, true, false, true)          \
  X(Q5_0, "q5_0", 6, 32, 22, true, false, true)          \
  X(Q5_1, "q5_1", 7, 32, 24, true, false, true)          \
  X(Q2_K, "q2_k", 10, 256, 84, true, false, true)        \
  X(Q3_K, "q3_k", 11, 256, 110, true, false, true)       \
  X(Q4_K, "q4_k", 12, 256, 144, true, false, true)       \
  X(Q5_K, "q5_k", 13, 256, 176, true, false, true)       \
  X(Q6_K, "q6_k", 14, 256, 210, true, false, true)       \
  X(IQ4_NL, "iq4_nl", 20, 32, 18, true, false, true)     \
  X(IQ4_XS, "iq4_xs", 23, 256, 136, true, false, true)    \
  X(Any, "any", -1, 1, 0, false, false, true)

// X(Id, name): what a matmul adds to x · Wᵀ. The order is model.so's ABI
// (its kernel table stores the enumerator's value).
//   None
//   Bias          + bias[m]                      (biases concatenated like the weights)
//   Residual      + residual[n, m]               (the residual may be the output itself)
//   BiasResidual  + bias[m] + residual[n, m]
//   SiluMul       weights {gate, up}: out[n, m] = silu(gate·x) * (up·x); out cols = gate rows
#define LUMEN_EPILOGUES(X)           \
  X(None, "none")                    \
  X(Bias, "bias")                    \
  X(Residual, "residual")            \
  X(BiasResidual, "bias_residual")   \
  X(SiluMul, "silu_mul")

namespace lumen::ops {

#define LUMEN_ENUMERATOR(Id, ...) Id,
#define LUMEN_COUNT(...) +1

enum class OpId : uint8_t { LUMEN_OPS(LUMEN_ENUMERATOR) };
inline constexpr size_t kOpCount = 0 LUMEN_OPS(LUMEN_COUNT);

enum class DType : uint8_t { LUMEN_DTYPES(LUMEN_ENUMERATOR) };
inline constexpr size_t kDTypeCount = 0 LUMEN_DTYPES(LUMEN_COUNT);

enum class Epilogue : uint8_t { LUMEN_EPILOGUES(LUMEN_ENUMERATOR) };
inline constexpr size_t kEpilogueCount = 0 LUMEN_EPILOGUES(LUMEN_COUNT);

#undef LUMEN_ENUMERATOR
#undef LUMEN_COUNT

// ------------------------------------------------------------- operators
struct OpRow {
  OpId id;
  const char* id_name;  // "RmsNorm"
  const char* name;     // "rms_norm"
  bool in_dsl;
  bool in_program;
  bool row_local;
};

inline constexpr OpRow kOps[] = {
#define LUMEN_ROW(Id, name, in_dsl, in_program, row_local) {OpId::Id, #Id, name, in_dsl, in_program, row_local},
    LUMEN_OPS(LUMEN_ROW)
#undef LUMEN_ROW
};
static_assert(std::size(kOps) == kOpCount);

constexpr const OpRow& row(OpId id) { return kOps[static_cast<size_t>(id)]; }
constexpr const char* to_string(OpId id) { return row(id).name; }
constexpr const char* id_name(OpId id) { return row(id).id_name; }
std::optional<OpId> parse_op(std::string_view name);     // by `name`
std::optional<OpId> parse_op_id(std::string_view text);  // by `id_name` (the program text)

// ----------------------------------------------------------------- types
struct DTypeRow {
  DType id;
  const char* id_name;  // "Q8_0"
  const char* name;     // "q8_0"
  int ggml_type;        // -1: none
  int block_elems;
  int block_bytes;
  bool weight;
  bool activation;
  bool in_dsl;
};

inline constexpr DTypeRow kDTypes[] = {
#define LUMEN_ROW(Id, name, ggml_type, block_elems, block_bytes, weight, activation, in_dsl) \
  {DType::Id, #Id, name, ggml_type, block_elems, block_bytes, weight, activation, in_dsl},
    LUMEN_DTYPES(LUMEN_ROW)
#undef LUMEN_ROW
};
static_assert(std::size(kDTypes) == kDTypeCount);

constexpr const DTypeRow& row(DType t) { return kDTypes[static_cast<size_t>(t)]; }
constexpr const char* to_string(DType t) { return row(t).name; }
constexpr const char* id_name(DType t) { return row(t).id_name; }
std::optional<DType> parse_dtype(std::string_view name);     // by `name`
std::optional<DType> parse_dtype_id(std::string_view text);  // by `id_name` (the program text)
std::optional<DType> dtype_of_ggml(uint32_t ggml_type);      // a GGUF tensor's type, if the list has it

// Bytes of `elems` elements (a multiple of the block size).
constexpr int64_t row_bytes(DType t, int64_t elems) {
  return elems / row(t).block_elems * row(t).block_bytes;
}

// ------------------------------------------------------------- epilogues
struct EpilogueRow {
  Epilogue id;
  const char* name;
};

inline constexpr EpilogueRow kEpilogues[] = {
#define LUMEN_ROW(Id, name) {Epilogue::Id, name},
    LUMEN_EPILOGUES(LUMEN_ROW)
#undef LUMEN_ROW
};
static_assert(std::size(kEpilogues) == kEpilogueCount);

constexpr const char* to_string(Epilogue e) { return kEpilogues[static_cast<size_t>(e)].name; }
std::optional<Epilogue> parse_epilogue(std::string_view name);

}  // namespace lumen::ops
