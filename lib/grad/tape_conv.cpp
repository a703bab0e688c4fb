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
#include <cstdint>
#include <vector>

#include "gr_ops_window.h"
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
        for (int b = 0; b < OB; ++b) xv[b] = detail::load_v<R>(row + ((ow0 + b) * g.sw + j * g.dw) * L);
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
    const bool wide_f = fg >= 4, wide_w = g.ow >= 4;
    R* yt = s.yt.data();
    if (wide_f && wide_w) conv_blocks<R, 4, 4>(xt, wr, g, Hp, Wp, yt);
    else if (wide_f) conv_blocks<R, 4, 1>(xt, wr, g, Hp, Wp, yt);
    else if (wide_w) conv_blocks<R, 1, 4>(xt, wr, g, Hp, Wp, yt);
    else conv_blocks<R, 1, 1>(xt, wr, g, Hp, Wp, yt);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t f = 0; f < fg; ++f) {
        double* dst = y + (n * g.f + grp * fg + f) * P;
        const R* src = yt + (n / L * fg + f) * P * L + n % L;
        for (int64_t p = 0; p < P; ++p) dst[p] = static_cast<double>(src[p * L]);
      }
  }
}

}  // namespace

// conv2d's forward values (called by Tape::window_values): see the top of this file.
template <class R>
void conv2d_direct(const double* x, const double* w, const gr_window& g, double* y) {
  thread_local ConvScratch<R> scratch;  // reused across steps: no allocation per step
  conv_fwd<R>(x, w, g, y, scratch);
}

template void conv2d_direct<double>(const double*, const double*, const gr_window&, double*);
template void conv2d_direct<float>(const double*, const double*, const gr_window&, double*);

}  // namespace gr
