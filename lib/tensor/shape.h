// shape.h — a tensor shape held inline (no heap), checked at construction.
//
// Rules: rank 1..kMaxDims, every dim ≥ 1 (a zero-size tensor has no meaning in a training graph and
// would only hide bugs), element count ≤ kMaxElems. Scalars are shape [1]. Violations throw
// gr::Error with a message that names the offending dims; the tape turns that into poisoning.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "tensor/error.h"

namespace gr {

inline constexpr int kMaxDims = 8;
inline constexpr int64_t kMaxElems = int64_t(1) << 40;  // 8 TiB of f64: far past any real tensor

class Shape {
 public:
  Shape() = default;  // rank 0: only a placeholder, never a valid tensor shape
  Shape(std::initializer_list<int64_t> dims);  // checked
  explicit Shape(std::span<const int64_t> dims);  // checked

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t numel() const { return numel_; }
  std::span<const int64_t> dims() const { return {d_, static_cast<size_t>(rank_)}; }
  // A negative axis counts from the end; throws when out of range.
  int normalize_axis(int64_t axis) const;
  std::string str() const;  // "[2, 3]"

  friend bool operator==(const Shape& x, const Shape& y) {
    if (x.rank_ != y.rank_) return false;
    for (int i = 0; i < x.rank_; ++i)
      if (x.d_[i] != y.d_[i]) return false;
    return true;
  }

 private:
  void assign(const int64_t* dims, size_t n);
  int64_t d_[kMaxDims] = {};
  int rank_ = 0;
  int64_t numel_ = 0;
};

// Row-major strides of a shape (in elements).
struct Strides {
  int64_t s[kMaxDims] = {};
};
Strides row_major_strides(const Shape& shape);

}  // namespace gr

// Internal invariant check: a bug in gradrun, never a user error. Aborts with file/line.
#define GR_ASSERT(cond)                                                   \
  do {                                                                    \
    if (!(cond)) ::gr::assert_fail(#cond, __FILE__, __LINE__);            \
  } while (0)
namespace gr {
[[noreturn]] void assert_fail(const char* what, const char* file, int line);
}
