// Shared by the runtime tests: the hand-written qwen2 program with kernels
// generated in-process (no model.so needed), and reference file helpers.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/runtime/compiled_model.h"
#include "support/qwen2_program.h"
#include "support/test_files.h"

namespace lumen::runtime::testing {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using test_support::tiny_gguf;
using test_data::qwen2_program;
using test_data::qwen2_program_path;

// codegen::reference_matmul behind the MatMulFn signature (no context pointer,
// so one instantiation per ISA and epilogue).
template <Isa kIsa, program::Epilogue kEpilogue>
void reference_kernel(const MatMulArgs* args) {
  codegen::reference_matmul(kIsa, kEpilogue, *args);
}

template <Isa kIsa>
MatMulFn reference_kernel_for(program::Epilogue e) {
  using program::Epilogue;
  switch (e) {
    case Epilogue::None: return reference_kernel<kIsa, Epilogue::None>;
    case Epilogue::Bias: return reference_kernel<kIsa, Epilogue::Bias>;
    case Epilogue::Residual: return reference_kernel<kIsa, Epilogue::Residual>;
    case Epilogue::BiasResidual: return reference_kernel<kIsa, Epilogue::BiasResidual>;
    case Epilogue::SiluMul: return reference_kernel<kIsa, Epilogue::SiluMul>;
  }
  return nullptr;
}

inline MatMulFn reference_kernel_for(Isa isa, program::Epilogue e) {
  switch (isa) {
    case Isa::Avx512Vnni: return reference_kernel_for<Isa::Avx512Vnni>(e);
    case Isa::Avx512: return reference_kernel_for<Isa::Avx512>(e);
    case Isa::AvxVnni: return reference_kernel_for<Isa::AvxVnni>(e);
    case Isa::Avx2: return reference_kernel_for<Isa::Avx2>(e);
  }
  return nullptr;
}

// The program plus JIT kernels for every name its schedules use (or the
// scalar reference kernels, to tell kernel bugs from runtime bugs).
inline std::shared_ptr<const CompiledModel> in_process_model(const program::Program& program, Isa isa,
                                                             bool reference = false) {
  auto model = std::make_shared<CompiledModel>();
  model->program = program;
  model->isa = isa;
  model->target = to_string(isa);
  model->required_cpu = required_features(isa);
  auto kernels = std::make_shared<std::vector<std::unique_ptr<codegen::JitKernel>>>();
  for (const auto* ops : {&program.pre, &program.layer, &program.post})
    for (const program::Op& op : *ops) {
      if (op.kind != ::lumen::ops::OpId::MatMul) continue;
      for (const program::KernelId& kernel : op.schedule.kernels()) {
        if (model->kernels.count(kernel) != 0) continue;
        if (reference) {
          model->kernels[kernel] = reference_kernel_for(isa, op.epilogue);
          continue;
        }
        kernels->push_back(std::make_unique<codegen::JitKernel>(isa, kernel));
        model->kernels[kernel] = kernels->back()->fn();
      }
    }
  model->code_owner = kernels;
  return model;
}

// Deterministic token ids below the vocabulary size (a fixed LCG per seed).
inline std::vector<int32_t> tokens(int64_t count, uint32_t seed, int64_t n_vocab) {
  std::vector<int32_t> out;
  uint32_t x = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    out.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab)));
  }
  return out;
}


inline std::shared_ptr<const CompiledModel> qwen2_model(bool reference = false) {
  return in_process_model(qwen2_program(best_isa(cpu_features())), best_isa(cpu_features()), reference);
}

}  // namespace lumen::runtime::testing
