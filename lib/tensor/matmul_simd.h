// matmul_simd.h — private to lib/tensor's matmul_*.cpp: the SIMD vector types and the one fused
// step every matmul path uses (see matmul.cpp for how the paths keep the serial-k bits), for
// double and for float (twice the lanes in the same registers).
#pragma once
#include "tensor/matmul.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// SIMD width in doubles. GCC vector extensions lower to whatever the target has (AVX-512, AVX2,
// SSE2, or scalar code), so the same source is correct with any -march.
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

// The row-streaming path (matmul_rows.cpp) for few rows and a row-major B; C's rows ldc apart.
void matmul_rows(const MatmulArgsOf<double>& x, int64_t ldc);
void matmul_rows(const MatmulArgsOf<float>& x, int64_t ldc);

}  // namespace gr::detail
