// The KV cache: its layout and its memory. Sequence slot after sequence slot;
// within one, per layer, per attention op of the layer section (its op slot),
// K then V, n_ctx rows of that op's K width each, of f16 or f32 elements or
// of Q8_0 blocks (BlockQ8_0, 34 bytes per 32 elements).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lumen/runtime/session.h"
#include "lumen/target/page_buffer.h"

namespace lumen::runtime {

class KvCache {
 public:
  KvCache() = default;
  // widths: the K row width of each attention op of a layer, in op order.
  // Throws LoadError for a width out of range (for Q8_0, not a multiple of
  // 32) or a size that overflows.
  KvCache(std::span<const int64_t> widths, int64_t n_layers, int64_t n_ctx, int n_seq, KvType type);

  uint8_t* k(int64_t layer, int op_slot, int seq) const {
    return memory_.data() + static_cast<size_t>(seq * slot_bytes_ + layer * layer_bytes_ +
                                                slot_offset_[static_cast<size_t>(op_slot)]);
  }
  uint8_t* v(int64_t layer, int op_slot, int seq) const {
    return k(layer, op_slot, seq) + static_cast<size_t>(n_ctx_ * row_bytes(op_slot));
  }
  KvType type() const { return type_; }
  int64_t width(int op_slot) const { return width_[static_cast<size_t>(op_slot)]; }
  // The bytes of `elems` consecutive elements of a row (for Q8_0 a multiple of 32).
  int64_t bytes_of(int64_t elems) const;
  // The bytes of one K (or V) row of an op slot: one position.
  int64_t row_bytes(int op_slot) const { return bytes_of(width(op_slot)); }
  uint64_t bytes() const { return bytes_; }

  // The bytes one position takes in one slot: every layer's K and V rows.
  uint64_t position_bytes() const { return position_bytes_; }
  // Prefix operations, byte for byte (the prefix cache): the first n
  // positions of slot `from` into slot `to`; of slot `seq` into `out`
  // (n * position_bytes() bytes, in the order regions() walks); the first n
  // of the `saved` positions such a buffer holds back into slot `seq`.
  void copy(int from, int to, int64_t n);
  void save(int seq, int64_t n, std::span<uint8_t> out) const;
  void load(int seq, int64_t n, std::span<const uint8_t> in, int64_t saved);

 private:
  // Calls f(address, bytes) for the K and V rows of the first n positions
  // of slot `seq`, layer by layer, op by op.
  void regions(int seq, int64_t n, const std::function<void(uint8_t*, size_t)>& f) const;

  std::vector<int64_t> width_, slot_offset_;
  KvType type_ = KvType::F16;
  int64_t n_ctx_ = 0, n_layers_ = 0, layer_bytes_ = 0, slot_bytes_ = 0;
  uint64_t position_bytes_ = 0;
  uint64_t bytes_ = 0;
  PageBuffer memory_;
};

}  // namespace lumen::runtime
