// gr_reduce.h — THE accumulation orders (docs/numerics.md): every sum and dot product of every
// path is one of these, so the bits agree by construction.
//   gr_sum(x, n, stride)           acc = 0; acc = acc + x[k·stride]         for k = 0 .. n-1 ascending
//   gr_dot(a, sa, b, sb, n)        acc = 0; acc = fma(a[k·sa], b[k·sb], acc) for k = 0 .. n-1 ascending
// gr_sum rounds once per + (gr_radd); gr_dot once per step, a fused multiply-add (gr_rfma: IEEE
// fusedMultiplyAdd, exactly rounded, so the same bits on every target; docs/numerics.md). An axis of a
// tensor is a strided lane (stride = the inner size), a matrix row has stride 1 and a column the
// row length, so the axis/row/column variants are these two with a stride. Callers: the CPU tape
// (lib/tensor reduce.cpp, matmul_reference), the per-node kernels (gr_node_kernels.cuh) and the
// fused kernels (lib/fuse/codegen.cpp); the scalar emitter spells gr_sum of one element as
// 0.0 + x (lib/grad/op_render.h render_sum). The SIMD matmul (lib/tensor/matmul.cpp) is a fast
// version of gr_dot per output element, tested byte for byte against matmul_reference.
#pragma once
#include "gr_device.h"

// gr_sum_of: the same sum in T over elements stored as S, each converted to T first (an f32 CPU tape
// holds its floats in doubles, exactly; S = T is gr_sum itself).
template <class T, class S>
GR_HD static inline T gr_sum_of(const S* x, long long n, long long stride) {
  T acc = T(0);
  for (long long k = 0; k < n; ++k) acc = gr_radd(acc, (T)x[k * stride]);
  return acc;
}

template <class T>
GR_HD static inline T gr_sum(const T* x, long long n, long long stride) {
  return gr_sum_of<T, T>(x, n, stride);
}

template <class T>
GR_HD static inline T gr_dot(const T* a, long long sa, const T* b, long long sb, long long n) {
  T acc = T(0);
  for (long long k = 0; k < n; ++k) acc = gr_rfma(a[k * sa], b[k * sb], acc);
  return acc;
}
