// conv_rows.h — private to lib/grad's conv2d files: one group's output gradient G [N, F, P] (doubles
// holding the tape's R values) as a row of filters per position, rows[(n − n0)·P + p][f] in R, Fp ≥ Fg
// entries a row (the entries past Fg are zeros: padding lanes). dW by filters (tape_conv_dw.cpp) reads
// the rows as its vectors of filters, dx's product (tape_conv_dx.cpp) as its B.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gr_ops_window.h"
#include "tensor/matmul_simd.h"

namespace gr {

// L rows of L doubles, row i at src + i·stride (rows from `count` on read as zeros), as R vectors transposed
// in registers (transpose_block): r[k] holds element k of every row. The gradient copies into lanes go
// through it (gradient_rows here, tape_conv.cpp's gradient_to_lanes).
template <class R>
inline void load_transposed(const double* src, int64_t stride, int64_t count, typename detail::Simd<R>::V* r) {
  using V = typename detail::Simd<R>::V;
  constexpr int L = detail::Simd<R>::W;
  typedef double Wide __attribute__((vector_size(L * sizeof(double))));
  for (int i = 0; i < L; ++i) {
    if (i >= count) {
      r[i] = V{};
      continue;
    }
    Wide w;
    std::memcpy(&w, src + i * stride, sizeof w);
    r[i] = __builtin_convertvector(w, V);
  }
  detail::transpose_block<R>(r);
}

// Samples [n0, n1) of group grp. Fp a multiple of the SIMD width L: L × L tiles of (filters, positions)
// transposed in registers (transpose_block) and stored as L rows' runs of L filters; else in tiles of
// 64 positions, whose rows stay in L1 while each filter's run is written across them. (A filter at a
// time over all rows was a store per cache line, 80% of the copy.) Positions past the last whole
// tile go one by one.
template <class R>
void gradient_rows(const double* gy, const gr_window& g, int64_t grp, int64_t n0, int64_t n1, int64_t Fp, R* rows) {
  using V = typename detail::Simd<R>::V;
  constexpr int L = detail::Simd<R>::W;
  const int64_t fg = g.f / g.groups, P = g.oh * g.ow;
  for (int64_t n = n0; n < n1; ++n) {
    R* dst = rows + (n - n0) * P * Fp;
    const double* src = gy + (n * g.f + grp * fg) * P;
    if (Fp % L != 0) {
      if (Fp > fg) std::fill(dst, dst + P * Fp, R(0));  // the padding lanes, in one fill
      for (int64_t p0 = 0; p0 < P; p0 += 64) {
        const int64_t p1 = std::min<int64_t>(P, p0 + 64);
        for (int64_t f = 0; f < fg; ++f)
          for (int64_t p = p0; p < p1; ++p) dst[p * Fp + f] = static_cast<R>(src[f * P + p]);
      }
      continue;
    }
    const int64_t tiles = P / L * L;
    for (int64_t f0 = 0; f0 < Fp; f0 += L) {
      for (int64_t p0 = 0; p0 < tiles; p0 += L) {
        V r[L];
        load_transposed<R>(src + f0 * P + p0, P, fg - f0, r);  // r[k]: position p0 + k, filters f0 .. f0 + L
        for (int k = 0; k < L; ++k) detail::store_v<R>(dst + (p0 + k) * Fp + f0, r[k]);
      }
      for (int64_t p = tiles; p < P; ++p)
        for (int64_t f = f0; f < f0 + L; ++f) dst[p * Fp + f] = f < fg ? static_cast<R>(src[f * P + p]) : R(0);
    }
  }
}

}  // namespace gr
