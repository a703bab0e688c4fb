// tape_conv_fwd_plane.cpp — conv2d's forward on the CPU tape along the output plane, for stride-1 layers
// whose output rows are as long as the input's (OW = W: "same" padding): x read in place, y written in
// place, none of the sample lanes' transposes (AVX-512VL; elsewhere tape_conv.cpp takes every layer).
//
// Shapes (one group): x [N, Cg, H, W], W [Fg, Cg, KH, KW], y [N, Fg, OH, OW] (the tape's doubles).
//   wt [K, Fg]       the group's weights in R, tap-major (k = (c, i, j)), a tap's filters side by side
//   xs [Cg, H·W]     a sample's input in R (floats: converted once a sample; doubles: x itself)
// Output position p = oh·OW + ow, lanes of 256-bit vectors along p (4 doubles, 8 floats; 8 doubles in
// 512 bits where the plane is whole 8-lane vectors: conv2d_plane_forward). With OW = W and
// stride 1, tap (c, i, j) of every position reads x at p + shift, shift = (i·DH − PT)·W + j·DW − PL: one
// load per vector of positions, its lanes whose tap lands in the padding (row ih or column iw outside
// the image: a column past the row's end would wrap into the next row) masked to +0. Per block of FB
// filters × PB vectors of positions the chains
//   y[f](p) = Σ_(c, i, j) fma(w[f, c, i, j], x[c, p + shift], acc)   (from +0, taps ascending)
// stay in registers: gr_conv2d_win_fwd's chain, a padded tap an fma with +0 as the definition's.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "gr_ops_window.h"
#include "grad/conv_lanes.h"  // keep_in_register
#include "grad/plane_lanes.h"

