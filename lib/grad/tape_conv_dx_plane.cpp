// tape_conv_dx_plane.cpp — conv2d's input gradient on the CPU tape along the output plane: no D, no col2im
// (AVX-512VL; elsewhere tape_conv.cpp's direct loop or tape_conv_dx.cpp's product takes every layer).
//
// Shapes (one group): G [N, Fg, OH, OW], W [Fg, Cg, KH, KW], dx [N, C, H, W] (the tape's doubles).
//   wt [Cg, KH, Fg, KW]  the group's weights in R, the KW taps of a (c, i, f) side by side
//   gs [Fg, PV·L]        a sample's G in R (floats: converted once a sample; doubles: G itself, read in place)
//   d  [2][KW, DL]       a (c, i)'s d vectors over the plane's positions p = oh·OW + ow, ML cells of margin
// Per sample n, channel c and tap row i, for every position p of the output plane (vectors of L = 4
// doubles or 8 floats, 256 bits: this core's 512-bit fma is two 256-bit halves) and every tap column j:
//   d[j](p) = Σ_f W[f, c, i, j] · G[n, f, p]   (from +0, one fma each, f ascending)
// which is gr_conv2d_win_bwd_a's d of tap (i, j) for the output cell p. The plane flattened fills every
// lane (LeNet conv2's 10×10 output: 13 float vectors, 104 lanes for 100 cells; a row at a time would be
// 2 vectors, 16 lanes for 10). Then each dx row ih = oh·SH − PT + i·DH inside the image takes, per run
// of L cells iw, acc = acc + d[j](oh·OW + iw + PL − j·DW) for j ascending, a lane whose ow = iw + PL − j·DW
// falls outside [0, OW) loaded as +0 (the tap misses the cell; acc + (+0) = acc, and a sum from +0 is never
// −0). i runs outermost and a (c, i) visits each output row once, so every cell sums its taps (i, j)
// ascending from +0 (the planes are zeroed first): the definition's order and skips. A lane past the
// plane's last position reads G as +0 but is never added anywhere, so weights need not be finite.
//
// A (c, i)'s d is added onto the cells one (c, i) later (d alternates between two buffers): read at once,
// the shifted loads would span two of the vector stores just made, which store forwarding cannot serve.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "grad/conv_lanes.h"  // keep_in_register
#include "grad/plane_lanes.h"
#include "gr_ops_window.h"
#include "tensor/matmul_simd.h"

