// arena.h — the tape's bump allocator for values and gradients.
//
// Chunks are never freed while the tape lives; rewind() moves the bump pointer back. A minibatch
// loop that records the same graph every episode therefore reuses the same chunks: after the
// first episode it allocates nothing (docs/design.md §4).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace gr {

class Arena {
 public:
  // A position: ordered, so "allocated at or after p" is `q >= p`.
  struct Pos {
    int32_t chunk = 0;
    int64_t used = 0;
    friend auto operator<=>(const Pos&, const Pos&) = default;
  };

  // n doubles, 64-byte aligned, uninitialized.
  double* alloc(int64_t n);
  Pos pos() const { return {cur_, used_}; }
  void rewind(Pos p) { cur_ = p.chunk, used_ = p.used; }
  // How many chunks were obtained from the heap so far (the zero-allocation tests read it).
  int64_t heap_allocations() const { return static_cast<int64_t>(chunks_.size()); }

 private:
  struct Free {
    void operator()(double* p) const { std::free(p); }
  };
  struct Chunk {
    std::unique_ptr<double[], Free> data;
    int64_t cap = 0;
  };
  std::vector<Chunk> chunks_;
  int32_t cur_ = 0;
  int64_t used_ = 0;
};

}  // namespace gr
