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

template <class R>
R sum_ascending(const double* x, int64_t n) {
  return gr_sum_of<R>(x, n, 1);
}

template <class R>
void sum_lanes(const double* x, AxisLanes l, double* out) {
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) out[o * l.inner + i] = gr_sum_of<R>(x + o * l.len * l.inner + i, l.len, l.inner);
}

template double sum_ascending<double>(const double*, int64_t);
template float sum_ascending<float>(const double*, int64_t);
template void sum_lanes<double>(const double*, AxisLanes, double*);
template void sum_lanes<float>(const double*, AxisLanes, double*);

}  // namespace gr
