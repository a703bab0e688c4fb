// matmul_simd.h — private to lib/tensor's matmul_*.cpp: the SIMD vector type and the one fused
// step every matmul path uses (see matmul.cpp for how the paths keep the serial-k bits).
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

constexpr int W = GR_MM_W;

typedef double vd __attribute__((vector_size(GR_MM_W * sizeof(double))));

inline vd load_v(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_v(double* p, vd v) { std::memcpy(p, &v, sizeof v); }

// fma_v(b, a, acc): per lane, fma(a, b[l], acc[l]) with one rounding — gr_rfma of every lane
// (kernels/gr_device.h), the step of gr_dot. An explicit instruction where the target has one;
// otherwise __builtin_fma per lane (glibc's correctly rounded fma), the same bits, slowly.
inline vd fma_v(vd b, double a, vd acc) {
#if GR_MM_W == 8
  return _mm512_fmadd_pd(_mm512_set1_pd(a), b, acc);
#elif GR_MM_W == 4 && defined(__FMA__)
  return _mm256_fmadd_pd(_mm256_set1_pd(a), b, acc);
#elif GR_MM_W == 2 && defined(__FMA__)
  return _mm_fmadd_pd(_mm_set1_pd(a), b, acc);
#else
  vd out;
  for (int l = 0; l < GR_MM_W; ++l) out[l] = __builtin_fma(a, b[l], acc[l]);
  return out;
#endif
}

// The row-streaming path (matmul_rows.cpp) for few rows and a row-major B; C's rows ldc apart.
void matmul_rows(const MatmulArgs& x, int64_t ldc);

}  // namespace gr::detail
