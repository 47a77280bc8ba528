// The KV cache's layout (kv_cache.h): one K and one V region per attention op
// of a layer, as wide as its K, for every layer and sequence slot.
#include "kv_cache.h"

#include <algorithm>
#include <string>

#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

KvCache::KvCache(std::span<const int64_t> widths, int64_t n_layers, int64_t n_ctx, int n_seq, KvType type)
    : n_ctx_(n_ctx), elem_bytes_(type == KvType::F16 ? 2 : 4) {
  for (const int64_t width : widths) {
    if (width < 1 || width > (int64_t{1} << 20)) throw LoadError("KV row width " + std::to_string(width) + " out of range");
    int64_t bytes = 0;
    if (__builtin_mul_overflow(2 * width * elem_bytes_, n_ctx_, &bytes) ||
        __builtin_add_overflow(layer_bytes_, bytes, &layer_bytes_))
      throw LoadError("the KV cache size overflows");
    slot_offset_.push_back(layer_bytes_ - bytes);
    width_.push_back(width);
  }
  int64_t kv_bytes = 0;
  if (__builtin_mul_overflow(n_layers, layer_bytes_, &slot_bytes_) ||
      __builtin_mul_overflow(slot_bytes_, static_cast<int64_t>(n_seq), &kv_bytes))
    throw LoadError("the KV cache size overflows");
  memory_ = PageBuffer(static_cast<size_t>(std::max<int64_t>(kv_bytes, 1)));
  bytes_ = static_cast<uint64_t>(kv_bytes);
}

}  // namespace lumen::runtime
