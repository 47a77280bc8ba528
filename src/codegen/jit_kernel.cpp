// JitKernel: a generated kernel copied into executable memory of this
// process (W^X: written while read-write, then made read-execute).
#include <sys/mman.h>

#include <cstring>
#include <stdexcept>

#include "lumen/codegen/codegen.h"
#include "lumen/common/internal_error.h"

namespace lumen::codegen {

JitKernel::JitKernel(Isa isa, const program::KernelId& kernel) : JitKernel(generate_matmul_kernel(isa, kernel)) {}

JitKernel::JitKernel(const std::vector<uint8_t>& code) {
  LUMEN_ASSERT(!code.empty(), "JitKernel: empty code");
  size_ = code.size();
  mem_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem_ == MAP_FAILED) {
    mem_ = nullptr;
    throw std::runtime_error("JitKernel: cannot map memory for the kernel");
  }
  std::memcpy(mem_, code.data(), size_);
  if (mprotect(mem_, size_, PROT_READ | PROT_EXEC) != 0) {
    munmap(mem_, size_);
    mem_ = nullptr;
    throw std::runtime_error("JitKernel: cannot make the kernel executable");
  }
  fn_ = reinterpret_cast<MatMulFn>(mem_);
}

JitKernel::~JitKernel() {
  if (mem_) munmap(mem_, size_);
}

}  // namespace lumen::codegen
