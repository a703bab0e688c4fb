// tape_conv.cpp — conv2d's forward on the CPU tape as a direct loop, vectorized across the batch.
//
// Shapes: x [N, C, H, W] and w [F, C/G, KH, KW] (doubles holding the tape's R values), y [N, F, OH, OW].
// Scratch: xt [NB, Cg, Hp, Wp, L] = one group's input in R, zero-padded (Hp = H + PT + PB, Wp = W + PL +
// PR), in blocks of L samples (L = the SIMD lane count, NB = ceil(N / L); a last block's extra samples
// are zeros whose outputs are dropped), so a block's taps are contiguous vectors; wr [Fg, K] = the
// group's weights in R, K = Cg·KH·KW; yt [NB, Fg, OH, OW, L] = the group's outputs (whole vector
// stores), then transposed into y.
//
// Every output element is exactly gr_conv2d_win_fwd's chain (kernels/gr_ops_window.h): acc from +0,
// acc = fma(w[f,c,i,j], xp[n,c,ih,iw], acc) over (c, i, j) ascending, one rounding each, a padded tap
// an fma with +0 like the definition's. Only the lanes differ: one lane per sample n (8 doubles or 16
// floats per AVX-512 vector), so every lane of every vector is a real output whatever the geometry
// (stride, dilation, padding, groups), and a block of FB filters × OB output columns keeps FB·OB
// accumulators in registers: per tap, OB loads of x, FB broadcasts of w, FB·OB fmas. The f32 tape
// computes in floats (as the definition does in T = float), not in doubles holding floats.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gr_ops_window.h"
#include "grad/conv_lanes.h"
#include "grad/conv_rows.h"
#include "grad/tape.h"
#include "tensor/matmul_simd.h"  // the one fused step of every matmul path (Simd<T>::fma)

namespace gr {

namespace {

using detail::Simd;

template <class R>
struct ConvScratch {
  std::vector<R> xt, wr, yt;
};

// One block: filters f0..f0+FB, output row oh, columns ow0..ow0+OB, samples n0..n0+L.
// xt, yt: the sample block's slices of the scratch.
template <class R, int FB, int OB>
inline void conv_block(const R* xt, const R* wr, const gr_window& g, int64_t cg, int64_t K, int64_t Hp, int64_t Wp,
                       int64_t f0, int64_t oh, int64_t ow0, R* yt) {
  using V = typename Simd<R>::V;
  constexpr int L = Simd<R>::W;
  V acc[FB][OB];
  for (int a = 0; a < FB; ++a)
    for (int b = 0; b < OB; ++b) acc[a][b] = V{};
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i) {
      const R* row = xt + ((c * Hp + oh * g.sh + i * g.dh) * Wp) * L;
      const R* wk = wr + f0 * K + (c * g.kh + i) * g.kw;
      for (int64_t j = 0; j < g.kw; ++j) {
        V xv[OB];
        for (int b = 0; b < OB; ++b) {
          xv[b] = detail::load_v<R>(row + ((ow0 + b) * g.sw + j * g.dw) * L);
          // conv_lanes.h: used by FB fmas. Where the block holds at most 16 accumulators (digits conv2 f64
          // 0.228 -> 0.213 ms, a 64->128 layer 32 -> 28); a 4 x 5 block (LeNet conv2) was 3% slower with it.
          if constexpr (FB * OB <= 16) keep_in_register(xv[b]);
        }
        for (int a = 0; a < FB; ++a) {
          const R wv = wk[a * K + j];
          for (int b = 0; b < OB; ++b) acc[a][b] = Simd<R>::fma(xv[b], wv, acc[a][b]);
        }
      }
    }
  // lane l is the block's sample l (conv_fwd transposes yt into y)
  for (int a = 0; a < FB; ++a)
    for (int b = 0; b < OB; ++b) detail::store_v<R>(yt + (((f0 + a) * g.oh + oh) * g.ow + ow0 + b) * L, acc[a][b]);
}

// Blocks of FB filters × OB columns; a last partial block of either overlaps the one before it (the
// overlapped outputs are recomputed to the same bits), so only FB ≤ Fg and OB ≤ OW are needed.
template <class R, int FB, int OB>
void conv_blocks(const R* xt, const R* wr, const gr_window& g, int64_t Hp, int64_t Wp, R* yt) {
  constexpr int L = Simd<R>::W;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw;
  for (int64_t nb = 0; nb * L < g.n; ++nb)
    for (int64_t fb = 0; fb < fg; fb += FB) {
      const int64_t f0 = std::min<int64_t>(fb, fg - FB);
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ob = 0; ob < g.ow; ob += OB)
          conv_block<R, FB, OB>(xt + nb * cg * Hp * Wp * L, wr, g, cg, K, Hp, Wp, f0, oh, std::min<int64_t>(ob, g.ow - OB),
                                yt + nb * fg * g.oh * g.ow * L);
    }
}

