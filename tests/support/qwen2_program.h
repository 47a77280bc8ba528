// The hand-written qwen2 program of tests/data, for the tests that run or
// emit it without the compiler's front end.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "lumen/passes/passes.h"
#include "lumen/program/program.h"

namespace lumen::test_data {

inline std::string qwen2_program_path() { return LUMEN_SOURCE_DIR "/tests/data/qwen2.program"; }

// The program as written (scheduled for AVX-512 VNNI, which
// tests/passes/pipeline_test.cpp checks) with the prefill kernels the
// schedule picks for `isa`, whose registers may not hold AVX-512's tiles.
inline program::Program qwen2_program(Isa isa) {
  std::ifstream in(qwen2_program_path(), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  program::Program p = program::deserialize(text.str());
  for (auto* ops : {&p.pre, &p.layer, &p.post})
    for (program::Op& op : *ops)
      if (op.kind == ops::OpId::MatMul) for (program::MatMulKernels& f : op.schedule.formats) f.prefill_kernel = passes::prefill_kernel(isa, op.epilogue);
  return p;
}

}  // namespace lumen::test_data
