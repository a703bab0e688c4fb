// matmul_kernel.h — private to lib/tensor's matmul.cpp: the register tile (micro-kernel) of the
// bit-exact matmul and its dispatch tables. Each output element's accumulator is one SIMD lane that
// sees acc = fma(a, b, acc) for k in ascending order from +0.0 (or from the value parked by the
// previous k slice): the serial-k loop's own sequence of roundings (matmul.cpp, matmul.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "tensor/matmul_simd.h"

// Register tile: MR rows x NV vectors (NR = NV*W columns). Accumulators: MR*NV vector registers.
#ifndef GR_MM_MR
#if GR_MM_W == 8
#define GR_MM_MR 6  // 6 x 32: 24 accumulators + 4 B vectors + broadcast of 32 zmm
#elif GR_MM_W == 4
#define GR_MM_MR 6  // 6 x 8: 12 accumulators of 16 ymm
#else
#define GR_MM_MR 4  // 4 x 4: 8 accumulators of 16 xmm
#endif
#endif
#ifndef GR_MM_NV
#if GR_MM_W == 8
// 6 x 4 vectors beat 12 x 2, 14 x 2 and 8 x 3 on Zen 5 (AVX-512, 2 FMA pipes): per k step 6
// broadcasts + 4 loads feed 24 FMAs, fewer loads per FMA than 12 x 2's 12 + 2.
#define GR_MM_NV 4
#else
#define GR_MM_NV 2
#endif
#endif

namespace gr::detail {

constexpr int MR = GR_MM_MR;
constexpr int NV = GR_MM_NV;
// Lanes and panel width of element type T: a float vector holds twice the doubles' lanes, so its
// tile is twice as wide in columns with the same registers.
template <class T>
struct Tile {
  static constexpr int W = Simd<T>::W;
  static constexpr int NR = NV * W;
};
constexpr int kTransInit = 1, kTransDst = 2;  // kernel's `trans` bits: init / dst hold the tile transposed
constexpr int kPlusZero = 4;                  // and: an overwriting store writes acc + 0 (MatmulStore::OntoZero)

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
void kernel(const T* __restrict a_first, int64_t ars, int64_t acs, const T* __restrict b_first, int64_t ldb, int64_t kc,
            const C* init, int64_t ld_init, C* dst, int64_t ld_dst, bool accumulate, int n_valid, int trans,
            int tiles) {
  using V = typename Simd<T>::V;
  constexpr int W = Tile<T>::W;
  if (!direct_a) ars = 1, acs = MR;  // compile-time strides for the packed panel
  const bool full = n_valid == nv * W;
  const int64_t a_step = direct_a ? mr * ars : MR * kc;
  const int64_t init_step = trans & kTransInit ? mr : mr * ld_init;
  const int64_t dst_step = trans & kTransDst ? mr : mr * ld_dst;
  for (int tile = 0; tile < tiles; ++tile, a_first += a_step, dst += dst_step, init = init ? init + init_step : init) {
    const T* __restrict ap = a_first;
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
        const T a = ap[r * ars];
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

template <class T, class C>
using KernelFn = void (*)(const T*, int64_t, int64_t, const T*, int64_t, int64_t, const C*, int64_t, C*, int64_t, bool,
                          int, int, int);

// With C stored wider than T, A is always packed: no direct-A kernels.
template <class T, class C, int mr, int... vs>
constexpr void fill_row(KernelFn<T, C>* row, std::integer_sequence<int, vs...>) {
  ((row[vs] = &kernel<T, C, mr, vs + 1, false>), ...);
  if constexpr (std::is_same_v<T, C>) ((row[NV + vs] = &kernel<T, C, mr, vs + 1, true>), ...);
}
template <class T, class C, int... rs>
struct KernelTable {
  KernelFn<T, C> fn[MR][2 * NV];  // [rows - 1][vectors - 1], then the same with direct A
  constexpr KernelTable() : fn{} { (fill_row<T, C, rs + 1>(fn[rs], std::make_integer_sequence<int, NV>{}), ...); }
};
template <class T, class C, int... rs>
constexpr KernelTable<T, C, rs...> make_table(std::integer_sequence<int, rs...>) {
  return KernelTable<T, C, rs...>{};
}
template <class T, class C>
constexpr auto kTable = make_table<T, C>(std::make_integer_sequence<int, MR>{});

// Two-panel kernels (2*NV vectors) for 1 .. kWideRows rows, with A packed or in place.
constexpr int kWideRows = 3;
template <class T, int... rs>
struct WideTable {
  KernelFn<T, T> fn[kWideRows][2]{{&kernel<T, T, rs + 1, 2 * NV, false>, &kernel<T, T, rs + 1, 2 * NV, true>}...};
};
template <class T, int... rs>
constexpr WideTable<T, rs...> make_wide(std::integer_sequence<int, rs...>) {
  return {};
}
template <class T>
constexpr auto kWideTable = make_wide<T>(std::make_integer_sequence<int, kWideRows>{});

}  // namespace gr::detail