namespace gr {

#if defined(__AVX512F__) && defined(__AVX512VL__)
namespace {

template <class R>
struct PlaneDx {
  static constexpr int L = Vec256<R>::L;
  explicit PlaneDx(const gr_window& window) : g(window) {}
  const gr_window& g;
  int64_t fg = 0, cg = 0, P = 0, PV = 0, GS = 0;  // positions, their vectors, gs's row stride
  int64_t Wv = 0, XS = 0, ML = 0, DL = 0;         // vectors a dx row, a padded plane row; d's margin and row length
  typename Vec256<R>::M full = 0, p_tail = 0;                  // lanes of a whole vector, of the plane's last
  std::vector<int64_t> shift;                     // per tap j: PL − j·DW (ow − iw)
  std::vector<typename Vec256<R>::M> tap_lanes;                // [KW, Wv]: lanes iw < W whose ow = iw + shift[j] is in [0, OW)
  R* d[2] = {nullptr, nullptr};
};

// d[j] for the plane's vectors v0 .. v0 + PB of (c, i): wk [Fg, KW] its weights, gs the sample's G.
template <class R, int KW, int PB>
void plane_block(const PlaneDx<R>& s, const R* gs, const R* wk, int64_t v0, R* d) {
  using T = Vec256<R>;
  using V = typename T::V;
  constexpr int L = T::L;
  V acc[KW][PB];
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < PB; ++v) acc[j][v] = T::zero();
  typename Vec256<R>::M m[PB];
  for (int v = 0; v < PB; ++v) m[v] = v0 + v + 1 < s.PV ? s.full : s.p_tail;
  for (int64_t f = 0; f < s.fg; ++f) {
    const R* row = gs + f * s.GS + v0 * L;
    V gv[PB];
#pragma GCC unroll 8
    for (int v = 0; v < PB; ++v) gv[v] = T::load(m[v], row + v * L);
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      V wv = T::broadcast(wk[f * KW + j]);
      keep_in_register(wv);  // conv_lanes.h: else a broadcast load folded into each of its PB fmas
#pragma GCC unroll 8
      for (int v = 0; v < PB; ++v) acc[j][v] = T::fma(wv, gv[v], acc[j][v]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < KW; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < PB; ++v) T::store(d + j * s.DL + s.ML + (v0 + v) * L, acc[j][v]);
}

// A (c, i)'s d waiting to be added onto channel c's padded dx plane [H, XS].
template <class R>
struct PendingD {
  const R* d = nullptr;
  int64_t i = 0;
  R* plane = nullptr;
};

// d added onto the dx rows fed by output rows [oh_a, oh_b), per cell j ascending (the rows whose dx row
// ih = oh·SH − PT + i·DH misses the image are skipped, as the definition skips that tap). The planes'
// rows are padded to whole vectors: rows of W cells side by side made each row's first load overlap
// the last vector store of the row before, a store forwarding stall per row.
template <class R, int KW>
void plane_combine(const PlaneDx<R>& s, const PendingD<R>& pd, int64_t oh_a, int64_t oh_b) {
  using T = Vec256<R>;
  constexpr int L = T::L;
  const gr_window& g = s.g;
  while (oh_a < oh_b && oh_a * g.sh - g.pt + pd.i * g.dh < 0) ++oh_a;
  while (oh_b > oh_a && (oh_b - 1) * g.sh - g.pt + pd.i * g.dh >= g.h) --oh_b;
  for (int64_t u = 0; u < s.Wv; ++u) {
    typename Vec256<R>::M lanes[KW];
    const R* at[KW];
    for (int j = 0; j < KW; ++j) {
      lanes[j] = s.tap_lanes[static_cast<size_t>(j * s.Wv + u)];
      at[j] = pd.d + j * s.DL + s.ML + s.shift[static_cast<size_t>(j)] + u * L;
    }
    R* cells = pd.plane + (oh_a * g.sh - g.pt + pd.i * g.dh) * s.XS + u * L;
    for (int64_t oh = oh_a; oh < oh_b; ++oh, cells += g.sh * s.XS) {
      auto acc = T::load(cells);
#pragma GCC unroll 8
      for (int j = 0; j < KW; ++j) acc = T::add(acc, lanes[j], T::load(at[j] + oh * g.ow));
      T::store(cells, acc);
    }
  }
}

// The whole plane's d for (c, i), in blocks of at most PBmax vectors (KW·PB chains ≤ 20: 16 ymm of 32
// stay for G and w), the blocks as even as PV allows (LeNet's 13 float vectors: 4, 3, 3, 3).
template <class R, int KW>
void plane_d(const PlaneDx<R>& s, const R* gs, const R* wk, R* d) {
  constexpr int PBmax = std::min(6, 20 / KW);
  const int64_t blocks = (s.PV + PBmax - 1) / PBmax, small = s.PV / blocks, big = s.PV % blocks;
  int64_t v0 = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t pb = small + (b < big ? 1 : 0);
    switch (pb) {
      case 1: plane_block<R, KW, 1>(s, gs, wk, v0, d); break;
      case 2: plane_block<R, KW, 2>(s, gs, wk, v0, d); break;
      case 3: plane_block<R, KW, 3>(s, gs, wk, v0, d); break;
      case 4: plane_block<R, KW, 4>(s, gs, wk, v0, d); break;
      case 5: if constexpr (PBmax >= 5) plane_block<R, KW, 5>(s, gs, wk, v0, d); break;
      case 6: if constexpr (PBmax >= 6) plane_block<R, KW, 6>(s, gs, wk, v0, d); break;
    }
    v0 += pb;
  }
}

template <class R, int KW>
void plane_dx(PlaneDx<R>& s, const double* gy, const std::vector<R>& wt, int64_t grp, double* acc) {
  const gr_window& g = s.g;
  const int64_t HW = g.h * g.w, HX = g.h * s.XS;
  // doubles whose rows fill whole vectors are summed where they land; else in padded planes, copied out
  constexpr bool kDouble = std::is_same_v<R, double>;
  const bool in_place = kDouble && s.XS == g.w;
  constexpr int L = Vec256<R>::L;
  thread_local std::vector<R> gbuf, planes;
  if (!kDouble) gbuf.assign(static_cast<size_t>(s.fg * s.GS + L), R(0));  // the lanes past P stay +0
  R* g0 = gbuf.data() + (L - reinterpret_cast<uintptr_t>(gbuf.data()) / sizeof(R) % L) % L;  // 32-byte aligned
  if (!in_place) planes.resize(static_cast<size_t>(s.cg * HX));
  for (int64_t n = 0; n < g.n; ++n) {
    const double* gn = gy + (n * g.f + grp * s.fg) * s.P;
    double* xn = acc + (n * g.c + grp * s.cg) * HW;
    const R* gs;
    if constexpr (kDouble) {
      gs = gn;
    } else {
      for (int64_t f = 0; f < s.fg; ++f)
        for (int64_t p = 0; p < s.P; ++p) g0[f * s.GS + p] = static_cast<R>(gn[f * s.P + p]);
      gs = g0;
    }
    R* pn;
    if constexpr (kDouble) pn = in_place ? xn : planes.data();
    else pn = planes.data();
    std::fill(pn, pn + s.cg * HX, R(0));
    PendingD<R> pending;  // the d of (c, i) not yet added, and where
    int flip = 0;
    for (int64_t c = 0; c < s.cg; ++c)
      for (int64_t i = 0; i < g.kh; ++i) {
        R* d = s.d[flip];
        plane_d<R, KW>(s, gs, wt.data() + (c * g.kh + i) * s.fg * KW, d);
        if (pending.d) plane_combine<R, KW>(s, pending, 0, g.oh);
        pending = PendingD<R>{d, i, pn + c * HX};
        flip ^= 1;
      }
    plane_combine<R, KW>(s, pending, 0, g.oh);
    if (!in_place)
      for (int64_t r = 0; r < s.cg * g.h; ++r)
        for (int64_t w = 0; w < g.w; ++w) xn[r * g.w + w] = static_cast<double>(pn[r * s.XS + w]);
  }
}

}  // namespace

