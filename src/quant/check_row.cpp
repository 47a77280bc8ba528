// quant::check_row: the scales of a quantized row must be finite. A NaN or
// infinite fp16 scale (exponent bits all set: 0x7C00, 0xFC00, NaNs) would
// turn every value of its block, and every dot product through it, into
// NaN or infinity; the binding refuses such a tensor at load time.
#include <cstddef>
#include <cstring>

#include "lumen/common/internal_error.h"
#include "lumen/quant/quant.h"

namespace lumen::quant {
namespace {

using ops::DType;

// "NaN", "infinite", or nullptr for a finite fp16 value.
const char* non_finite(uint16_t h) {
  if ((h & 0x7C00) != 0x7C00) return nullptr;
  return (h & 0x03FF) != 0 ? "NaN" : "infinite";
}

std::string problem(int64_t block, const char* scale, const char* what) {
  return "block " + std::to_string(block) + ": scale " + scale + " is " + what;
}

// The fp16 scales of a block: their byte offsets and names.
struct ScaleFields {
  int count = 0;
  int offset[2] = {0, 0};
  const char* name[2] = {nullptr, nullptr};
};

ScaleFields scale_fields(DType t) {
  switch (t) {
    case DType::Q8_0: return {1, {offsetof(BlockQ8_0, d), 0}, {"d", nullptr}};
    case DType::Q4_0: return {1, {offsetof(BlockQ4_0, d), 0}, {"d", nullptr}};
    case DType::Q5_0: return {1, {offsetof(BlockQ5_0, d), 0}, {"d", nullptr}};
    case DType::IQ4_NL: return {1, {offsetof(BlockIQ4_NL, d), 0}, {"d", nullptr}};
    case DType::Q4_1: return {2, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}, {"d", "m"}};
    case DType::Q5_1: return {2, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}, {"d", "m"}};
    case DType::Q2_K: return {2, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}, {"d", "dmin"}};
    case DType::Q4_K: return {2, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}, {"d", "dmin"}};
    case DType::Q5_K: return {2, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}, {"d", "dmin"}};
    case DType::Q3_K: return {1, {offsetof(BlockQ3_K, d), 0}, {"d", nullptr}};
    case DType::Q6_K: return {1, {offsetof(BlockQ6_K, d), 0}, {"d", nullptr}};
    case DType::IQ4_XS: return {1, {offsetof(BlockIQ4_XS, d), 0}, {"d", nullptr}};
    case DType::F32:
    case DType::F16:
    case DType::BF16: return {};  // no scales
    case DType::ActQ8:
    case DType::Any:
    case DType::I32: break;
  }
  LUMEN_INTERNAL_ERROR("check_row: not a weight type");
}

}  // namespace

std::optional<std::string> check_row(DType t, const void* row, int64_t n) {
  const ops::DTypeRow& r = ops::row(t);
  LUMEN_ASSERT(r.weight && n % r.block_elems == 0,
               std::string("check_row: ") + r.name + " with " + std::to_string(n) + " elements");
  const ScaleFields f = scale_fields(t);
  if (f.count == 0) return std::nullopt;
  const auto* bytes = static_cast<const uint8_t*>(row);
  const int64_t nb = n / r.block_elems;
  for (int64_t b = 0; b < nb; ++b, bytes += r.block_bytes)
    for (int s = 0; s < f.count; ++s) {
      uint16_t h;
      std::memcpy(&h, bytes + f.offset[s], sizeof h);
      if (const char* what = non_finite(h)) return problem(b, f.name[s], what);
    }
  return std::nullopt;
}

}  // namespace lumen::quant
