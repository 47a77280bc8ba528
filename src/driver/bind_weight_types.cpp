// bind_weight_types(): each weight declaration takes its tensors' types from
// the file's (see driver/driver.h).
#include <algorithm>
#include <optional>

#include "lumen/driver/driver.h"

namespace lumen::driver {

namespace {

using ops::DType;

// The type a weight has where its tensor is absent or no file is given: the
// declared one, or Q8_0 for `any` (what lumenc compiles without --weights).
DType default_type(const ir::Weight& w) { return w.dtype == DType::Any ? DType::Q8_0 : w.dtype; }

struct Found {
  std::string name;  // the tensor's name (or the fallback's, when that is what the file has)
  std::optional<DType> type;
};

Found find(const ir::Weight& w, int64_t layer, const WeightTypes& types) {
  Found f{program::layer_tensor_name(w.gguf_name, layer), std::nullopt};
  if (auto it = types.find(f.name); it != types.end()) f.type = it->second;
  else if (!w.fallback.empty()) {
    const std::string fallback = program::layer_tensor_name(w.fallback, layer);
    if (auto fb = types.find(fallback); fb != types.end()) f = {fallback, fb->second};
  }
  return f;
}

}  // namespace

void bind_weight_types(ir::Module& m, const WeightTypes& types) {
  if (types.empty()) {
    for (ir::Weight& w : m.weights)
      if (w.types.empty()) w.types = {default_type(w)};
    return;
  }
  // The file's layers: those of the first required layer weight, from layer 0 up.
  int64_t n_layers = 0;
  for (const ir::Weight& w : m.weights) {
    if (!w.per_layer || w.optional) continue;
    while (find(w, n_layers, types).type) ++n_layers;
    break;
  }
  for (ir::Weight& w : m.weights) {
    std::vector<DType> bound;
    const int64_t count = w.per_layer ? n_layers : 1;
    for (int64_t layer = 0; layer < count; ++layer) {
      const Found f = find(w, layer, types);
      if (!f.type && !w.optional)
        throw Error("the file has no tensor '" + f.name + "' (weight '" + w.name + "')");
      if (f.type && w.dtype != DType::Any && *f.type != w.dtype)
        throw Error("tensor '" + f.name + "' is " + ops::to_string(*f.type) + " in the file, but the program declares '" +
                    w.name + "' " + ops::to_string(w.dtype));
      bound.push_back(f.type.value_or(default_type(w)));
    }
    // One type for every layer when they agree: a Q8_0 file's program is the one compiled without a file.
    if (bound.empty() || std::all_of(bound.begin(), bound.end(), [&](DType t) { return t == bound[0]; }))
      bound = {bound.empty() ? default_type(w) : bound[0]};
    w.types = std::move(bound);
  }
}

}  // namespace lumen::driver
