// The packed weight format of each weight type (see target/weight_formats.h).
#include "lumen/target/weight_formats.h"

namespace lumen {

ops::DType packed_format(ops::DType /*weight*/, Isa /*isa*/) { return ops::DType::Q8_0; }

}  // namespace lumen
