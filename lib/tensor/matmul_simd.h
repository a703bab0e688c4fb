// matmul_simd.h — private to lib/tensor's matmul_*.cpp: the SIMD vector types and the one fused
// step every matmul path uses (see matmul.cpp for how the paths keep the serial-k bits), for
// double and for float (twice the lanes in the same registers).
#pragma once
#include "tensor/matmul.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

// SIMD width in doubles. GCC vector extensions lower to whatever the target has (AVX-512, AVX2,
// SSE2, NEON, or scalar code), so the same source is correct with any -march. AArch64 has 32
// 128-bit NEON registers and a fused multiply-add in every core (FMLA), so it takes the 2-lane
// path with an explicit FMLA — one rounding per lane, the bits of every other path.
#if defined(__AVX512F__)
#define GR_MM_W 8
#elif defined(__AVX__)
#define GR_MM_W 4
#else
#define GR_MM_W 2
#endif

namespace gr::detail {

template <class T>
struct Simd;

template <>
struct Simd<double> {
  static constexpr int W = GR_MM_W;  // lanes
  typedef double V __attribute__((vector_size(GR_MM_W * sizeof(double))));
  // fma(b, a, acc): per lane, fma(a, b[l], acc[l]) with one rounding — gr_rfma of every lane
  // (kernels/gr_device.h), the step of gr_dot. An explicit instruction where the target has one;
  // otherwise __builtin_fma per lane (glibc's correctly rounded fma), the same bits, slowly.
  static V fma(V b, double a, V acc) {
#if GR_MM_W == 8
    return _mm512_fmadd_pd(_mm512_set1_pd(a), b, acc);
#elif GR_MM_W == 4 && defined(__FMA__)
    return _mm256_fmadd_pd(_mm256_set1_pd(a), b, acc);
#elif GR_MM_W == 2 && defined(__FMA__)
    return _mm_fmadd_pd(_mm_set1_pd(a), b, acc);
#elif defined(__aarch64__)
    return (V)vfmaq_f64((float64x2_t)acc, (float64x2_t)b, vdupq_n_f64(a));  // FMLA: acc + b·a, one rounding
#else
    V out;
    for (int l = 0; l < W; ++l) out[l] = __builtin_fma(a, b[l], acc[l]);
    return out;
#endif
  }
  static double fma1(double a, double b, double acc) { return __builtin_fma(a, b, acc); }
};

template <>
struct Simd<float> {
  static constexpr int W = 2 * GR_MM_W;
  typedef float V __attribute__((vector_size(GR_MM_W * sizeof(double))));
  static V fma(V b, float a, V acc) {  // gr_rfma(float) of every lane: fmaf, one rounding
#if GR_MM_W == 8
    return _mm512_fmadd_ps(_mm512_set1_ps(a), b, acc);
#elif GR_MM_W == 4 && defined(__FMA__)
    return _mm256_fmadd_ps(_mm256_set1_ps(a), b, acc);
#elif GR_MM_W == 2 && defined(__FMA__)
    return _mm_fmadd_ps(_mm_set1_ps(a), b, acc);
#elif defined(__aarch64__)
    return (V)vfmaq_f32((float32x4_t)acc, (float32x4_t)b, vdupq_n_f32(a));  // FMLA: acc + b·a, one rounding
#else
    V out;
    for (int l = 0; l < W; ++l) out[l] = __builtin_fmaf(a, b[l], acc[l]);
    return out;
#endif
  }
  static float fma1(float a, float b, float acc) { return __builtin_fmaf(a, b, acc); }
};

template <class T>
inline typename Simd<T>::V load_v(const T* p) {
  typename Simd<T>::V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_v(T* p, typename Simd<T>::V v) {
  std::memcpy(p, &v, sizeof v);
}

// The first n lanes (0 < n <= W) of a vector, from or to memory; load_n zeroes the other lanes.
// Element by element in a fixed-width loop (or AVX-512's masked moves): GCC turns a loop to a
// variable n into a memcpy call, which costs more than a narrow tile's arithmetic.
template <class T>
inline typename Simd<T>::V load_n(const T* p, int n) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, double>)
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1), p);
  else
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
#else
  T t[Simd<T>::W];