// The forward's block of FB filters × OB columns (as 10·FB + OB): of the shapes with 12 to 24 accumulators
// that fit (FB ≤ Fg, OB ≤ OW), the one computing the fewest outputs — a last partial block recomputes the
// overlap, so LeNet conv2 (OW 10) in 4 × 4 blocks computed 12 columns for 10 and conv1 (Fg 6) 8 filters
// for 6; ties go to the first listed. Narrower layers take 4 × 1, 1 × 4 or 1 × 1.
inline int fwd_block_shape(int64_t fg, int64_t ow) {
  static constexpr int kShapes[][2] = {{4, 4}, {4, 5}, {6, 4}, {4, 6}, {3, 4}, {4, 3}};
  int best = 0;
  int64_t best_work = 0;
  for (const auto& sh : kShapes) {
    if (sh[0] > fg || sh[1] > ow) continue;
    const int64_t work = (fg + sh[0] - 1) / sh[0] * sh[0] * ((ow + sh[1] - 1) / sh[1] * sh[1]);
    if (best == 0 || work < best_work) best = 10 * sh[0] + sh[1], best_work = work;
  }
  if (best) return best;
  return fg >= 4 ? 41 : ow >= 4 ? 14 : 11;
}

// lanes [NB, Cn, P, L] (lane l of a block: sample NB·L + l; Cn channels of group grp) into out [N, Ct, P],
// widened: L × L tiles of (positions, samples) transposed in registers (transpose_block), each sample's L
// positions stored as one run; the positions past the last whole tile one by one. The forward's yt (Cn =
// Fg, Ct = F) and dx's dxt (Cn = Cg, Ct = C) leave the sample lanes this way. (The element-by-element copy
// read yt L apart: 6% of the LeNet f32 step, and the digits CNN's conv1 spent as long in it as in its
// arithmetic.)
template <class R>
void rows_from_lanes(const R* lanes, int64_t n, int64_t cn, int64_t P, int64_t ct, int64_t grp, double* out) {
  using V = typename Simd<R>::V;
  constexpr int L = Simd<R>::W;
  typedef double Wide __attribute__((vector_size(L * sizeof(double))));
  const int64_t tiles = P / L * L;
  for (int64_t nb = 0; nb * L < n; ++nb) {
    const int64_t count = std::min<int64_t>(L, n - nb * L);
    for (int64_t c = 0; c < cn; ++c) {
      const R* block = lanes + (nb * cn + c) * P * L;
      double* row = out + (nb * L * ct + grp * cn + c) * P;  // sample nb·L's row; sample l's is l·Ct·P further
      for (int64_t p0 = 0; p0 < tiles; p0 += L) {
        V r[L];
        for (int i = 0; i < L; ++i) r[i] = detail::load_v<R>(block + (p0 + i) * L);
        detail::transpose_block<R>(r);  // r[l]: sample l at positions p0 .. p0 + L
        for (int64_t l = 0; l < count; ++l) {
          const Wide w = __builtin_convertvector(r[l], Wide);
          std::memcpy(row + l * ct * P + p0, &w, sizeof w);
        }
      }
      for (int64_t p = tiles; p < P; ++p)
        for (int64_t l = 0; l < count; ++l) row[l * ct * P + p] = static_cast<double>(block[p * L + l]);
    }
  }
}

