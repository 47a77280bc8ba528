// Which packed format a weight type runs in on an ISA: the one place that
// says it. The schedule names each matmul's kernels by it (program::KernelId's
// `weight`), the runtime packs each weight in it at load time, and codegen
// generates a kernel per format it answers.
#pragma once

#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"

namespace lumen {

// The packed layouts the generated kernels stream (packed_q8_0.h,
// packed_kquant.h: the k-quants' GEMV and batch kernels).
inline constexpr ops::DType kPackedFormats[] = {ops::DType::Q8_0, ops::DType::Q4_K, ops::DType::Q5_K,
                                                ops::DType::Q6_K};

// Whether `format` is one of kPackedFormats.
constexpr bool is_packed_format(ops::DType format) {
  for (ops::DType f : kPackedFormats)
    if (f == format) return true;
  return false;
}

// The packed format in which a matmul weight of type `weight` runs on `isa`:
// the type's own layout where it has native kernels there, else Q8_0 (the
// weight is converted to Q8_0 once, at load time).
ops::DType packed_format(ops::DType weight, Isa isa);

}  // namespace lumen
