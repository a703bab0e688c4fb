// matmul_tile.h — private to lib/tensor's matmul*.cpp: the register tile's geometry and the tables
// of micro-kernels that matmul.cpp picks from. The kernels themselves (matmul_kernel.h) are
// compiled in matmul_kernels_*.cpp, one table per unit, so that the many variants build in
// parallel and matmul.cpp compiles none of them; a kernel is reached only through these tables.
#pragma once
#include <cstdint>

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

// A micro-kernel (matmul_kernel.h: kernel<T, C, rows, vectors, direct_a>): arithmetic in T, C
// stored as C (T, or double holding T's values).
template <class T, class C>
using KernelFn = void (*)(const T*, int64_t, int64_t, const T*, int64_t, int64_t, const C*, int64_t, C*, int64_t, bool,
                          int, int, int);

constexpr int kWideRows = 3;  // two-panel (2*NV-vector) kernels exist for 1 .. kWideRows rows

// The kernels for one way of reading A (packed MR-stride panels, or A in place: direct_a).
template <class T, class C>
struct KernelGrid {
  KernelFn<T, C> fn[MR][NV];        // [rows - 1][vectors - 1]: the MR-row tile and its edges
  KernelFn<T, C> wide[kWideRows];   // [rows - 1]: 2*NV vectors (two panels, B in place); T == C only
  KernelFn<T, C> tall[2];           // [vectors - 1]: 2*MR rows of 1 or 2 vectors; direct A, T == C only
};
// With C stored wider than T (float arithmetic on doubles: the f32 tape), a direct A is read as C
// (doubles holding floats), each value narrowed as the kernel broadcasts it.
extern const KernelGrid<double, double> kF64Packed, kF64Direct;  // matmul_kernels_f64*.cpp
extern const KernelGrid<float, float> kF32Packed, kF32Direct;    // matmul_kernels_f32*.cpp
extern const KernelGrid<float, double> kF32InF64Packed, kF32InF64Direct;  // matmul_kernels_f32_in_f64*.cpp

template <class T, class C>
const KernelGrid<T, C>& kernel_grid(bool direct_a) {
  if constexpr (std::is_same_v<T, double>)
    return direct_a ? kF64Direct : kF64Packed;
  else if constexpr (std::is_same_v<C, float>)
    return direct_a ? kF32Direct : kF32Packed;
  else
    return direct_a ? kF32InF64Direct : kF32InF64Packed;
}

}  // namespace gr::detail