// conv2d's dx sums (gr_conv2d_win_bwd_a) written to every cell of acc [N, C, H, W], or false (acc
// untouched) where this path does not apply: column stride 1, KW 3 or 5, and enough filters a group to
// pay for the per-(c, i) stores and adds (measured in docs/performance.md).
template <class R>
bool conv2d_plane_dx(const double* gy, const double* w, const gr_window& g, double* acc) {
  using S = PlaneDx<R>;
  constexpr int L = S::L;
  if (g.sw != 1 || (g.kw != 3 && g.kw != 5)) return false;
  const int64_t fg = g.f / g.groups, cg = g.c / g.groups, P = g.oh * g.ow;
  if (P < L) return false;
  S s(g);
  s.fg = fg, s.cg = cg, s.P = P, s.PV = (P + L - 1) / L;
  s.GS = std::is_same_v<R, float> ? s.PV * L : P;
  s.Wv = (g.w + L - 1) / L;
  s.full = static_cast<typename Vec256<R>::M>((1u << L) - 1);
  s.p_tail = static_cast<typename Vec256<R>::M>((1u << (P - (s.PV - 1) * L)) - 1);
  s.XS = s.Wv * L;
  int64_t lo = 0, hi = s.PV * L;  // d's reads, relative to position 0: from −ML to hi − 1
  for (int64_t j = 0; j < g.kw; ++j) {
    const int64_t sh = g.pl - j * g.dw;
    s.shift.push_back(sh);
    lo = std::min<int64_t>(lo, sh);
    hi = std::max<int64_t>(hi, (g.oh - 1) * g.ow + s.Wv * L + sh);
    for (int64_t u = 0; u < s.Wv; ++u) {
      unsigned lanes = 0;
      for (int l = 0; l < L; ++l) {
        const int64_t iw = u * L + l, ow = iw + sh;
        if (iw < g.w && ow >= 0 && ow < g.ow) lanes |= 1u << l;
      }
      s.tap_lanes.push_back(static_cast<typename Vec256<R>::M>(lanes));
    }
  }
  s.ML = (-lo + L - 1) / L * L;  // whole vectors: the blocks' stores aligned
  s.DL = (s.ML + hi + L - 1) / L * L;
  thread_local std::vector<R> dbuf, wt;
  dbuf.assign(static_cast<size_t>(2 * g.kw * s.DL + L), R(0));
  R* d0 = dbuf.data() + (L - reinterpret_cast<uintptr_t>(dbuf.data()) / sizeof(R) % L) % L;  // 32-byte aligned
  s.d[0] = d0;
  s.d[1] = d0 + g.kw * s.DL;
  wt.resize(static_cast<size_t>(cg * g.kh * fg * g.kw));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t f = 0; f < fg; ++f)
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j)
            wt[static_cast<size_t>(((c * g.kh + i) * fg + f) * g.kw + j)] =
                static_cast<R>(w[(((grp * fg + f) * cg + c) * g.kh + i) * g.kw + j]);
    if (g.kw == 3) plane_dx<R, 3>(s, gy, wt, grp, acc);
    else plane_dx<R, 5>(s, gy, wt, grp, acc);
  }
  return true;
}

#else

template <class R>
bool conv2d_plane_dx(const double*, const double*, const gr_window&, double*) {  // AVX-512VL only
  return false;
}

#endif

template bool conv2d_plane_dx<double>(const double*, const double*, const gr_window&, double*);
template bool conv2d_plane_dx<float>(const double*, const double*, const gr_window&, double*);

}  // namespace gr
