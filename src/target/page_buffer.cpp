#include "lumen/target/page_buffer.h"

#include <sys/mman.h>

#include <string>


namespace lumen {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
}

PageBuffer::PageBuffer(size_t bytes, Pages pages) : size_(bytes) {
  if (bytes == 0) return;
  const bool huge = pages == Pages::Huge && bytes >= kHugePage;
  map_size_ = huge ? bytes + kHugePage : bytes;
  void* p = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw PageBuffer::OutOfMemory("out of memory allocating " + std::to_string(bytes) + " bytes");
  map_ = p;
  auto addr = reinterpret_cast<uintptr_t>(p);
  if (huge) {
    addr = (addr + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
    // Advice only: where the kernel has no huge pages to give, 4 KiB pages serve.
    madvise(reinterpret_cast<void*>(addr), bytes, MADV_HUGEPAGE);
  }
  data_ = reinterpret_cast<uint8_t*>(addr);
}

PageBuffer::~PageBuffer() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

}  // namespace lumen
