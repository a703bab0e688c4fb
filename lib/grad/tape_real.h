// tape_real.h — what an f32 tape (Tape(DType::F32)) needs beyond the f64 tape's loops: its values
// and gradients are floats held exactly in doubles, so an op converts each element it reads to
// float (exact), computes with the same kernels/ definitions in float, and stores the float result
// back (exact). Kernels that take pointers (lanes, rows, the matmul) get float working copies.
#pragma once
#include <cstdint>
#include <vector>

#include "gr_device.h"
#include "gr_ops_scalar.h"
#include "grad/tape.h"
#include "tensor/matmul.h"

namespace gr {

// slot = slot + c in R (gr_accumulate), the slot stored as double.
template <class R>
inline void accumulate_into(double& slot, R c) {
  slot = static_cast<double>(gr_accumulate(static_cast<R>(slot), c));
}

// The first contribution to a fresh slot (Tape::grad_slot): +0 + c in R, the slot not read.
template <class R>
inline void first_into(double& slot, R c) {
  slot = static_cast<double>(gr_accumulate(R(0), c));
}

// n elements of a strided lane to a contiguous float copy, and back.
inline void narrow_lane(const double* src, int64_t n, int64_t stride, float* dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(src[k * stride]);
}
inline void widen_lane(const float* src, int64_t n, double* dst, int64_t stride) {
  for (int64_t k = 0; k < n; ++k) dst[k * stride] = static_cast<double>(src[k]);
}

// matmul_exact over the tape's storage: f64 as it is; f32 the float contract (MatmulArgsF32,
// gr_dot<float>) over A and B narrowed as they are packed and C converted as the kernel loads and
// stores it (C is read only for MatmulStore::Accumulate; OntoZero, a fresh gradient slot, never).
void matmul_in(DType real, const MatmulArgs& args);

}  // namespace gr