template <class R>
void conv_fwd(const double* x, const double* w, const gr_window& g, double* y, ConvScratch<R>& s) {
  constexpr int L = Simd<R>::W;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw, P = g.oh * g.ow;
  const int64_t Hp = g.h + g.pt + g.pb, Wp = g.w + g.pl + g.pr, Np = (g.n + L - 1) / L * L;
  s.xt.assign(static_cast<size_t>(cg * Hp * Wp * Np), R(0));
  s.wr.resize(static_cast<size_t>(fg * K));
  s.yt.resize(static_cast<size_t>(fg * P * Np));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t n = 0; n < g.n; ++n) {
        const double* plane = x + (n * g.c + grp * cg + c) * g.h * g.w;
        for (int64_t ih = 0; ih < g.h; ++ih) {
          R* dst = s.xt.data() + (((n / L * cg + c) * Hp + ih + g.pt) * Wp + g.pl) * L + n % L;
          for (int64_t iw = 0; iw < g.w; ++iw) dst[iw * L] = static_cast<R>(plane[ih * g.w + iw]);
        }
      }
    for (int64_t e = 0; e < fg * K; ++e) s.wr[static_cast<size_t>(e)] = static_cast<R>(w[grp * fg * K + e]);
    const R* xt = s.xt.data();
    const R* wr = s.wr.data();
    R* yt = s.yt.data();
    switch (fwd_block_shape(fg, g.ow)) {
      case 44: conv_blocks<R, 4, 4>(xt, wr, g, Hp, Wp, yt); break;
      case 45: conv_blocks<R, 4, 5>(xt, wr, g, Hp, Wp, yt); break;
      case 64: conv_blocks<R, 6, 4>(xt, wr, g, Hp, Wp, yt); break;
      case 46: conv_blocks<R, 4, 6>(xt, wr, g, Hp, Wp, yt); break;
      case 34: conv_blocks<R, 3, 4>(xt, wr, g, Hp, Wp, yt); break;
      case 43: conv_blocks<R, 4, 3>(xt, wr, g, Hp, Wp, yt); break;
      case 41: conv_blocks<R, 4, 1>(xt, wr, g, Hp, Wp, yt); break;
      case 14: conv_blocks<R, 1, 4>(xt, wr, g, Hp, Wp, yt); break;
      default: conv_blocks<R, 1, 1>(xt, wr, g, Hp, Wp, yt); break;
    }
    rows_from_lanes<R>(yt, g.n, fg, P, g.f, grp, y);
  }
}

// ---- forward, lanes along an output row -----------------------------------------------------------------
// Where an output row is whole vectors wide at column stride 1 (digits conv1: 8 columns, one vector of
// doubles), the lanes can be a row's columns instead of the samples: tap (c, i, j) of columns ow0 .. ow0 + L
// is the run xp[c][oh·SH + i·DH][ow0 + j·DW ..] of the sample's padded input, and a block's outputs are a
// run of y — no transposes into and out of sample lanes (for that layer they took as long as its
// arithmetic). A block is FB filters × RB output rows; the same chains: acc from +0, fma over (c, i, j)
// ascending. xp [Cg, Hp, Wp]: one sample's group of channels in R, zero-padded.
template <class R, bool Half, int FB, int RB>
inline void row_block(const R* xp, const R* wr, const gr_window& g, int64_t cg, int64_t K, int64_t Hp, int64_t Wp,
                      int64_t f0, int64_t oh0, int64_t ow0, double* y) {
  using VT = ConvLanes<R, Half>;
  typename VT::V acc[FB][RB];
  for (int a = 0; a < FB; ++a)
    for (int r = 0; r < RB; ++r) acc[a][r] = typename VT::V{};
  for (int64_t c = 0; c < cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i) {
      const R* run = xp + (c * Hp + oh0 * g.sh + i * g.dh) * Wp + ow0;
      const R* wk = wr + f0 * K + (c * g.kh + i) * g.kw;
      for (int64_t j = 0; j < g.kw; ++j) {
        typename VT::V xv[RB];
        for (int r = 0; r < RB; ++r) {
          xv[r] = VT::load(run + r * g.sh * Wp + j * g.dw);
          if constexpr (FB * RB <= 16) keep_in_register(xv[r]);  // as conv_block's
        }
        for (int a = 0; a < FB; ++a) {
          const R wv = wk[a * K + j];
          for (int r = 0; r < RB; ++r) acc[a][r] = VT::fma(xv[r], wv, acc[a][r]);
        }
      }
    }
  for (int a = 0; a < FB; ++a)
    for (int r = 0; r < RB; ++r) store_widened<R, Half>(y + ((f0 + a) * g.oh + oh0 + r) * g.ow + ow0, acc[a][r]);
}