#pragma GCC unroll 16
  for (int l = 0; l < Simd<T>::W; ++l) t[l] = l < n ? p[l] : T(0);
  return load_v(t);
#endif
}
template <class T>
inline void store_n(T* p, typename Simd<T>::V v, int n) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, double>)
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << n) - 1), v);
  else
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
#else
  T t[Simd<T>::W];
  store_v(t, v);
#pragma GCC unroll 16
  for (int l = 0; l < Simd<T>::W; ++l)
    if (l < n) p[l] = t[l];
#endif
}

// Transposes a W x W block in registers: on entry r[i] holds row i (lane l = column l), on exit
// r[l] holds column l. log2(W) butterfly levels; level h swaps the off-diagonal h x h blocks of
// every 2h x 2h block, so after all levels each element (i, l) sits at (l, i). Only moves values.
// Level H's two shuffle masks: new r[i] lane l = (l mod 2H) < H ? r[i][l] : r[i + H][l - H], and
// new r[i + H] lane l = (l mod 2H) < H ? r[i][l + H] : r[i + H][l] (index W + x: lane x of r[i + H]).
template <class I, int W, int H>
struct TransposeMasks {
  I lo[W], hi[W];
  constexpr TransposeMasks() : lo{}, hi{} {
    for (int l = 0; l < W; ++l) {
      const int blk = l & ~(2 * H - 1), off = l & (2 * H - 1);
      lo[l] = static_cast<I>(off < H ? blk + off : W + blk + off - H);
      hi[l] = static_cast<I>(off < H ? blk + off + H : W + blk + off);
    }
  }
};
#if defined(__clang__)
// clang (the fuzz build) has no __builtin_shuffle with a mask vector: go through memory.
template <class T>
inline void transpose_block(typename Simd<T>::V* r) {
  constexpr int W = Simd<T>::W;
  T tmp[W][W];
  for (int i = 0; i < W; ++i) std::memcpy(tmp[i], &r[i], sizeof r[i]);
  for (int l = 0; l < W; ++l)
    for (int i = 0; i < W; ++i) r[l][i] = tmp[i][l];
}
#else
template <class T, int H = Simd<T>::W / 2>
inline void transpose_block(typename Simd<T>::V* r) {
  using V = typename Simd<T>::V;
  constexpr int W = Simd<T>::W;
  using I = std::conditional_t<sizeof(T) == 8, int64_t, int32_t>;
  typedef I M __attribute__((vector_size(sizeof(V))));
  static constexpr TransposeMasks<I, W, H> masks{};
  M lo, hi;
  std::memcpy(&lo, masks.lo, sizeof lo);
  std::memcpy(&hi, masks.hi, sizeof hi);
  for (int i = 0; i < W; ++i) {
    if (i & H) continue;
    const V a = r[i], b = r[i + H];
    r[i] = __builtin_shuffle(a, b, lo);
    r[i + H] = __builtin_shuffle(a, b, hi);
  }
  if constexpr (H > 1) transpose_block<T, H / 2>(r);
}
#endif

// The row-streaming path (matmul_rows.cpp) for few rows and a row-major B; C's rows ldc apart.
void matmul_rows(const MatmulArgsOf<double>& x, int64_t ldc);
void matmul_rows(const MatmulArgsOf<float>& x, int64_t ldc);
// The folded-tail path (matmul_fold.cpp) for a 10-column f64 C with a row-major B: computes C's
// first rows, a multiple of 4, and returns how many (0 when it does not apply; the caller does
// the rest).
int64_t matmul_fold(const MatmulArgsOf<double>& x, int64_t ldc);

}  // namespace gr::detail
