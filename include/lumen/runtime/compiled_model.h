// A compiled model as the runtime sees it: the scheduled program, the matmul
// kernels it names, and the ISA they were generated for. It comes from a
// model.so (dlopen, C ABI of model_abi.h) or is assembled in-process by tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "lumen/target/kernel_abi.h"
#include "lumen/program/program.h"

namespace lumen::runtime {

// Any refusal to load or bind a model: one line naming the culprit.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CompiledModel {
  program::Program program;
  Isa isa = Isa::Avx2;                    // packed weight format and kernel target
  uint64_t required_cpu = 0;              // lumen::CpuFeature mask the kernels need
  std::string target = "avx2";            // to_string(isa), as model.so states it
  std::string compiler;                   // "lumenc 0.1.0", for stats
  std::map<program::KernelId, MatMulFn> kernels;  // entry points of the kernels the schedules name
  std::shared_ptr<void> code_owner;       // keeps the kernels' code mapped (dlopen handle, JIT)
};

// Loads model.so: checks the ABI version first, then the CPU features the
// kernels need, then parses the program. Throws LoadError.
CompiledModel load_model_so(const std::string& path);

// Throws LoadError naming the features of `required` that `available` lacks.
void check_cpu_features(uint64_t required, uint64_t available, const std::string& target);

}  // namespace lumen::runtime
