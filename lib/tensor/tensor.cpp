#include "tensor/tensor.h"

#include <string>

namespace gr {

Tensor::Tensor(Shape shape) : shape_(shape), data_(static_cast<size_t>(shape.numel()), 0.0) {}

Tensor::Tensor(Shape shape, std::vector<double> values) : shape_(shape), data_(std::move(values)) {
  if (static_cast<int64_t>(data_.size()) != shape_.numel())
    throw Error("tensor of shape " + shape_.str() + " needs " + std::to_string(shape_.numel()) +
                " values, got " + std::to_string(data_.size()));
}

}  // namespace gr
