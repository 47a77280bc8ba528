// Which types the quant library converts.
#include "lumen/quant/quant.h"

namespace lumen::quant {

bool is_weight_type(ops::DType t) { return ops::row(t).weight; }

}  // namespace lumen::quant