// One sample's group: blocks of FB filters × RB rows × a vector of columns; a last partial block of each
// overlaps the one before it (recomputing the same bits), so FB ≤ Fg, RB ≤ OH and L ≤ OW are needed.
template <class R, bool Half, int FB, int RB>
void row_blocks(const R* xp, const R* wr, const gr_window& g, int64_t Hp, int64_t Wp, double* y) {
  constexpr int L = ConvLanes<R, Half>::W;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw;
  for (int64_t fb = 0; fb < fg; fb += FB)
    for (int64_t rb = 0; rb < g.oh; rb += RB)
      for (int64_t ob = 0; ob < g.ow; ob += L)
        row_block<R, Half, FB, RB>(xp, wr, g, cg, K, Hp, Wp, std::min<int64_t>(fb, fg - FB), std::min<int64_t>(rb, g.oh - RB),
                                   std::min<int64_t>(ob, g.ow - L), y);
}

template <class R, bool Half>
void conv_fwd_rows(const double* x, const double* w, const gr_window& g, double* y, ConvScratch<R>& s) {
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw, P = g.oh * g.ow;
  const int64_t Hp = g.h + g.pt + g.pb, Wp = g.w + g.pl + g.pr;
  s.xt.assign(static_cast<size_t>(cg * Hp * Wp), R(0));  // the padding stays zero; the inside is each sample's
  s.wr.resize(static_cast<size_t>(fg * K));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t e = 0; e < fg * K; ++e) s.wr[static_cast<size_t>(e)] = static_cast<R>(w[grp * fg * K + e]);
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t ih = 0; ih < g.h; ++ih) {
          const double* src = x + ((n * g.c + grp * cg + c) * g.h + ih) * g.w;
          R* dst = s.xt.data() + (c * Hp + ih + g.pt) * Wp + g.pl;
          for (int64_t iw = 0; iw < g.w; ++iw) dst[iw] = static_cast<R>(src[iw]);
        }
      const R* xp = s.xt.data();
      const R* wr = s.wr.data();
      double* yn = y + (n * g.f + grp * fg) * P;
      switch (fwd_block_shape(fg, g.oh)) {
        case 44: row_blocks<R, Half, 4, 4>(xp, wr, g, Hp, Wp, yn); break;
        case 45: row_blocks<R, Half, 4, 5>(xp, wr, g, Hp, Wp, yn); break;
        case 64: row_blocks<R, Half, 6, 4>(xp, wr, g, Hp, Wp, yn); break;
        case 46: row_blocks<R, Half, 4, 6>(xp, wr, g, Hp, Wp, yn); break;
        case 34: row_blocks<R, Half, 3, 4>(xp, wr, g, Hp, Wp, yn); break;
        case 43: row_blocks<R, Half, 4, 3>(xp, wr, g, Hp, Wp, yn); break;
        case 41: row_blocks<R, Half, 4, 1>(xp, wr, g, Hp, Wp, yn); break;
        case 14: row_blocks<R, Half, 1, 4>(xp, wr, g, Hp, Wp, yn); break;
        default: row_blocks<R, Half, 1, 1>(xp, wr, g, Hp, Wp, yn); break;
      }
    }
  }
}

