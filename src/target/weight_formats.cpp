// The packed format per (weight type, ISA) (see target/weight_formats.h).
// Every type streams as Q8_0 for now: Q8_0 as it is in the file, the others
// dequantized and requantized to Q8_0 (ggml's reference quantizer) at load.
#include "lumen/target/weight_formats.h"

#include "lumen/common/internal_error.h"

namespace lumen {

const char* to_string(PackedFormat f) {
  switch (f) {
    case PackedFormat::Q8_0: return "q8_0";
  }
  return "?";
}

PackedFormat packed_format(ops::DType t, Isa) {
  LUMEN_ASSERT(ops::row(t).weight, std::string("packed_format: ") + ops::to_string(t) + " is not a weight type");
  return PackedFormat::Q8_0;
}

}  // namespace lumen
