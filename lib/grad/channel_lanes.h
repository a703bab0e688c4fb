// channel_lanes.h — private to backward.cpp: a channel bias's backward (b [C] broadcast over a [P, C, Q],
// ib = c) with 8 channels as the lanes of a vector of doubles, the a-side written from the same pass.
//
// The bits: slot c still sums its contributions over p, then q, ascending, one gr_accumulate (a plain
// round-to-nearest add) each — lane c of S is that chain, as channel_sums' register was (the slot's bits
// between two adds are the double's, so keeping it is exact). Per (p, 8 channels, 8 q's) the
// contributions land in an 8 × 8 tile t[channel][q] (contiguous loops the compiler vectorizes), the
// a-side's elements are written from it (first_into's +0 + c or accumulate_into's slot + c, as
// write_range, one vector add a row), and the b-side's tile is
// transposed in registers (transpose_block) into 8 vectors of 8 channels, added to S in q order. One read
// of the output gradient instead of two, and the b-side's adds 8 a vector instead of one.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "grad/owned.h"
#include "grad/tape_real.h"
#include "tensor/matmul_simd.h"

namespace gr {

// Where it applies: the f64 tape on AVX-512, whole tiles (C and Q multiples of 8).
template <class R>
constexpr bool channel_lanes_fit(const ChannelRun& cr) {
  return std::is_same_v<R, double> && detail::Simd<double>::W == 8 && cr.c % 8 == 0 && cr.q % 8 == 0;
}

// The a-side (da, fresh or not; null: a not wanted) and the b-side (db, accumulated onto), where
// channel_lanes_fit<R>(cr).
template <class R, class CA, class CB>
void channel_bias_lanes(CA& ca, CB& cb, double* da, bool da_fresh, double* db, const ChannelRun& cr) {
  if constexpr (std::is_same_v<R, double> && detail::Simd<double>::W == 8) {
    using V = detail::Simd<double>::V;
    constexpr int L = 8;
    const int64_t C = cr.c, Q = cr.q;
    alignas(64) double tile[L][L];
    for (int64_t p = 0; p < cr.p; ++p)
      for (int64_t c0 = 0; c0 < C; c0 += L) {
        V s = detail::load_v<double>(db + c0);
        const int64_t e0 = (p * C + c0) * Q;
        for (int64_t q0 = 0; q0 < Q; q0 += L) {
          for (int a = 0; a < L; ++a) {
            const int64_t e = e0 + a * Q + q0;
            if (da) {  // first_into: +0 + c; accumulate_into: slot + c (gr_radd, here a vector add)
              for (int k = 0; k < L; ++k) tile[a][k] = ca(e + k, e + k, c0 + a);
              const V base = da_fresh ? V{} : detail::load_v<double>(da + e);
              detail::store_v<double>(da + e, base + detail::load_v<double>(tile[a]));
            }
            for (int k = 0; k < L; ++k) tile[a][k] = cb(e + k, e + k, c0 + a);
          }
          V r[L];
          for (int a = 0; a < L; ++a) r[a] = detail::load_v<double>(tile[a]);
          detail::transpose_block<double>(r);  // r[k]: the 8 channels' contributions at q0 + k
          for (int k = 0; k < L; ++k) s = s + r[k];
        }
        detail::store_v<double>(db + c0, s);
      }
  }
}

}  // namespace gr
