// Which packed format the matmul kernels stream for a weight of each type on
// each ISA: the one place that decides it (the binding packs into it, the
// pack cache keys on it, the kernels read it).
#pragma once

#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"

namespace lumen {

enum class PackedFormat : uint8_t {
  Q8_0,  // target/packed_q8_0.h; a weight of another type is requantized to Q8_0 at load time
};
const char* to_string(PackedFormat f);  // "q8_0"

// The packed format of a matmul weight of type t (a weight type of the list) on isa.
PackedFormat packed_format(ops::DType t, Isa isa);

}  // namespace lumen
