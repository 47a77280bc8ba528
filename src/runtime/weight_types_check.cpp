// check_weight_types(): the file's tensor types against the program's (see
// runtime/weight_types_check.h).
#include "lumen/runtime/weight_types_check.h"

#include <string>

#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

void check_weight_types(const program::Program& p, const gguf::File& file, int64_t n_layers) {
  for (const program::Weight& w : p.weights) {
    if (w.per_layer && w.dtypes.size() > 1 && static_cast<int64_t>(w.dtypes.size()) != n_layers)
      throw LoadError("model.so was compiled for " + std::to_string(w.dtypes.size()) + " layers of '" + w.gguf_name +
                      "', the file has " + std::to_string(n_layers) + ": recompile with --weights");
    for (int64_t layer = 0; layer < (w.per_layer ? n_layers : 1); ++layer) {
      const gguf::TensorInfo* t = file.find_tensor(program::layer_tensor_name(w.gguf_name, layer));
      if (t == nullptr && !w.fallback.empty()) t = file.find_tensor(program::layer_tensor_name(w.fallback, layer));
      if (t == nullptr) continue;
      const ops::DType compiled = *w.type_of_layer(layer);
      const std::optional<ops::DType> has = ops::dtype_of_ggml(static_cast<uint32_t>(t->type));
      if (has == compiled) continue;
      throw LoadError("model.so was compiled for '" + t->name + "' as " + ops::id_name(compiled) + ", the file has " +
                      std::string(gguf::to_string(t->type)) + ": recompile with --weights");
    }
  }
}

}  // namespace lumen::runtime
