// tape_conv_dw.cpp — conv2d's weight gradient on the CPU tape: one direct loop, the filters as SIMD lanes,
// for every geometry (stride, padding, dilation, groups).
//
// Shapes (one group): x [N, C, H, W] and G [N, F, OH, OW] (doubles holding the tape's R values), dW [F,
// C/G, KH, KW]; K = Cg·KH·KW taps k = (c, i, j), P = OH·OW positions.
//   gt [N·P, Fp]      the group's output gradient in R, a row per position (n, oh, ow), f innermost, Fp =
//                     Fg rounded up to whole vectors (zero lanes, their chains dropped)
//   xp [N, Cg, Hp, Wp] the group's input in R, zero-padded; tap k of position (n, oh, ow) is
//                     xp[n][toff[k] + oh·SH·Wp + ow·SW], toff[k] = (c·Hp + i·DH)·Wp + j·DW
// dW[f, k] is gr_conv2d_win_bwd_b's chain — acc from +0, acc = fma(g, x, acc) over (n, oh, ow) ascending
// — with the filters as lanes: per position, V vectors of g loaded once and TB taps broadcast, TB·V
// chains in registers (a padded tap an fma with +0, as the definition's). The samples go in chunks whose
// gt rows stay in L2 while every tap block walks them; a block's chains rest in acc [K, Fp] between
// chunks (stored and loaded as they are: the same chains, paused). With AVX-512, a group of at most half
// a vector of filters (LeNet's conv1: 6) runs on 256-bit vectors: the same per-lane fma, half the lanes
// wasted instead of most of them, and half the bytes of gt.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gr_ops_window.h"
#include "grad/conv_lanes.h"
#include "grad/conv_rows.h"
#include "tensor/matmul_simd.h"  // the one fused step of every matmul path (Simd<T>::fma)

