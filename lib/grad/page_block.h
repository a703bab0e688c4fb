// page_block.h — a block of doubles in pages of its own (mmap), for the tape's large unchanging
// leaves: big consts and frozen parameters. Destroying it unmaps the pages, so the memory goes back
// to the system at once; a malloc'd block may stay in the allocator's heap, and a block in the
// tape's arena is never freed while the tape lives (docs/use-a-model.md "Host copies on devices").
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace gr {

class PageBlock {
 public:
  PageBlock() = default;
  explicit PageBlock(int64_t n) : bytes_(static_cast<size_t>(n) * sizeof(double)) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<double*>(p);  // page-aligned, so 64-byte aligned like the arena's blocks
  }
  PageBlock(PageBlock&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PageBlock& operator=(PageBlock&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  PageBlock(const PageBlock&) = delete;
  PageBlock& operator=(const PageBlock&) = delete;
  ~PageBlock() { release(); }

  double* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (data_) ::munmap(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  double* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace gr
