// matmul_kernel.h — private to lib/tensor's matmul_kernels_*.cpp: the register tile (micro-kernel)
// of the bit-exact matmul and make_grid, which fills one of matmul_tile.h's kernel tables. Each
// output element's accumulator is one SIMD lane that sees acc = fma(a, b, acc) for k in ascending
// order from +0.0 (or from the value parked by the previous k slice): the serial-k loop's own
// sequence of roundings (matmul.cpp, matmul.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "tensor/matmul_tile.h"

namespace gr::detail {

// C's rows to and from the arithmetic type T when C is stored wider (C = double holding floats,
// the f32 tape): the conversions are exact, so C stored either way holds the same values.
template <class T, class C>
inline typename Simd<T>::V load_c(const C* p) {
  using V = typename Simd<T>::V;
  if constexpr (std::is_same_v<T, C>) {
    return load_v(p);
  } else {
    typedef C CV __attribute__((vector_size(Tile<T>::W * sizeof(C))));
    CV c;
    std::memcpy(&c, p, sizeof c);
    return __builtin_convertvector(c, V);
  }
}
template <class T, class C>
inline void store_c(C* p, typename Simd<T>::V v) {
  if constexpr (std::is_same_v<T, C>) {
    store_v(p, v);
  } else {
    typedef C CV __attribute__((vector_size(Tile<T>::W * sizeof(C))));
    const CV c = __builtin_convertvector(v, CV);
    std::memcpy(p, &c, sizeof c);
  }
}

// The micro-kernel: rows 0..mr-1 of an MR-stride packed A panel times vectors 0..nv-1 of a B
// panel whose k rows are ldb apart (NR when packed, b_rs when B is read in place), over kc steps.
//   init == nullptr: acc starts at +0.0 (the start of the k loop);
//   otherwise acc starts at init[r*ld_init + j] (the running value parked by the previous slice).
//   At the end: dst[r*ld_dst + j] = acc, or with `accumulate`, dst = dst + acc; or with the
//   kPlusZero bit (and not `accumulate`), dst = acc + 0.
// Only the first n_valid columns are read from init and written to dst. init and dst are stored
// as C (T, or double holding T's values); the arithmetic is T's.
// A is an MR-stride packed panel, or with `direct_a` A itself: A(r, k) = ap[r*ars + k*acs].
// With tiles > 1 the kernel runs that many tiles down the rows, each mr rows below the last (one
// call per column panel rather than per tile: on small products the call costs as much as a tile).
template <class T, class C, int mr, int nv, bool direct_a>
void kernel(const T* __restrict a_given, int64_t ars, int64_t acs, const T* __restrict b_first, int64_t ldb, int64_t kc,
            const C* init, int64_t ld_init, C* dst, int64_t ld_dst, bool accumulate, int n_valid, int trans,
            int tiles) {
  using V = typename Simd<T>::V;
  constexpr int W = Tile<T>::W;
  // A in place is stored as C (doubles holding floats on the f32 tape: narrowed as each is read).
  using AS = std::conditional_t<direct_a, C, T>;
  const AS* a_first = reinterpret_cast<const AS*>(a_given);
  if (!direct_a) ars = 1, acs = MR;  // compile-time strides for the packed panel
  const bool full = n_valid == nv * W;
  const int64_t a_step = direct_a ? mr * ars : MR * kc;
  const int64_t init_step = trans & kTransInit ? mr : mr * ld_init;
  const int64_t dst_step = trans & kTransDst ? mr : mr * ld_dst;
  for (int tile = 0; tile < tiles; ++tile, a_first += a_step, dst += dst_step, init = init ? init + init_step : init) {
    const AS* __restrict ap = a_first;
    const T* __restrict bp = b_first;
    V acc[mr][nv];
    if (init == nullptr) {
#pragma GCC unroll 16
      for (int r = 0; r < mr; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) acc[r][v] = V{};
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < mr; ++r) {
        const C* src = init + r * ld_init;
        if constexpr (std::is_same_v<T, C>) {
          if (!(trans & kTransInit) && !full) {  // only the last vector is partial
#pragma GCC unroll 8
            for (int v = 0; v < nv; ++v) acc[r][v] = load_n(src + v * W, v + 1 < nv ? W : n_valid - v * W);
            continue;
          }
        }
        if ((trans & kTransInit) || !full) {
          T tmp[nv * W] = {};
          if (trans & kTransInit)  // init holds the tile transposed: element (r, j) at init[j*ld + r]
            for (int j = 0; j < n_valid; ++j) tmp[j] = static_cast<T>(init[j * ld_init + r]);
          else
            for (int j = 0; j < n_valid; ++j) tmp[j] = static_cast<T>(src[j]);
#pragma GCC unroll 8
          for (int v = 0; v < nv; ++v) acc[r][v] = load_v(tmp + v * W);
        } else {
#pragma GCC unroll 8
          for (int v = 0; v < nv; ++v) acc[r][v] = load_c<T>(src + v * W);
        }
      }
    }

    // Unrolled by 4: the loop's own overhead (pointer bumps, compare, branch) is then small next
    // to the MR*NV FMAs of each step.
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
      V b[nv];
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) b[v] = load_v(bp + v * W);
#pragma GCC unroll 16
      for (int r = 0; r < mr; ++r) {
        const T a = static_cast<T>(ap[r * ars]);
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) acc[r][v] = Simd<T>::fma(b[v], a, acc[r][v]);  // one rounding per lane
      }
      ap += acs;
      bp += ldb;
    }

    const bool plus_zero = trans & kPlusZero;
    // One element's store: C = C + acc, +0 + acc or acc, in T.
    const auto store_one = [&](C& o, T t) {
      o = static_cast<C>(accumulate ? static_cast<T>(o) + t : plus_zero ? t + T(0) : t);
    };
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r) {
      C* out = dst + r * ld_dst;
      if (trans & kTransDst) {  // C is written transposed: element (r, j) at dst[j*ld + r]
        T tmp[nv * W];
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) store_v(tmp + v * W, acc[r][v]);
        for (int j = 0; j < n_valid; ++j) store_one(dst[j * ld_dst + r], tmp[j]);
      } else if (full) {
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) {
          if (accumulate)
            store_c<T>(out + v * W, load_c<T>(out + v * W) + acc[r][v]);
          else if (plus_zero)
            store_c<T>(out + v * W, acc[r][v] + V{});
          else
            store_c<T>(out + v * W, acc[r][v]);
        }
      } else if constexpr (std::is_same_v<T, C>) {  // only the last vector is partial
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) {
          const int n = v + 1 < nv ? W : n_valid - v * W;
          if (accumulate)
            store_n(out + v * W, load_n(out + v * W, n) + acc[r][v], n);
          else if (plus_zero)
            store_n(out + v * W, acc[r][v] + V{}, n);
          else
            store_n(out + v * W, acc[r][v], n);
        }
      } else {  // C stored wider: convert element by element
        T tmp[nv * W];
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) store_v(tmp + v * W, acc[r][v]);
        for (int j = 0; j < n_valid; ++j) store_one(out[j], tmp[j]);
      }
    }
  }
}

