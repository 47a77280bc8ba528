// The packed weight format of each weight type on each ISA: the layout the
// load step packs a tensor into and the matmul kernels of that format read.
// The schedule gives a matmul one set of kernels per distinct format among
// its layers, and the runtime picks a layer's set by its weight's format:
// both ask this one function.
#pragma once

#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"

namespace lumen {

// Every weight type is packed to Q8_0 today (target/packed_q8_0.h).
ops::DType packed_format(ops::DType weight, Isa isa);

}  // namespace lumen