namespace gr {

namespace {

using detail::Simd;

template <class R>
struct DwScratch {
  std::vector<R> xp, gt, acc;
  std::vector<int64_t> toff, roff;
};

// RB × KW taps × V vectors of filters from vector fv, over the samples [n0, n1): tap (r, j) at xb + roff[r] + j.
// KW = 1: any RB taps, roff their offsets. KW > 1: RB tap rows (c, i) at column dilation 1, whose KW taps are
// consecutive cells — one pointer a row (j an immediate offset) instead of one a tap. (16 tap pointers did
// not fit the general registers: GCC parked them in vector registers and moved one back before each fma —
// f32 LeNet conv2 dW at 68% of the peak.)
template <class R, class VT, int RB, int KW, int V>
void dwf_block(const R* gt, const R* xp, const int64_t* roff, const gr_window& g, int64_t n0, int64_t n1,
               int64_t Hp, int64_t Wp, int64_t Fp, int64_t fv, R* acc_mem) {
  using Vec = typename VT::V;
  constexpr int L = VT::W;
  const int64_t cg = g.c / g.groups;
  Vec acc[RB][KW][V];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < KW; ++j)
      for (int v = 0; v < V; ++v) acc[r][j][v] = VT::load(acc_mem + (r * KW + j) * Fp + (fv + v) * L);
  const R* gp = gt + n0 * g.oh * g.ow * Fp + fv * L;
  for (int64_t n = n0; n < n1; ++n) {
    const R* xn = xp + n * cg * Hp * Wp;
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const R* xr = xn + oh * g.sh * Wp;
      for (int64_t ow = 0; ow < g.ow; ++ow, gp += Fp) {
        const R* xb = xr + ow * g.sw;
        Vec gv[V];
        for (int v = 0; v < V; ++v) {
          gv[v] = VT::load(gp + v * L);
          keep_in_register(gv[v]);  // conv_lanes.h: used by RB·KW fmas
        }
        for (int r = 0; r < RB; ++r) {
          const R* row = xb + roff[r];
          for (int j = 0; j < KW; ++j)
            for (int v = 0; v < V; ++v) acc[r][j][v] = VT::fma(gv[v], row[j], acc[r][j][v]);
        }
      }
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < KW; ++j)
      for (int v = 0; v < V; ++v) VT::store(acc_mem + (r * KW + j) * Fp + (fv + v) * L, acc[r][j][v]);
}

// Every tap row in blocks of as many rows as keep RB·KW·V ≤ 24 chains, then one at a time.
template <class R, class VT, int KW, int V>
void dwf_rows(const R* gt, const R* xp, const std::vector<int64_t>& roff, const gr_window& g, int64_t n0, int64_t n1,
              int64_t Hp, int64_t Wp, int64_t Fp, int64_t fv, R* acc_mem) {
  constexpr int RB = std::max(1, 24 / (KW * V));
  const int64_t rows = static_cast<int64_t>(roff.size());
  int64_t r = 0;
  for (; r + RB <= rows; r += RB)
    dwf_block<R, VT, RB, KW, V>(gt, xp, roff.data() + r, g, n0, n1, Hp, Wp, Fp, fv, acc_mem + r * KW * Fp);
  for (; r < rows; ++r) dwf_block<R, VT, 1, KW, V>(gt, xp, roff.data() + r, g, n0, n1, Hp, Wp, Fp, fv, acc_mem + r * KW * Fp);
}

// The taps in blocks of TB, then 4, then 1, for V vectors of filters from vector fv.
template <class R, class VT, int TB, int V>
void dwf_taps(const R* gt, const R* xp, const std::vector<int64_t>& toff, const gr_window& g, int64_t n0, int64_t n1,
              int64_t Hp, int64_t Wp, int64_t Fp, int64_t fv, R* acc_mem) {
  const int64_t K = static_cast<int64_t>(toff.size());
  int64_t t = 0;
  for (; t + TB <= K; t += TB) dwf_block<R, VT, TB, 1, V>(gt, xp, toff.data() + t, g, n0, n1, Hp, Wp, Fp, fv, acc_mem + t * Fp);
  for (; t + 4 <= K; t += 4) dwf_block<R, VT, 4, 1, V>(gt, xp, toff.data() + t, g, n0, n1, Hp, Wp, Fp, fv, acc_mem + t * Fp);
  for (; t < K; ++t) dwf_block<R, VT, 1, 1, V>(gt, xp, toff.data() + t, g, n0, n1, Hp, Wp, Fp, fv, acc_mem + t * Fp);
}

template <class R, class VT, int V>
void dw_pass(const R* gt, const R* xp, const std::vector<int64_t>& toff, const std::vector<int64_t>& roff,
             const gr_window& g, int64_t n0, int64_t n1, int64_t Hp, int64_t Wp, int64_t Fp, int64_t fv, R* acc_mem) {
  constexpr int TB = V == 4 ? 6 : V == 2 ? 12 : 16;
  // rows where a block's taps would need more pointers than the registers hold (TB 12 or 16; at V = 4 the
  // six tap pointers fit, and rows measured 1-6% slower: the stride-2 and wide layers of test_window)
  if (roff.empty() || V == 4) return dwf_taps<R, VT, TB, V>(gt, xp, toff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem);
  if (g.kw == 3) return dwf_rows<R, VT, 3, V>(gt, xp, roff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem);
  dwf_rows<R, VT, 5, V>(gt, xp, roff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem);
}

// roff: the tap rows' offsets where a row's taps are consecutive cells (column dilation 1, KW 3 or 5), else empty.
template <class R, class VT>
void dw_by_filters(const R* gt, const R* xp, const std::vector<int64_t>& toff, const std::vector<int64_t>& roff,
                   const gr_window& g, int64_t Hp, int64_t Wp, int64_t Fp, R* acc_mem) {
  const int64_t NV = Fp / VT::W, P = g.oh * g.ow;
  // samples per chunk: their gt rows in about 256 KB
  const int64_t chunk = std::max<int64_t>(1, (int64_t{256} << 10) / (P * Fp * static_cast<int64_t>(sizeof(R))));
  for (int64_t n0 = 0; n0 < g.n; n0 += chunk) {
    const int64_t n1 = std::min<int64_t>(g.n, n0 + chunk);
    // vectors of filters in passes of 4, 2 or 1, each with as many taps as the registers hold
    // (24 accumulators: 6 taps × 4, 12 × 2, 16 × 1)
    for (int64_t fv = 0; fv < NV;) {
      if (NV - fv >= 4) dw_pass<R, VT, 4>(gt, xp, toff, roff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem), fv += 4;
      else if (NV - fv >= 2) dw_pass<R, VT, 2>(gt, xp, toff, roff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem), fv += 2;
      else dw_pass<R, VT, 1>(gt, xp, toff, roff, g, n0, n1, Hp, Wp, Fp, fv, acc_mem), fv += 1;
    }
  }
}

template <class R, class VT>
void conv_dw_filters(const double* x, const double* gy, const gr_window& g, int64_t grp, double* out, DwScratch<R>& s) {
  constexpr int L = VT::W;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, P = g.oh * g.ow, Fp = (fg + L - 1) / L * L;
  const int64_t Hp = g.h + g.pt + g.pb, Wp = g.w + g.pl + g.pr;
  s.xp.assign(static_cast<size_t>(g.n * cg * Hp * Wp), R(0));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t ih = 0; ih < g.h; ++ih) {
        const double* src = x + ((n * g.c + grp * cg + c) * g.h + ih) * g.w;
        R* dst = s.xp.data() + ((n * cg + c) * Hp + ih + g.pt) * Wp + g.pl;
        for (int64_t iw = 0; iw < g.w; ++iw) dst[iw] = static_cast<R>(src[iw]);
      }
  s.gt.resize(static_cast<size_t>(g.n * P * Fp));
  gradient_rows<R>(gy, g, grp, 0, g.n, Fp, s.gt.data());  // conv_rows.h
  std::vector<int64_t>& toff = s.toff;
  toff.clear();
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) toff.push_back((c * Hp + i * g.dh) * Wp + j * g.dw);
  const int64_t K = static_cast<int64_t>(toff.size());
  s.acc.assign(static_cast<size_t>(K * Fp), R(0));  // the chains, from +0
  std::vector<int64_t>& roff = s.roff;
  roff.clear();
  if (g.dw == 1 && (g.kw == 3 || g.kw == 5))
    for (int64_t k = 0; k < K; k += g.kw) roff.push_back(toff[static_cast<size_t>(k)]);
  dw_by_filters<R, VT>(s.gt.data(), s.xp.data(), toff, roff, g, Hp, Wp, Fp, s.acc.data());
  for (int64_t k = 0; k < K; ++k)  // out [K, Fg]
    for (int64_t f = 0; f < fg; ++f) out[k * fg + f] = static_cast<double>(s.acc[static_cast<size_t>(k * Fp + f)]);
}

}  // namespace

// conv2d's dW chains of group grp into out [K, Fg] (k = (c, i, j)): see the top of this file.
template <class R>
void conv2d_direct_dw(const double* x, const double* gy, const gr_window& g, int64_t grp, double* out) {
  thread_local DwScratch<R> scratch;  // reused across steps: no allocation per step
  if (kConvHalfLanes && 2 * (g.f / g.groups) <= Simd<R>::W) return conv_dw_filters<R, ConvLanes<R, true>>(x, gy, g, grp, out, scratch);
  conv_dw_filters<R, ConvLanes<R, false>>(x, gy, g, grp, out, scratch);
}

template void conv2d_direct_dw<double>(const double*, const double*, const gr_window&, int64_t, double*);
template void conv2d_direct_dw<float>(const double*, const double*, const gr_window&, int64_t, double*);

}  // namespace gr
