// conv_lanes.h — private to lib/grad's conv2d files: the vectors a direct conv loop runs on, a whole SIMD
// vector of R (Simd<R>) or, with AVX-512 only (Half), a 256-bit one: the same per-lane fma (one rounding,
// detail::Simd's contract), half the lanes. A loop whose lanes would be mostly idle on 512 bits (a group of
// 6 filters, an output row of 8 floats) takes the half vector instead.
#pragma once
#include <cstdint>
#include <cstring>

#include "tensor/matmul_simd.h"

namespace gr {

template <class R, bool Half>
struct ConvLanes {
  using V = typename detail::Simd<R>::V;
  static constexpr int W = detail::Simd<R>::W;
  static V load(const R* p) { return detail::load_v<R>(p); }
  static void store(R* p, V v) { detail::store_v<R>(p, v); }
  static V fma(V b, R a, V acc) { return detail::Simd<R>::fma(b, a, acc); }
};
#if defined(__AVX512F__)
constexpr bool kConvHalfLanes = true;
inline __m256 conv_fma256(__m256 b, float a, __m256 acc) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, acc); }  // fmaf per lane
inline __m256d conv_fma256(__m256d b, double a, __m256d acc) { return _mm256_fmadd_pd(_mm256_set1_pd(a), b, acc); }
template <class R>
struct ConvLanes<R, true> {
  typedef R V __attribute__((vector_size(32)));
  static constexpr int W = 32 / sizeof(R);
  static V load(const R* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(R* p, V v) { std::memcpy(p, &v, sizeof v); }
  static V fma(V b, R a, V acc) { return conv_fma256(b, a, acc); }
};
#else
constexpr bool kConvHalfLanes = false;
#endif

// Keep v in a register. A direct loop loads a vector once and uses it in several fmas (one per filter or
// channel of its block); GCC 12 may instead fold the load into each fma that reads it — a load per use,
// which made the f32 direct dx load-bound (digits conv2 dx 0.18 ms at 44% of the peak, 0.107 at 75% with
// the vector held). An empty asm that takes and gives v back ties it to a register; no instruction.
template <class V>
inline void keep_in_register(V& v) {
#if defined(__x86_64__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// v's W lanes widened to doubles and stored at out[0 .. W) (the tape keeps R values in doubles).
template <class R, bool Half>
inline void store_widened(double* out, typename ConvLanes<R, Half>::V v) {
  typedef double Wide __attribute__((vector_size(ConvLanes<R, Half>::W * sizeof(double))));
  const Wide w = __builtin_convertvector(v, Wide);
  std::memcpy(out, &w, sizeof w);
}

}  // namespace gr
