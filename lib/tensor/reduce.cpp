#include "tensor/reduce.h"

#include "gr_reduce.h"

namespace gr {

AxisLanes axis_lanes(const Shape& shape, int axis) {
  AxisLanes l;
  for (int d = 0; d < axis; ++d) l.outer *= shape[d];
  l.len = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) l.inner *= shape[d];
  return l;
}

double sum_ascending(const double* x, int64_t n) { return gr_sum(x, n, 1); }

void sum_lanes(const double* x, AxisLanes l, double* out) {
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) out[o * l.inner + i] = gr_sum(x + o * l.len * l.inner + i, l.len, l.inner);
}

}  // namespace gr
