#include "tensor/shape.h"

#include <cstdio>
#include <cstdlib>

namespace gr {

void assert_fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "gradrun: internal error: %s:%d: assertion failed: %s\n", file, line, what);
  std::abort();
}

Shape::Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
Shape::Shape(std::span<const int64_t> dims) { assign(dims.data(), dims.size()); }

void Shape::assign(const int64_t* dims, size_t n) {
  auto listed = [&] {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  };
  if (n == 0) throw Error("shape [] has rank 0; a scalar is shape [1]");
  if (n > static_cast<size_t>(kMaxDims))
    throw Error("shape " + listed() + " has rank " + std::to_string(n) + "; at most " +
                std::to_string(kMaxDims) + " dims are supported");
  int64_t count = 1;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] <= 0)
      throw Error("shape " + listed() + ": dim " + std::to_string(i) + " is " +
                  std::to_string(dims[i]) + "; every dim must be >= 1");
    if (dims[i] > kMaxElems || count > kMaxElems / dims[i])
      throw Error("shape " + listed() + " holds more than 2^40 elements");
    count *= dims[i];
    d_[i] = dims[i];
  }
  rank_ = static_cast<int>(n);
  numel_ = count;
}

int Shape::normalize_axis(int64_t axis) const {
  int64_t a = axis < 0 ? axis + rank_ : axis;
  if (a < 0 || a >= rank_)
    throw Error("axis " + std::to_string(axis) + " is out of range for shape " + str());
  return static_cast<int>(a);
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(d_[i]);
  return s + "]";
}

Strides row_major_strides(const Shape& shape) {
  Strides st;
  int64_t acc = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    st.s[i] = acc;
    acc *= shape[i];
  }
  return st;
}

}  // namespace gr
