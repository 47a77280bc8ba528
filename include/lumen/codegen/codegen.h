// Code generation: matmul kernels written with xbyak, and the emission of a
// scheduled program plus its kernels into model.so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/target/kernel_abi.h"
#include "lumen/program/program.h"
#include "lumen/target/cpu_tune.h"

namespace lumen::codegen {

// Machine code of one kernel, position independent, entry at offset 0, with
// the signature lumen::MatMulFn. Throws InternalError for a kernel that is not
// program::is_valid (schedules only name valid ones). `tune` changes the
// code's speed on a CPU, never its results (cpu_tune.h).
std::vector<uint8_t> generate_matmul_kernel(Isa isa, const program::KernelId& kernel,
                                            CpuTune tune = CpuTune::Generic);

// A kernel generated into executable memory of this process (tests, benches).
class JitKernel {
 public:
  JitKernel(Isa isa, const program::KernelId& kernel);
  explicit JitKernel(const std::vector<uint8_t>& code);  // code from generate_matmul_kernel
  ~JitKernel();
  JitKernel(const JitKernel&) = delete;
  JitKernel& operator=(const JitKernel&) = delete;
  MatMulFn fn() const { return fn_; }
  size_t code_size() const { return size_; }

 private:
  void* mem_ = nullptr;
  size_t size_ = 0;
  MatMulFn fn_ = nullptr;
};

// Scalar reference for a kernel call over the packed format: the oracle the
// generated kernels are tested against, and a fallback for bring-up.
void reference_matmul(Isa isa, program::Epilogue epilogue, const MatMulArgs& args);

// Writes model.so for `program`: every kernel its schedules name, generated
// for `isa` and `tune`, plus the serialized program, behind the C ABI of
// model_abi.h. Throws std::runtime_error (one-line message) when the
// toolchain step fails.
void emit_model_so(const program::Program& program, Isa isa, CpuTune tune, const std::string& out_path);

}  // namespace lumen::codegen
