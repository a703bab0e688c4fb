#include "tensor/reduce.h"

namespace gr {

AxisLanes axis_lanes(const Shape& shape, int axis) {
  AxisLanes l;
  for (int d = 0; d < axis; ++d) l.outer *= shape[d];
  l.len = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) l.inner *= shape[d];
  return l;
}

double sum_ascending(const double* x, int64_t n) {
  double acc = 0.0;
  for (int64_t e = 0; e < n; ++e) acc = acc + x[e];
  return acc;
}

void sum_lanes(const double* x, AxisLanes l, double* out) {
  for (int64_t o = 0; o < l.outer; ++o) {
    double* dst = out + o * l.inner;
    for (int64_t i = 0; i < l.inner; ++i) dst[i] = 0.0;
    for (int64_t k = 0; k < l.len; ++k) {  // k outer, i inner: each lane still adds in ascending k
      const double* src = x + (o * l.len + k) * l.inner;
      for (int64_t i = 0; i < l.inner; ++i) dst[i] = dst[i] + src[i];
    }
  }
}

}  // namespace gr
