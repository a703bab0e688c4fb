// matmul_rows.cpp — the row-streaming path of matmul_exact (matmul.cpp): few output rows and a
// row-major B, where streaming B's rows beats register tiling. Same bits as the serial-k loop.
#include "tensor/matmul_simd.h"

namespace gr::detail {
namespace {

constexpr int64_t kRowsMax = 4;      // rows per pass of the row-streaming path
constexpr int64_t kRowsChunk = 256;  // columns per pass; Accumulate keeps acc on the stack (8 KiB)

// Few rows and a row-major B: stream B's rows instead of tiling. For rows i0 .. i0+R and columns
// j0 .. j0+nb, acc[r][j] runs over k in ascending order, up to four k steps per pass over acc:
// fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, acc)))) is the serial loop's own sequence, and
// the first pass starts from +0.0. B is read along its rows, which the prefetchers follow at any
// row stride. acc (ld apart) is C itself for Overwrite, scratch for Accumulate.
template <class T, int R, int U, bool First>
inline void rows_pass(const MatmulArgsOf<T>& x, int64_t i0, int64_t j0, int64_t nb, int64_t k, T* acc, int64_t ld) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  const T* b[U];
  for (int u = 0; u < U; ++u) b[u] = x.b + (k + u) * x.b_rs + j0;
  T a[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) a[r][u] = x.a[(i0 + r) * x.a_rs + (k + u) * x.a_cs];
  int64_t j = 0;
  for (; j + W <= nb; j += W) {
    V v[U];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) v[u] = load_v(b[u] + j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      V t = First ? V{} : load_v(acc + r * ld + j);
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) t = Simd<T>::fma(v[u], a[r][u], t);
      store_v(acc + r * ld + j, t);
    }
  }
  for (; j < nb; ++j)
    for (int r = 0; r < R; ++r) {
      T t = First ? T(0) : acc[r * ld + j];
      for (int u = 0; u < U; ++u) t = Simd<T>::fma1(a[r][u], b[u][j], t);
      acc[r * ld + j] = t;
    }
}

template <class T, int R>
void rows_block(const MatmulArgsOf<T>& x, int64_t i0, int64_t j0, int64_t nb, T* acc, int64_t ld) {
  const int64_t K = x.k;  // >= 1
  int64_t k = 0;
  if (K >= 4) {
    rows_pass<T, R, 4, true>(x, i0, j0, nb, 0, acc, ld);
    for (k = 4; k + 4 <= K; k += 4) rows_pass<T, R, 4, false>(x, i0, j0, nb, k, acc, ld);
  } else {  // K = 1, 2 or 3: one pass (4x2x16 is mostly call overhead)
    if (K == 3)
      rows_pass<T, R, 3, true>(x, i0, j0, nb, 0, acc, ld);
    else if (K == 2)
      rows_pass<T, R, 2, true>(x, i0, j0, nb, 0, acc, ld);
    else
      rows_pass<T, R, 1, true>(x, i0, j0, nb, 0, acc, ld);
    k = K;
  }
  for (; k < K; ++k) rows_pass<T, R, 1, false>(x, i0, j0, nb, k, acc, ld);
}

template <class T>
void rows(const MatmulArgsOf<T>& x, int64_t ldc) {
  const bool accumulate = x.store == MatmulStore::Accumulate;
  alignas(64) T scratch[kRowsMax * kRowsChunk];
  for (int64_t i0 = 0; i0 < x.m; i0 += kRowsMax) {
    const int64_t r = x.m - i0 < kRowsMax ? x.m - i0 : kRowsMax;
    for (int64_t j0 = 0; j0 < x.n; j0 += kRowsChunk) {
      const int64_t nb = x.n - j0 < kRowsChunk ? x.n - j0 : kRowsChunk;
      T* c = x.c + i0 * ldc + j0;
      T* acc = accumulate ? scratch : c;
      const int64_t ld = accumulate ? nb : ldc;
      switch (r) {
        case 1:
          rows_block<T, 1>(x, i0, j0, nb, acc, ld);
          break;
        case 2:
          rows_block<T, 2>(x, i0, j0, nb, acc, ld);
          break;
        case 3:
          rows_block<T, 3>(x, i0, j0, nb, acc, ld);
          break;
        default:
          rows_block<T, 4>(x, i0, j0, nb, acc, ld);
          break;
      }
      if (accumulate)
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < nb; ++j) c[i * ldc + j] = c[i * ldc + j] + acc[i * nb + j];
      else if (x.store == MatmulStore::OntoZero)  // C = +0 + acc: only −0 changes
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < nb; ++j) c[i * ldc + j] = c[i * ldc + j] + T(0);
    }
  }
}

}  // namespace

void matmul_rows(const MatmulArgsOf<double>& x, int64_t ldc) { rows(x, ldc); }
void matmul_rows(const MatmulArgsOf<float>& x, int64_t ldc) { rows(x, ldc); }

}  // namespace gr::detail
