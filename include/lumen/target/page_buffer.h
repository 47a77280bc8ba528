#pragma once
// Zero-filled memory straight from mmap. Large read-mostly buffers (packed
// weights, the bandwidth probe) ask for transparent huge pages: on 2 MiB
// pages a plain read loop ran 8-13% faster, decode faster and steadier, and
// packing 4x faster (docs/performance.md).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

namespace lumen {

class PageBuffer {
 public:
  enum class Pages { Normal, Huge };

  PageBuffer() = default;
  struct OutOfMemory : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  // Throws OutOfMemory when the memory cannot be mapped.
  explicit PageBuffer(size_t bytes, Pages pages = Pages::Normal);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept
      : map_(std::exchange(o.map_, nullptr)), map_size_(std::exchange(o.map_size_, 0)),
        data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(map_size_, o.map_size_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;  // the whole mapping, which may start before data_ (huge-page alignment)
  size_t map_size_ = 0;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace lumen
