// The refusal of a model.so bound to a file of other tensor types than the
// ones it was compiled for (driver::compile binds each weight to its file's
// types; a model.so serves the files of those types only).
#pragma once

#include <cstdint>

#include "lumen/gguf/gguf.h"
#include "lumen/program/program.h"

namespace lumen::runtime {

// Throws LoadError naming the first tensor whose type differs, in the
// program's weight order and then layer order: "model.so was compiled for
// 'blk.3.ffn_down.weight' as Q6_K, the file has Q4_K: recompile with
// --weights". Absent tensors are the binding's to report.
void check_weight_types(const program::Program& p, const gguf::File& file, int64_t n_layers);

}  // namespace lumen::runtime
