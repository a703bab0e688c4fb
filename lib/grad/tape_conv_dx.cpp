// tape_conv_dx.cpp — conv2d's input gradient by a product and col2im, where neither direct loop applies
// (tape_conv.cpp's on floats, tape_conv_dx_plane.cpp's: a column stride above 1, column taps other than 3
// or 5).
//
// Shapes (one group): G [N, Fg, P] (P = OH·OW, doubles holding the tape's R values), W [Fg, K] (K =
// Cg·KH·KW, k = (c, i, j)), dx [N, C, H, W].
//   gt [(n, p), Fg]   the group's gradient, a row per output position, in R
//   D  [K, n·P + p]   D[k, (n, p)] = Σ_f W[f, k]·G[(n, p), f], the chain over f (matmul_exact in R: the
//                     f32 tape's product is the float contract on floats)
//   dx[n, c, h, w]    gr_conv2d_win_bwd_a: from +0, over the taps (i, j) ascending that reach the cell,
//                     acc = acc + D[(c, i, j), (n, oh, ow)]
// The samples go in chunks whose D stays in L2 (LeNet conv2's D is 150 × 6400: 3.8 MB of floats, written
// by the product and read back by col2im from memory when made whole); on the f64 tape, where a chunk
// would hold two samples or more, one sample at a time with G itself as B (no gt).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gr_ops_window.h"
#include "grad/conv_rows.h"
#include "grad/tape_real.h"
#include "tensor/matmul.h"
#include "tensor/matmul_simd.h"

namespace gr {

namespace {

// col2im, any geometry: per sample, k ascending, so each cell sums its taps (i, j) ascending — the
// documented order; along a row of cells the adds are independent. d: the chunk's D, rows of NPc.
template <class R>
void col2im_cells(const R* d, int64_t NPc, const gr_window& g, int64_t c0, int64_t n0, int64_t nc, double* acc) {
  const int64_t cg = g.c / g.groups, P = g.oh * g.ow;
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t c = 0; c < cg; ++c) {
      double* plane = acc + ((n0 + n) * g.c + c0 + c) * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const R* row = d + ((c * g.kh + i) * g.kw + j) * NPc + n * P;
          // the outputs ow whose tap j lands inside the row: 0 <= ow·sw − pl + j·dw < W
          const int64_t off = j * g.dw - g.pl;
          const int64_t ow0 = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
          const int64_t ow1 = std::min<int64_t>(g.ow, g.w - 1 - off < 0 ? 0 : (g.w - 1 - off) / g.sw + 1);
          for (int64_t oh = 0; oh < g.oh; ++oh) {
            const int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            const R* src = row + oh * g.ow;
            double* dst = plane + ih * g.w + off;
            for (int64_t ow = ow0; ow < ow1; ++ow)
              dst[ow * g.sw] = static_cast<double>(gr_radd(static_cast<R>(dst[ow * g.sw]), src[ow]));
          }
        }
    }
}

