#include "grad/arena.h"

#include <algorithm>
#include <new>

namespace gr {

namespace {
constexpr int64_t kAlign = 8;  // doubles: 64 bytes, one cache line / AVX-512 vector
constexpr int64_t kMinChunk = int64_t(1) << 16;
}  // namespace

double* Arena::alloc(int64_t n) {
  const int64_t need = std::max<int64_t>((n + kAlign - 1) / kAlign * kAlign, kAlign);
  // Walk forward to the first chunk with room; a chunk too small for this request is skipped
  // (the same sequence of requests skips the same chunks, so replays stay allocation-free).
  while (cur_ < static_cast<int32_t>(chunks_.size())) {
    Chunk& c = chunks_[cur_];
    if (c.cap - used_ >= need) {
      double* p = c.data.get() + used_;
      used_ += need;
      return p;
    }
    if (used_ == 0 && c.cap < need) break;  // an empty chunk that is too small: insert a bigger one
    ++cur_;
    used_ = 0;
  }
  const int64_t prev = chunks_.empty() ? 0 : chunks_.back().cap;
  const int64_t cap = std::max({need, kMinChunk, prev * 2});
  void* mem = std::aligned_alloc(64, static_cast<size_t>(cap) * sizeof(double));
  if (!mem) throw std::bad_alloc();
  chunks_.insert(chunks_.begin() + cur_, Chunk{std::unique_ptr<double[], Free>(static_cast<double*>(mem)), cap});
  used_ = need;
  return chunks_[cur_].data.get();
}

}  // namespace gr
