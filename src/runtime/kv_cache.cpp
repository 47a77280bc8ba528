// The KV cache's layout (kv_cache.h): one K and one V region per attention op
// of a layer, as wide as its K, for every layer and sequence slot.
#include "kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "lumen/common/internal_error.h"
#include "lumen/common/numeric.h"
#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

int64_t KvCache::bytes_of(int64_t elems) const {
  switch (type_) {
    case KvType::F16: return elems * 2;
    case KvType::F32: return elems * 4;
    case KvType::Q8_0: return elems / kQ8Block * static_cast<int64_t>(sizeof(BlockQ8_0));
  }
  LUMEN_INTERNAL_ERROR("KV cache type");
}

KvCache::KvCache(std::span<const int64_t> widths, int64_t n_layers, int64_t n_ctx, int n_seq, KvType type)
    : type_(type), n_ctx_(n_ctx), n_layers_(n_layers) {
  for (const int64_t width : widths) {
    if (width < 1 || width > (int64_t{1} << 20)) throw LoadError("KV row width " + std::to_string(width) + " out of range");
    if (type == KvType::Q8_0 && width % kQ8Block != 0)
      throw LoadError("--kv q8_0 needs K and V rows that are whole blocks of 32; an attention op's are " +
                      std::to_string(width) + " wide");
    int64_t bytes = 0;
    if (__builtin_mul_overflow(2 * bytes_of(width), n_ctx_, &bytes) ||
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
  // layer_bytes_ holds n_ctx positions of every op's K and V; no overflow (checked above).
  position_bytes_ = n_ctx_ > 0 ? static_cast<uint64_t>(n_layers_ * (layer_bytes_ / n_ctx_)) : 0;
}

void KvCache::regions(int seq, int64_t n, const std::function<void(uint8_t*, size_t)>& f) const {
  for (int64_t layer = 0; layer < n_layers_; ++layer)
    for (size_t op = 0; op < width_.size(); ++op) {
      const size_t bytes = static_cast<size_t>(n * row_bytes(static_cast<int>(op)));
      f(k(layer, static_cast<int>(op), seq), bytes);
      f(v(layer, static_cast<int>(op), seq), bytes);
    }
}

void KvCache::copy(int from, int to, int64_t n) {
  if (from == to || n <= 0) return;
  const int64_t delta = static_cast<int64_t>(to - from) * slot_bytes_;
  regions(from, n, [&](uint8_t* src, size_t bytes) { std::memcpy(src + delta, src, bytes); });
}

void KvCache::save(int seq, int64_t n, std::span<uint8_t> out) const {
  LUMEN_ASSERT(out.size() == static_cast<size_t>(n) * position_bytes_, "KV save buffer size");
  size_t at = 0;
  regions(seq, n, [&](uint8_t* src, size_t bytes) {
    std::memcpy(out.data() + at, src, bytes);
    at += bytes;
  });
}

void KvCache::load(int seq, int64_t n, std::span<const uint8_t> in, int64_t saved) {
  LUMEN_ASSERT(n <= saved && in.size() == static_cast<size_t>(saved) * position_bytes_, "KV load buffer size");
  // Each region was saved `saved` rows long; its first n rows come back.
  size_t at = 0;
  regions(seq, n, [&](uint8_t* dst, size_t bytes) {
    std::memcpy(dst, in.data() + at, bytes);
    at += n > 0 ? bytes / static_cast<size_t>(n) * static_cast<size_t>(saved) : 0;
  });
}

}  // namespace lumen::runtime