// Which lanes the forward runs on. Along a row where the layer has few taps (at most 32: one input channel,
// a depthwise group) and its rows fill whole vectors: there the sample lanes' transposes cost as much as
// the arithmetic (test_window GR_WINDOW_BENCH=1, 12-07: digits conv1 f64 0.061 → 0.051 ms, f32 0.042 →
// 0.036 on half vectors; LeNet conv1 f64 0.49 → 0.37 on half vectors, f32 0.265 → 0.235; depthwise 3x3
// f64 0.45 → 0.35). Of the full and the half vector (AVX-512 only) the one computing fewer columns
// (ties: full), and not where more than 1/7 of them would be recomputed overlap. With many taps the
// samples win (a 64-channel 3x3 layer 33 ms samples, 41 ms rows: a block's rows of 64 planes leave L1).
enum class FwdLanes { Samples, RowFull, RowHalf };
template <class R>
FwdLanes fwd_lanes(const gr_window& g) {
  constexpr int64_t L = Simd<R>::W;
  if (g.sw != 1 || g.c / g.groups * g.kh * g.kw > 32) return FwdLanes::Samples;
  const auto columns = [&](int64_t lanes) { return g.ow < lanes ? INT64_MAX : (g.ow + lanes - 1) / lanes * lanes; };
  const int64_t full = columns(L), half = kConvHalfLanes ? columns(L / 2) : INT64_MAX;
  const int64_t best = std::min(full, half);
  if (best == INT64_MAX || 7 * best > 8 * g.ow) return FwdLanes::Samples;
  return full <= half ? FwdLanes::RowFull : FwdLanes::RowHalf;
}

// ---- dx (stride 1) ---------------------------------------------------------------------------------------
// gt [NB, OH, Gw, Fg, L]: one group's output gradient in R, f innermost (the chain's walk), columns
// zero-padded so that every tap j of every input cell reads a slot: output column ow = iw + PL − j·DW sits
// at storage column ow + ow_off. wd [Cg, KH, KW, Fg]: the group's weights in R, f innermost.
// dxt [NB, Cg, H, W, L]: the group's input gradient. Per cell and lane, gr_conv2d_win_bwd_a's sum: acc
// from +0, over the taps (i, j) ascending acc = acc + d, d = the fma chain over f ascending from +0.
// The taps i whose row misses the output are skipped as in the definition (a row's cells share them);
// a tap j whose column misses reads zeros, so its d is +0 (for finite weights: conv_dx checks) and
// acc + (+0) = acc, a sum from +0 never being −0. CB channels × OB cells are independent chains
// sharing each g load.
template <class R, int CB, int OB>
inline void dx_block(const R* gt, const R* wd, const gr_window& g, int64_t fg, int64_t Gw, int64_t ow_off, int64_t c0,
                     int64_t ih, int64_t iw0, R* dxt) {
  using V = typename Simd<R>::V;
  constexpr int L = Simd<R>::W;
  const int64_t cstride = g.kh * g.kw * fg;
  // acc lives in dxt (one add per tap after Fg fmas), so the registers hold CB·OB chains of d
  R* out[CB][OB];
  for (int a = 0; a < CB; ++a)
    for (int b = 0; b < OB; ++b) {
      out[a][b] = dxt + (((c0 + a) * g.h + ih) * g.w + iw0 + b) * L;
      detail::store_v<R>(out[a][b], V{});
    }
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t oh = ih + g.pt - i * g.dh;
    if (oh < 0 || oh >= g.oh) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const R* gp = gt + ((oh * Gw + iw0 + g.pl - j * g.dw + ow_off) * fg) * L;
      const R* wp = wd + (c0 * g.kh + i) * g.kw * fg + j * fg;
      V d[CB][OB];
      for (int a = 0; a < CB; ++a)
        for (int b = 0; b < OB; ++b) d[a][b] = V{};
      for (int64_t f = 0; f < fg; ++f) {
        V gv[OB];
        for (int b = 0; b < OB; ++b) {
          gv[b] = detail::load_v<R>(gp + (b * fg + f) * L);
          keep_in_register(gv[b]);  // conv_lanes.h: used by CB fmas
        }
        for (int a = 0; a < CB; ++a) {
          const R wv = wp[a * cstride + f];
          for (int b = 0; b < OB; ++b) d[a][b] = Simd<R>::fma(gv[b], wv, d[a][b]);
        }
      }
      for (int a = 0; a < CB; ++a)
        for (int b = 0; b < OB; ++b)  // acc = acc + d, gr_radd per lane
          detail::store_v<R>(out[a][b], detail::load_v<R>(out[a][b]) + d[a][b]);
    }
  }
}

