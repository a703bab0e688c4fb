// reduce.h — the CPU reductions: gr_sum (kernels/gr_reduce.h, the one definition of the order) over
// a whole tensor or over each lane of an axis.
//
// Axis reductions see a tensor as lanes: shape = [outer, len, inner] around the axis; lane (o, i)
// holds elements x[(o*len + k)*inner + i] for k = 0..len-1: a gr_sum with stride inner.
#pragma once
#include <cstdint>

#include "tensor/shape.h"

namespace gr {

struct AxisLanes {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisLanes axis_lanes(const Shape& shape, int axis);

// acc = 0; acc = acc + x[e] for e ascending, in R (double, or float over floats stored in doubles).
template <class R = double>
R sum_ascending(const double* x, int64_t n);

// out[o*inner + i] = Σ_{k ascending} x[(o*len + k)*inner + i] in R, each lane from 0.
template <class R = double>
void sum_lanes(const double* x, AxisLanes lanes, double* out);

}  // namespace gr