namespace gr {

#if defined(__AVX512F__) && defined(__AVX512VL__)
namespace {

template <class R, class VT = Vec256<R>>
struct PlaneFwd {
  using T = VT;
  static constexpr int L = T::L;
  explicit PlaneFwd(const gr_window& window) : g(window) {}
  const gr_window& g;
  int64_t fg = 0, cg = 0, K = 0, P = 0, PV = 0;
  std::vector<int64_t> shift;         // [KH·KW]: x's offset from position p for tap (i, j)
  std::vector<typename T::M> lanes;   // [KH·KW, PV]: the lanes of vector v whose tap (i, j) lands in the image
};

// FB filters from f0 × PB vectors of positions from v0 for one sample: xs its input, yn its output planes.
template <class R, class T, int FB, int PB>
void fwd_block(const PlaneFwd<R, T>& s, const R* xs, const R* wt, int64_t f0, int64_t v0, double* yn) {
  using V = typename T::V;
  constexpr int L = T::L;
  const gr_window& g = s.g;
  const int64_t taps = g.kh * g.kw, HW = g.h * g.w;
  V acc[FB][PB];
#pragma GCC unroll 8
  for (int a = 0; a < FB; ++a)
#pragma GCC unroll 8
    for (int v = 0; v < PB; ++v) acc[a][v] = T::zero();
  for (int64_t c = 0; c < s.cg; ++c) {
    const R* xc = xs + c * HW + v0 * L;
    for (int64_t t = 0; t < taps; ++t) {
      const R* at = xc + s.shift[static_cast<size_t>(t)];
      const typename T::M* m = s.lanes.data() + t * s.PV + v0;
      V xv[PB];
#pragma GCC unroll 8
      for (int v = 0; v < PB; ++v) {
        xv[v] = T::load(m[v], at + v * L);
      }
      const R* wk = wt + (c * taps + t) * s.fg + f0;
#pragma GCC unroll 8
      for (int a = 0; a < FB; ++a) {
        V wv = T::broadcast(wk[a]);
        keep_in_register(wv);  // used by PB fmas
#pragma GCC unroll 8
        for (int v = 0; v < PB; ++v) acc[a][v] = T::fma(wv, xv[v], acc[a][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < PB; ++v) {
    const int64_t p0 = (v0 + v) * L;
    const auto keep = static_cast<typename T::M>(p0 + L <= s.P ? (1u << L) - 1 : (1u << (s.P - p0)) - 1);
#pragma GCC unroll 8
    for (int a = 0; a < FB; ++a) T::store_widened(yn + (f0 + a) * s.P + p0, keep, acc[a][v]);
  }
}

// The plane's vectors in blocks of PBmax, the rest in one smaller block.
template <class R, class T, int FB, int PBmax>
void fwd_filters(const PlaneFwd<R, T>& s, const R* xs, const R* wt, int64_t f0, double* yn) {
  int64_t v0 = 0;
  for (; v0 + PBmax <= s.PV; v0 += PBmax) fwd_block<R, T, FB, PBmax>(s, xs, wt, f0, v0, yn);
  switch (s.PV - v0) {
    case 0: return;
    case 1: return fwd_block<R, T, FB, 1>(s, xs, wt, f0, v0, yn);
    case 2: if constexpr (PBmax > 2) return fwd_block<R, T, FB, 2>(s, xs, wt, f0, v0, yn); return;
    case 3: if constexpr (PBmax > 3) return fwd_block<R, T, FB, 3>(s, xs, wt, f0, v0, yn); return;
  }
}

// Inlined into conv2d_plane_forward: as a function of its own, its f32 instance ran 10-17% slower (the
// same inner loop; measured, not understood).
template <class R, class T>
__attribute__((always_inline)) inline void plane_forward(const double* x, const double* w, const gr_window& g, double* y) {
  using S = PlaneFwd<R, T>;
  constexpr int L = S::L;
  const int64_t fg = g.f / g.groups, cg = g.c / g.groups, P = g.oh * g.ow;
  S s(g);
  s.fg = fg, s.cg = cg, s.K = cg * g.kh * g.kw, s.P = P, s.PV = (P + L - 1) / L;
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) s.shift.push_back((i * g.dh - g.pt) * g.w + j * g.dw - g.pl);
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j)
      for (int64_t v = 0; v < s.PV; ++v) {
        unsigned m = 0;
        for (int l = 0; l < L; ++l) {
          const int64_t p = v * L + l, ih = p / g.ow - g.pt + i * g.dh, iw = p % g.ow - g.pl + j * g.dw;
          if (p < P && ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) m |= 1u << l;
        }
        s.lanes.push_back(static_cast<typename S::T::M>(m));
      }
  const int64_t HW = g.h * g.w;
  thread_local std::vector<R> wt, xbuf;
  wt.resize(static_cast<size_t>(s.K * fg));
  if constexpr (!std::is_same_v<R, double>) xbuf.resize(static_cast<size_t>(cg * HW));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t f = 0; f < fg; ++f)
      for (int64_t k = 0; k < s.K; ++k) wt[static_cast<size_t>(k * fg + f)] = static_cast<R>(w[(grp * fg + f) * s.K + k]);
    for (int64_t n = 0; n < g.n; ++n) {
      const double* xn = x + (n * g.c + grp * cg) * HW;
      const R* xs;
      if constexpr (std::is_same_v<R, double>) {
        xs = xn;
      } else {
        for (int64_t e = 0; e < cg * HW; ++e) xbuf[static_cast<size_t>(e)] = static_cast<R>(xn[e]);
        xs = xbuf.data();
      }
      double* yn = y + (n * g.f + grp * fg) * P;
      for (int64_t f0 = 0; f0 < fg; f0 += 8) fwd_filters<R, T, 8, 2>(s, xs, wt.data(), f0, yn);  // 16 chains
    }
  }
}

}  // namespace

// conv2d's forward values (gr_conv2d_win_fwd) into y [N, F, OH, OW], or false (y untouched) where this
// path does not apply or was not measured to pay (test_window, docs/performance.md "stop 58"): stride 1,
// OW = W, filters a group a multiple of 8 (blocks of 8 filters × 2 vectors; 6 × 3 on LeNet's conv1 ran
// 3-9% slower than its row path, 4 × 4 no faster than the sample lanes), a group's input plane ≤ 16 KB.
// Doubles take 512-bit vectors where whole 8-lane vectors cover the plane (plane_lanes.h Vec512d).
template <class R>
bool conv2d_plane_forward(const double* x, const double* w, const gr_window& g, double* y) {
  const int64_t fg = g.f / g.groups, cg = g.c / g.groups, P = g.oh * g.ow;
  if (g.sh != 1 || g.sw != 1 || g.ow != g.w || fg % 8 != 0 || P < Vec256<R>::L) return false;
  // a block's taps sweep the sample's whole group of channels: it must stay in L1 (the 64 -> 128 layer's 64
  // KB of floats ran 5% slower than the sample lanes)
  if (cg * g.h * g.w * static_cast<int64_t>(sizeof(R)) > (16 << 10)) return false;
  if constexpr (std::is_same_v<R, double>)
    if (P % 8 == 0) return plane_forward<R, Vec512d>(x, w, g, y), true;
  plane_forward<R, Vec256<R>>(x, w, g, y);
  return true;
}

#else

template <class R>
bool conv2d_plane_forward(const double*, const double*, const gr_window&, double*) {  // AVX-512VL only
  return false;
}

#endif

template bool conv2d_plane_forward<double>(const double*, const double*, const gr_window&, double*);
template bool conv2d_plane_forward<float>(const double*, const double*, const gr_window&, double*);

}  // namespace gr