// make_grid<T, C, direct_a>(): the KernelGrid (matmul_tile.h) of every tile size, for one way of
// reading A. Taking a kernel's address instantiates it, so the unit that makes a grid compiles its
// kernels (matmul_kernels_*.cpp, one grid each).
template <class T, class C, bool direct_a, int mr, int... vs>
constexpr void fill_row(KernelFn<T, C>* row, std::integer_sequence<int, vs...>) {
  ((row[vs] = &kernel<T, C, mr, vs + 1, direct_a>), ...);
}
template <class T, class C, bool direct_a, int... rs>
constexpr void fill_wide(KernelFn<T, C>* wide, std::integer_sequence<int, rs...>) {
  ((wide[rs] = &kernel<T, C, rs + 1, 2 * NV, direct_a>), ...);
}
template <class T, class C, bool direct_a, int... rs>
constexpr KernelGrid<T, C> make_grid_rows(std::integer_sequence<int, rs...>) {
  KernelGrid<T, C> g{};
  (fill_row<T, C, direct_a, rs + 1>(g.fn[rs], std::make_integer_sequence<int, NV>{}), ...);
  if constexpr (std::is_same_v<T, C>) fill_wide<T, C, direct_a>(g.wide, std::make_integer_sequence<int, kWideRows>{});
  if constexpr (std::is_same_v<T, C> && direct_a) {
    g.tall[0] = &kernel<T, C, 2 * MR, 1, true>;
    g.tall[1] = &kernel<T, C, 2 * MR, 2, true>;
  }
  return g;
}
template <class T, class C, bool direct_a>
constexpr KernelGrid<T, C> make_grid() {
  return make_grid_rows<T, C, direct_a>(std::make_integer_sequence<int, MR>{});
}

}  // namespace gr::detail
