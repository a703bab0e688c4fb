// matmul_fold.cpp — the folded-tail path of matmul_exact (matmul.cpp) for a 10-column f64 C: the
// last layer of a 10-class classifier (MLP-784's 64x128x10). Same bits as the serial-k loop.
//
// Shape legend: C [M,10] = A [M,K] · B [K,10], A at any strides, B row-major (b_cs == 1).
//
// Why: a 10-wide C row is one full 8-lane vector plus 2 columns. Tiled, the 2 columns take a
// second vector with 6 idle lanes, so 16 vector FMAs do 10 lanes' work (64x128x10 ran at its
// FMA-issue bound, ~60% of the peak). Here the 2-column tails of 4 rows share one vector:
//   lanes [a_i a_i a_i+1 a_i+1 a_i+2 a_i+2 a_i+3 a_i+3] * [b_8 b_9 b_8 b_9 b_8 b_9 b_8 b_9]
// built from the 4 broadcasts the full vectors use anyway (3 blends, which this core issues
// beside its FMAs). 8 rows per k step: 8 + 2 vector FMAs instead of 16.
//
// The bits: every output element still owns one lane of one accumulator that starts at +0.0 and
// sees acc = fma(a_ik, b_kj, acc) for k = 0, 1, ..., K-1, then the store's one operation (C = acc,
// C = C + acc, or C = +0 + acc). Which lane holds it never changes a rounding.
#include "tensor/matmul_simd.h"

namespace gr::detail {

#if GR_MM_W == 8 && defined(__AVX512DQ__)  // _mm512_broadcast_f64x2 is AVX512DQ
namespace {

constexpr int64_t kFoldN = 10;  // C's width this path takes: 8 + 2

// C[i][j] from acc by the store rule of matmul.h (c: the element, acc: its finished sum).
inline double finish(MatmulStore store, double c, double acc) {
  return store == MatmulStore::Accumulate ? c + acc : store == MatmulStore::OntoZero ? 0.0 + acc : acc;
}
inline __m512d finish_v(MatmulStore store, const double* c, __m512d acc) {
  if (store == MatmulStore::Accumulate) return _mm512_add_pd(_mm512_loadu_pd(c), acc);
  if (store == MatmulStore::OntoZero) return _mm512_add_pd(_mm512_setzero_pd(), acc);
  return acc;
}

// Rows i0 .. i0+R (R = 4 or 8): R full-vector accumulators for columns 0-7 and R/4 folded ones
// for columns 8-9.
template <int R>
void fold_rows(const MatmulArgsOf<double>& x, int64_t ldc, int64_t i0) {
  constexpr int F = R / 4;
  __m512d full[R], tail[F];
  for (int r = 0; r < R; ++r) full[r] = _mm512_setzero_pd();
  for (int f = 0; f < F; ++f) tail[f] = _mm512_setzero_pd();
  const double* a = x.a + i0 * x.a_rs;
  for (int64_t k = 0; k < x.k; ++k) {
    const double* b = x.b + k * x.b_rs;
    const __m512d b_full = _mm512_loadu_pd(b);
// GCC 12's own avx512dqintrin.h trips -Wmaybe-uninitialized in _mm512_broadcast_f64x2 (its
// unused pass-through operand); the intrinsic itself reads only its argument.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and -Werror rejects the name)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
    const __m512d b_tail = _mm512_broadcast_f64x2(_mm_loadu_pd(b + 8));  // b8 b9 b8 b9 ...
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    __m512d av[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      av[r] = _mm512_set1_pd(a[r * x.a_rs + k * x.a_cs]);
      full[r] = _mm512_fmadd_pd(av[r], b_full, full[r]);
    }
#pragma GCC unroll 2
    for (int f = 0; f < F; ++f) {  // lanes 2q, 2q+1 <- row 4f+q
      const __m512d lo = _mm512_mask_blend_pd(0x0C, av[4 * f], av[4 * f + 1]);
      const __m512d hi = _mm512_mask_blend_pd(0xC0, av[4 * f + 2], av[4 * f + 3]);
      tail[f] = _mm512_fmadd_pd(_mm512_mask_blend_pd(0xF0, lo, hi), b_tail, tail[f]);
    }
  }
  alignas(64) double t[F * 8];
  for (int f = 0; f < F; ++f) _mm512_store_pd(t + 8 * f, tail[f]);
  for (int r = 0; r < R; ++r) {
    double* c = x.c + (i0 + r) * ldc;
    _mm512_storeu_pd(c, finish_v(x.store, c, full[r]));
    c[8] = finish(x.store, c[8], t[2 * r]);
    c[9] = finish(x.store, c[9], t[2 * r + 1]);
  }
}

}  // namespace

int64_t matmul_fold(const MatmulArgsOf<double>& x, int64_t ldc) {
  if (x.n != kFoldN || x.b_cs != 1 || x.k <= 0) return 0;
  int64_t i = 0;
  for (; i + 8 <= x.m; i += 8) fold_rows<8>(x, ldc, i);
  if (i + 4 <= x.m) {
    fold_rows<4>(x, ldc, i);
    i += 4;
  }
  return i;
}

#else

int64_t matmul_fold(const MatmulArgsOf<double>&, int64_t) { return 0; }  // AVX-512 (F, DQ) only

#endif

}  // namespace gr::detail