template <class R, int CB, int OB>
void dx_blocks(const R* gt, const R* wd, const gr_window& g, int64_t Gw, int64_t ow_off, R* dxt) {
  constexpr int L = Simd<R>::W;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups;
  for (int64_t nb = 0; nb * L < g.n; ++nb)
    for (int64_t cb = 0; cb < cg; cb += CB)
      for (int64_t ih = 0; ih < g.h; ++ih)
        for (int64_t ob = 0; ob < g.w; ob += OB)
          dx_block<R, CB, OB>(gt + nb * g.oh * Gw * fg * L, wd, g, fg, Gw, ow_off, std::min<int64_t>(cb, cg - CB), ih,
                              std::min<int64_t>(ob, g.w - OB), dxt + nb * cg * g.h * g.w * L);
}

// G's group grp into gt [NB, OH, Gw, Fg, L] at columns ow + ow_off: per (sample block, filter) L × L tiles of
// (samples, positions) transposed in registers, each position's L samples one vector store (lanes past N
// zero); positions past the last whole tile one by one. The padding columns are the caller's zeros. (The
// element-by-element scatter, with the copy out of dxt, took as long as dx's arithmetic on the digits CNN's
// conv2 in f32.)
template <class R>
void gradient_to_lanes(const double* gy, const gr_window& g, int64_t grp, int64_t Gw, int64_t ow_off, R* gt) {
  using V = typename Simd<R>::V;
  constexpr int L = Simd<R>::W;
  const int64_t fg = g.f / g.groups, P = g.oh * g.ow, tiles = P / L * L;
  for (int64_t nb = 0; nb * L < g.n; ++nb) {
    const int64_t count = std::min<int64_t>(L, g.n - nb * L);
    for (int64_t f = 0; f < fg; ++f) {
      const double* src = gy + (nb * L * g.f + grp * fg + f) * P;  // sample nb·L's plane; sample l's is l·F·P further
      const auto cell = [&](int64_t p) { return gt + (((nb * g.oh + p / g.ow) * Gw + p % g.ow + ow_off) * fg + f) * L; };
      for (int64_t p0 = 0; p0 < tiles; p0 += L) {
        V r[L];
        load_transposed<R>(src + p0, g.f * P, count, r);  // conv_rows.h; r[k]: position p0 + k, the block's samples
        for (int k = 0; k < L; ++k) detail::store_v<R>(cell(p0 + k), r[k]);
      }
      for (int64_t p = tiles; p < P; ++p)
        for (int64_t l = 0; l < count; ++l) cell(p)[l] = static_cast<R>(src[l * g.f * P + p]);
    }
  }
}

