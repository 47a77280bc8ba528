// What the generated-kernel tests share: the ISAs this CPU runs, every
// epilogue, the output poison, and one JIT kernel per (ISA, id).
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <memory>
#include <utility>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/ops/op_list.h"
#include "lumen/program/program.h"
#include "lumen/target/isa.h"

namespace lumen::codegen::test {

// A NaN with a payload the kernels never produce: outputs start as it, so a
// write outside the rows shows.
inline constexpr uint32_t kPoisonBits = 0x7FC0DEADu;

// Every epilogue of the op list, in its order.
inline const std::vector<program::Epilogue> kAllEpilogues = [] {
  std::vector<program::Epilogue> all;
  for (const ops::EpilogueRow& row : ops::kEpilogues) all.push_back(row.id);
  return all;
}();

// The ISAs whose features this CPU has: the kernels of each run natively.
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> isas;
  for (Isa isa : kAllIsas)
    if ((cpu_features() & required_features(isa)) == required_features(isa)) isas.push_back(isa);
  return isas;
}

// The kernel `id` for `isa`, generated once through the entry point model.so
// emission uses, tuned for this CPU as lumen-run's are (or for `tune`).
inline const JitKernel& kernel(Isa isa, const program::KernelId& id, CpuTune tune) {
  static std::map<std::tuple<Isa, program::KernelId, CpuTune>, std::unique_ptr<JitKernel>> cache;
  auto& slot = cache[{isa, id, tune}];
  if (!slot) slot = std::make_unique<JitKernel>(generate_matmul_kernel(isa, id, tune));
  return *slot;
}
inline const JitKernel& kernel(Isa isa, const program::KernelId& id) { return kernel(isa, id, host_cpu_tune()); }

}  // namespace lumen::codegen::test
