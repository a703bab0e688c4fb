// plane_lanes.h — private to lib/grad's conv2d files: 256-bit vectors of R with AVX-512VL masks (x86
// with AVX-512VL only), for the loops along an output plane (tape_conv_dx_plane.cpp, tape_conv_fwd_plane.cpp).
// 256 bits because this core's 512-bit fma is two 256-bit halves: the same rate, and a plane fills twice
// as many of the shorter vectors' lanes. Every fma is one rounding per lane (fma(w, x, acc)).
#pragma once
#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace gr {

template <class R>
struct Vec256;  // V: the vector, M: its lane mask, L: its lanes
template <>
struct Vec256<double> {
  using V = __m256d;
  using M = __mmask8;
  static constexpr int L = 4;
  static V zero() { return _mm256_setzero_pd(); }
  static V broadcast(double w) { return _mm256_set1_pd(w); }
  static V load(__mmask8 m, const double* p) { return _mm256_maskz_loadu_pd(m, p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static void store(double* p, __mmask8 m, V v) { _mm256_mask_storeu_pd(p, m, v); }
  static V fma(V w, V g, V d) { return _mm256_fmadd_pd(w, g, d); }  // fma(w, g, d) per lane
  static V add(V a, V b) { return _mm256_add_pd(a, b); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static V add(V a, __mmask8 m, V b) { return _mm256_mask_add_pd(a, m, a, b); }  // a + b in m's lanes, else a
  static void store_widened(double* p, __mmask8 m, V v) { _mm256_mask_storeu_pd(p, m, v); }  // m's lanes of v at p
};
// 512-bit vectors of doubles, the part of the interface the forward uses: tape_conv_fwd_plane.cpp where
// whole 8-lane vectors cover the plane (digits conv2's 4 × 4: 16 positions in 2 vectors, the block 8 filters
// × the whole plane; the same fmas in half the instructions, 0.206 -> 0.183 ms). Tried and not kept for the
// dx plane (slower).
struct Vec512d {
  using V = __m512d;
  using M = __mmask8;
  static constexpr int L = 8;
  static V zero() { return _mm512_setzero_pd(); }
  static V broadcast(double w) { return _mm512_set1_pd(w); }
  static V load(__mmask8 m, const double* p) { return _mm512_maskz_loadu_pd(m, p); }
  static V fma(V w, V g, V d) { return _mm512_fmadd_pd(w, g, d); }  // fma(w, g, d) per lane
  static void store_widened(double* p, __mmask8 m, V v) { _mm512_mask_storeu_pd(p, m, v); }  // m's lanes of v at p
};
template <>
struct Vec256<float> {
  using V = __m256;
  using M = __mmask8;
  static constexpr int L = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V broadcast(float w) { return _mm256_set1_ps(w); }
  static V load(__mmask8 m, const float* p) { return _mm256_maskz_loadu_ps(m, p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store(float* p, __mmask8 m, V v) { _mm256_mask_storeu_ps(p, m, v); }
  static V fma(V w, V g, V d) { return _mm256_fmadd_ps(w, g, d); }  // fmaf(w, g, d) per lane
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V add(V a, __mmask8 m, V b) { return _mm256_mask_add_ps(a, m, a, b); }  // a + b in m's lanes, else a
  static void store_widened(double* p, __mmask8 m, V v) {  // m's lanes of v, as doubles, at p
    typedef double Wide __attribute__((vector_size(64)));
    const Wide w = __builtin_convertvector(v, Wide);
    __m512d d;
    std::memcpy(&d, &w, sizeof d);
    _mm512_mask_storeu_pd(p, m, d);
  }
};

}  // namespace gr

#endif