template <class R>
bool conv_dx(const double* gy, const double* w, const gr_window& g, double* acc, ConvScratch<R>& s) {
  constexpr int L = Simd<R>::W;
  if (g.sh != 1 || g.sw != 1) return false;
  // Where the direct loop pays (test_window GR_WINDOW_SIDE=x, 12-07, against tape_conv_dx.cpp's chunked
  // product and register-row col2im): only on floats (16 samples a vector) with at most 64 filters a
  // group, and where at least 3/4 of a row's W·KW column taps land. f64: digits conv2 0.33 direct against
  // 0.26 ms product, a 64->128 3x3 layer 44 against 26; f32: digits conv2 0.14 against 0.17, that layer
  // 25.5 against 14.5, LeNet conv2 (OW 10 of W 14: a "valid" conv of a small image) the product.
  if (!std::is_same_v<R, float> || g.f / g.groups > 64 || 4 * g.ow < 3 * g.w) return false;
  for (int64_t e = 0; e < g.f * (g.c / g.groups) * g.kh * g.kw; ++e)
    if (!std::isfinite(static_cast<R>(w[e]))) return false;
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw, NB = (g.n + L - 1) / L;
  const int64_t ow_off = std::max<int64_t>(0, (g.kw - 1) * g.dw - g.pl);
  const int64_t Gw = ow_off + std::max<int64_t>(g.ow, g.w + g.pl);
  s.xt.assign(static_cast<size_t>(NB * g.oh * Gw * fg * L), R(0));  // gt
  s.yt.resize(static_cast<size_t>(NB * cg * g.h * g.w * L));         // dxt
  s.wr.resize(static_cast<size_t>(fg * K));                          // wd
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    gradient_to_lanes<R>(gy, g, grp, Gw, ow_off, s.xt.data());
    for (int64_t f = 0; f < fg; ++f)
      for (int64_t k = 0; k < K; ++k) s.wr[static_cast<size_t>(k * fg + f)] = static_cast<R>(w[(grp * fg + f) * K + k]);
    // CB channels a block: one that divides Cg where it can (a partial block repeats channels)
    const int cb = cg % 4 == 0 ? 4 : cg % 3 == 0 ? 3 : cg >= 2 ? 2 : 1;
    const bool wide_w = g.w >= 4;
    const R* gt = s.xt.data();
    const R* wd = s.wr.data();
    R* dxt = s.yt.data();
    switch (cb * 2 + (wide_w ? 1 : 0)) {
      case 9: dx_blocks<R, 4, 4>(gt, wd, g, Gw, ow_off, dxt); break;
      case 8: dx_blocks<R, 4, 1>(gt, wd, g, Gw, ow_off, dxt); break;
      case 7: dx_blocks<R, 3, 4>(gt, wd, g, Gw, ow_off, dxt); break;
      case 6: dx_blocks<R, 3, 1>(gt, wd, g, Gw, ow_off, dxt); break;
      case 5: dx_blocks<R, 2, 4>(gt, wd, g, Gw, ow_off, dxt); break;
      case 4: dx_blocks<R, 2, 1>(gt, wd, g, Gw, ow_off, dxt); break;
      case 3: dx_blocks<R, 1, 4>(gt, wd, g, Gw, ow_off, dxt); break;
      default: dx_blocks<R, 1, 1>(gt, wd, g, Gw, ow_off, dxt); break;
    }
    rows_from_lanes<R>(s.yt.data(), g.n, cg, g.h * g.w, g.c, grp, acc);
  }
  return true;
}

}  // namespace

// conv2d's dx sums (gr_conv2d_win_bwd_a) written to every cell of acc [N, C, H, W], or false (acc untouched)
// where the direct loop does not apply (a stride above 1, or a weight that is not finite): see dx above.
template <class R>
bool conv2d_direct_dx(const double* gy, const double* w, const gr_window& g, double* acc) {
  thread_local ConvScratch<R> scratch;
  return conv_dx<R>(gy, w, g, acc, scratch);
}

template bool conv2d_direct_dx<double>(const double*, const double*, const gr_window&, double*);
template bool conv2d_direct_dx<float>(const double*, const double*, const gr_window&, double*);

// conv2d's forward values (called by Tape::window_values): see the top of this file.
template <class R>
bool conv2d_plane_forward(const double* x, const double* w, const gr_window& g, double* y);  // tape_conv_fwd_plane.cpp

template <class R>
void conv2d_direct(const double* x, const double* w, const gr_window& g, double* y) {
  thread_local ConvScratch<R> scratch;  // reused across steps: no allocation per step
  if (conv2d_plane_forward<R>(x, w, g, y)) return;
  switch (fwd_lanes<R>(g)) {
    case FwdLanes::RowFull: return conv_fwd_rows<R, false>(x, w, g, y, scratch);
    case FwdLanes::RowHalf: return conv_fwd_rows<R, true>(x, w, g, y, scratch);
    case FwdLanes::Samples: return conv_fwd<R>(x, w, g, y, scratch);
  }
}

template void conv2d_direct<double>(const double*, const double*, const gr_window&, double*);
template void conv2d_direct<float>(const double*, const double*, const gr_window&, double*);

}  // namespace gr
