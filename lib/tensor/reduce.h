// reduce.h — the CPU reduction loops, in the §5 orders (ascending index, accumulator from 0.0).
//
// Axis reductions see a tensor as lanes: shape = [outer, len, inner] around the axis; lane (o, i)
// holds elements x[(o*len + k)*inner + i] for k = 0..len-1. Every lane accumulates in ascending k;
// the loops may interleave lanes (vectorize over i) because that never reorders one lane's sum.
#pragma once
#include <cstdint>

#include "tensor/shape.h"

namespace gr {

struct AxisLanes {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisLanes axis_lanes(const Shape& shape, int axis);

// acc = 0.0; acc = acc + x[e] for e ascending.
double sum_ascending(const double* x, int64_t n);

// out[o*inner + i] = Σ_{k ascending} x[(o*len + k)*inner + i], each lane from 0.0.
void sum_lanes(const double* x, AxisLanes lanes, double* out);

}  // namespace gr