#if defined(__AVX512F__)
// col2im at stride 1, a row of cells in registers: per output row h and run of L cells, acc from +0 and,
// over the taps (i, j) ascending, acc = acc + the D row shifted onto the cells, its lanes whose tap misses
// masked to +0 (acc + (+0) = acc: a sum from +0 is never −0). Each cell gets the definition's adds in its
// order; the cells are written once (a cell no tap reaches: +0). CB channels' rows run side by side (one
// chain of dependent adds each). The adds into memory of col2im_cells read cells the previous tap's
// shifted store had just written, which vector stores cannot forward.
template <class R, int CB, int SEGS>
void col2im_rows_cb(const R* d, int64_t NPc, const gr_window& g, int64_t c0, int64_t n0, int64_t nc, double* acc,
                    const std::vector<int64_t>& shift, const std::vector<uint32_t>& mask) {
  using V = typename detail::Simd<R>::V;
  constexpr int L = detail::Simd<R>::W;
  const int64_t cg = g.c / g.groups, P = g.oh * g.ow, HW = g.h * g.w, KK = g.kh * g.kw;
  const int64_t segs = (g.w + L - 1) / L;
  for (int64_t n = 0; n < nc; ++n)
    for (int64_t cb = 0; cb < cg; cb += CB) {
      double* plane = acc + ((n0 + n) * g.c + c0 + cb) * HW;
      const R* dn = d + cb * KK * NPc + n * P;  // D row of tap (cb, 0, 0), sample n
      for (int64_t h = 0; h < g.h; ++h)
        for (int64_t s0 = 0; s0 < segs; s0 += SEGS) {  // SEGS runs of a row side by side (SEGS = 1: one by one)
          V sum[CB][SEGS];
#pragma GCC unroll 8
          for (int a = 0; a < CB; ++a)
#pragma GCC unroll 4
            for (int q = 0; q < SEGS; ++q) sum[a][q] = V{};
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t oh = h + g.pt - i * g.dh;
            if (oh < 0 || oh >= g.oh) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
#pragma GCC unroll 4
              for (int q = 0; q < SEGS; ++q) {
                const size_t sj = static_cast<size_t>((s0 + q) * g.kw + j);
                const uint32_t m = mask[sj];
                // lane l reads the row at shift + l; masked lanes are not read (the address may lie before it)
                const uintptr_t at = reinterpret_cast<uintptr_t>(dn + (i * g.kw + j) * NPc + oh * g.ow) +
                                     static_cast<uintptr_t>(shift[sj] * static_cast<int64_t>(sizeof(R)));
#pragma GCC unroll 8
                for (int a = 0; a < CB; ++a) {
                  const void* p = reinterpret_cast<const void*>(at + static_cast<uintptr_t>(a * KK * NPc * static_cast<int64_t>(sizeof(R))));
                  if constexpr (std::is_same_v<R, double>)
                    sum[a][q] = sum[a][q] + _mm512_maskz_loadu_pd(static_cast<__mmask8>(m), p);
                  else
                    sum[a][q] = sum[a][q] + _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), p);
                }
              }
            }
          }
#pragma GCC unroll 4
          for (int q = 0; q < SEGS; ++q) {
            const int64_t w0 = (s0 + q) * L, cells = std::min<int64_t>(L, g.w - w0);
#pragma GCC unroll 8
            for (int a = 0; a < CB; ++a) {
              R lanes[L];
              detail::store_v<R>(lanes, sum[a][q]);
              for (int64_t l = 0; l < cells; ++l) plane[a * HW + h * g.w + w0 + l] = static_cast<double>(lanes[l]);
            }
          }
        }
    }
}

// Per run s of L cells and tap j: the shift onto the D row (lane l is cell w = s·L + l, fed by ow = w + pl −
// j·dw) and the lanes that tap feeds (0 <= ow < OW and w < W).
template <class R>
void col2im_rows(const R* d, int64_t NPc, const gr_window& g, int64_t c0, int64_t n0, int64_t nc, double* acc) {
  constexpr int L = detail::Simd<R>::W;
  const int64_t segs = (g.w + L - 1) / L, cg = g.c / g.groups;
  thread_local std::vector<int64_t> shift;
  thread_local std::vector<uint32_t> mask;
  shift.resize(static_cast<size_t>(segs * g.kw));
  mask.resize(static_cast<size_t>(segs * g.kw));
  for (int64_t s = 0; s < segs; ++s)
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t sh = g.pl - j * g.dw + s * L;
      const int64_t lo = std::max<int64_t>(0, -sh), hi = std::min<int64_t>({int64_t{L}, g.ow - sh, g.w - s * L});
      shift[static_cast<size_t>(s * g.kw + j)] = sh;
      mask[static_cast<size_t>(s * g.kw + j)] =
          lo >= hi ? 0u : static_cast<uint32_t>(((uint64_t{1} << hi) - 1) & ~((uint64_t{1} << lo) - 1));
    }
  // CB channels × SEGS runs of a row side by side: up to 12 independent chains of adds (LeNet conv2: 6
  // channels × 2 runs of its 14 cells; 3 × 2 left the adds' latency exposed)
  if (segs == 2 && cg % 6 == 0) col2im_rows_cb<R, 6, 2>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else if (segs == 2 && cg % 4 == 0) col2im_rows_cb<R, 4, 2>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else if (segs == 2 && cg % 3 == 0) col2im_rows_cb<R, 3, 2>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else if (cg % 4 == 0) col2im_rows_cb<R, 4, 1>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else if (cg % 3 == 0) col2im_rows_cb<R, 3, 1>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else if (cg % 2 == 0) col2im_rows_cb<R, 2, 1>(d, NPc, g, c0, n0, nc, acc, shift, mask);
  else col2im_rows_cb<R, 1, 1>(d, NPc, g, c0, n0, nc, acc, shift, mask);
}
#endif

