// tensor.h — an owned f64 tensor (shape + contiguous row-major storage) and borrowed views.
#pragma once
#include <span>
#include <vector>

#include "tensor/shape.h"

namespace gr {

// A borrowed, read-only view: valid as long as its owner keeps the storage.
struct ConstTensorView {
  Shape shape;
  const double* data = nullptr;
  std::span<const double> values() const { return {data, static_cast<size_t>(shape.numel())}; }
  double operator[](int64_t i) const { return data[i]; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape);  // zeros
  Tensor(Shape shape, std::vector<double> values);  // throws when the count differs
  static Tensor scalar(double v) { return Tensor(Shape{1}, {v}); }

  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  double* data() { return data_.data(); }
  const double* data() const { return data_.data(); }
  std::span<double> values() { return data_; }
  std::span<const double> values() const { return data_; }
  double& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  double operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  ConstTensorView view() const { return {shape_, data_.data()}; }

 private:
  Shape shape_;
  std::vector<double> data_;
};

}  // namespace gr