template <class R>
void col2im(const R* d, int64_t NPc, const gr_window& g, int64_t c0, int64_t n0, int64_t nc, double* acc) {
#if defined(__AVX512F__)
  if (g.sh == 1 && g.sw == 1) return col2im_rows<R>(d, NPc, g, c0, n0, nc, acc);
#endif
  // the cells zeroed first: col2im_cells adds into them
  const int64_t cg = g.c / g.groups;
  for (int64_t n = n0; n < n0 + nc; ++n)
    std::fill(acc + (n * g.c + c0) * g.h * g.w, acc + (n * g.c + c0 + cg) * g.h * g.w, 0.0);
  col2im_cells<R>(d, NPc, g, c0, n0, nc, acc);
}

}  // namespace

// conv2d's dx sums (gr_conv2d_win_bwd_a) written to every cell of acc [N, C, H, W]: see the top.
template <class R>
void conv2d_product_dx(const double* gy, const double* w, const gr_window& g, double* acc) {
  const int64_t cg = g.c / g.groups, fg = g.f / g.groups, K = cg * g.kh * g.kw, P = g.oh * g.ow;
  // samples per chunk: D's rows for them in about 512 KB
  const int64_t chunk = std::max<int64_t>(1, (int64_t{512} << 10) / (K * P * static_cast<int64_t>(sizeof(R))));
  const int64_t nchunk = std::min<int64_t>(chunk, g.n);
  thread_local std::vector<R> wr, gt, dc;  // kept across calls: no allocation per step
  wr.resize(static_cast<size_t>(fg * K));
  gt.resize(static_cast<size_t>(nchunk * P * fg));
  dc.resize(static_cast<size_t>(K * nchunk * P));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t e = 0; e < fg * K; ++e) wr[static_cast<size_t>(e)] = static_cast<R>(w[grp * fg * K + e]);
    // f64, where a chunk holds at least two samples: a product per sample whose B is G[n] where it lies
    // ([Fg, P] row-major: no gradient_rows copy), its D [K, P] read by col2im from L2. (test_window
    // GR_WINDOW_SIDE=x, 12-07: LeNet conv2 dx 0.90 -> 0.85 ms, conv1 0.92 -> 0.77, depthwise 1.30 -> 1.15;
    // a stride-2 layer whose one sample's D is 590 KB lost, 8.3 -> 9.0, and keeps the chunks.)
    if constexpr (std::is_same_v<R, double>)
      if (chunk >= 2) {
        for (int64_t n = 0; n < g.n; ++n) {
          const double* gn = gy + (n * g.f + grp * fg) * P;
          matmul_exact(MatmulArgs{wr.data(), 1, K, gn, P, 1, dc.data(), K, fg, P, MatmulStore::Overwrite});
          col2im<R>(dc.data(), P, g, grp * cg, n, 1, acc);
        }
        continue;
      }
    for (int64_t n0 = 0; n0 < g.n; n0 += nchunk) {
      const int64_t nc = std::min<int64_t>(nchunk, g.n - n0);
      gradient_rows<R>(gy, g, grp, n0, n0 + nc, fg, gt.data());  // conv_rows.h: gt [(n, p), Fg]
      // D[k, (n,p)] = Σ_f W[f, k]·G[(n,p), f]: A is W read down its columns, B gt across its rows
      matmul_exact(MatmulArgsOf<R>{wr.data(), 1, K, gt.data(), 1, fg, dc.data(), K, fg, nc * P, MatmulStore::Overwrite});
      col2im<R>(dc.data(), nc * P, g, grp * cg, n0, nc, acc);
    }
  }
}

template void conv2d_product_dx<double>(const double*, const double*, const gr_window&, double*);
template void conv2d_product_dx<float>(const double*, const double*, const gr_window&, double*);

}  // namespace gr
