// tape_conv_dx_rows.cpp — conv2d's input gradient on the f64 CPU tape along output rows: G read where it
// lies, no D, no col2im (AVX-512VL; elsewhere tape_conv_dx.cpp's product takes every layer).
//
// Shapes (one group): G [N, Fg, OH, OW], W [Fg, Cg, KH, KW], dx [N, C, H, W] (doubles).
//   wt  [Cg, KH, Fg, KW]   the group's weights, the KW taps of a (c, i, f) side by side
//   buf [2][RB, KW, RL]    a block's d vectors, ML zero columns before them and MR after (ow from −ML)
// Per sample n, channel c, tap row i and a block of RB output rows oh: the chains
//   d[r][j](ow) = Σ_f W[f, c, i, j] · G[n, f, oh + r, ow]   (from +0, one fma each, f ascending)
// for the row's ow in vectors of 4 (lanes past OW loaded as +0), which is gr_conv2d_win_bwd_a's d of tap
// (i, j) for the cells ow·1 − PL + j·DW. Then each dx row ih = (oh + r)·SH − PT + i·DH inside the image
// takes, per run of 4 cells, acc = acc + d[r][j] shifted onto the cells, j ascending. i runs outermost
// and a (c, i) visits each output row once, so every cell sums its taps (i, j) ascending from +0 (the
// planes are zeroed first), the definition's order. A tap whose column misses the cell's output row adds
// a lane of +0: the lanes past OW were +0 times the weights, which are finite (checked; a NaN or an
// infinity there would not be the definition's skip), and a margin lane is +0; acc + (+0) = acc as a sum
// from +0 is never −0. The taps whose row misses are skipped, as in the definition.
//
// The shifted reads of a block's d come one block later (buf alternates): read at once, they would span
// two of the vector stores just made, which store forwarding cannot serve.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gr_ops_window.h"
#include "tensor/matmul_simd.h"

namespace gr {

#if defined(__AVX512F__) && defined(__AVX512VL__)
namespace {

constexpr int kL = 4;  // doubles a vector: 256 bits (this core's 512-bit fma is two 256-bit halves)

struct RowsDx {
  const gr_window& g;
  int64_t fg, cg, OB, Wv, ML, RL;
  __mmask8 g_tail, x_tail;     // the lanes of a row's last G vector (ow < OW) and last dx vector (iw < W)
  std::vector<int64_t> shift;  // per tap j: ML + PL − j·DW, where cell 0's d lies in a buf row
  double* buf[2];
};

// The d vectors of rows oh0 .. oh0 + RB for (c, i) into out [RB, KW, RL] (their ML.. columns).
template <int KW, int OB, int RB>
void rows_block(const RowsDx& s, const double* gn, const double* wk, int64_t oh0, double* out) {
  const gr_window& g = s.g;
  __m256d d[RB][KW][OB];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j)
#pragma GCC unroll 8
      for (int v = 0; v < OB; ++v) d[r][j][v] = _mm256_setzero_pd();
  const int64_t P = g.oh * g.ow;
  for (int64_t f = 0; f < s.fg; ++f) {
    const double* row = gn + f * P + oh0 * g.ow;
    __m256d gv[RB][OB];
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < OB; ++v)
        gv[r][v] = v + 1 < OB ? _mm256_loadu_pd(row + r * g.ow + v * kL) : _mm256_maskz_loadu_pd(s.g_tail, row + r * g.ow + v * kL);
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) {
      const __m256d wv = _mm256_set1_pd(wk[f * KW + j]);
#pragma GCC unroll 8
      for (int r = 0; r < RB; ++r)
        #pragma GCC unroll 8
        for (int v = 0; v < OB; ++v) d[r][j][v] = _mm256_fmadd_pd(wv, gv[r][v], d[r][j][v]);  // fma(w, g, d) per lane
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j)
#pragma GCC unroll 8
      for (int v = 0; v < OB; ++v) _mm256_storeu_pd(out + (r * KW + j) * s.RL + s.ML + v * kL, d[r][j][v]);
}

// A block's d (in, [rows, KW, RL]) added onto the dx rows it feeds, per cell j ascending.
void rows_combine(const RowsDx& s, int64_t kw, const double* in, int64_t rows, int64_t oh0, int64_t i, double* plane) {
  const gr_window& g = s.g;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t ih = (oh0 + r) * g.sh - g.pt + i * g.dh;
    if (ih < 0 || ih >= g.h) continue;  // the definition skips a tap whose row misses
    double* cells = plane + ih * g.w;
    for (int64_t u = 0; u < s.Wv; ++u) {
      const __mmask8 m = u + 1 < s.Wv ? __mmask8(0xF) : s.x_tail;
      __m256d acc = _mm256_maskz_loadu_pd(m, cells + u * kL);
      for (int64_t j = 0; j < kw; ++j)
        acc = _mm256_add_pd(acc, _mm256_loadu_pd(in + (r * kw + j) * s.RL + s.shift[static_cast<size_t>(j)] + u * kL));
      _mm256_mask_storeu_pd(cells + u * kL, m, acc);
    }
  }
}

struct Pending {
  const double* buf = nullptr;
  int64_t rows = 0, oh0 = 0, i = 0;
  double* plane = nullptr;
};

template <int KW, int OB, int RB>
void rows_dx(RowsDx& s, const double* gy, const std::vector<double>& wt, int64_t grp, double* acc) {
  const gr_window& g = s.g;
  Pending prev;
  int flip = 0;
  const auto run = [&](auto block, int64_t rows, const double* gn, const double* wk, int64_t oh0, int64_t i, double* plane) {
    double* out = s.buf[flip];
    block(s, gn, wk, oh0, out);
    if (prev.buf) rows_combine(s, KW, prev.buf, prev.rows, prev.oh0, prev.i, prev.plane);
    prev = Pending{out, rows, oh0, i, plane};
    flip ^= 1;
  };
  for (int64_t n = 0; n < g.n; ++n) {
    const double* gn = gy + (n * g.f + grp * s.fg) * g.oh * g.ow;
    for (int64_t c = 0; c < s.cg; ++c) {
      double* plane = acc + (n * g.c + grp * s.cg + c) * g.h * g.w;
      std::fill(plane, plane + g.h * g.w, 0.0);
      for (int64_t i = 0; i < g.kh; ++i) {
        const double* wk = wt.data() + (c * g.kh + i) * s.fg * KW;
        int64_t oh0 = 0;
        for (; oh0 + RB <= g.oh; oh0 += RB) run(rows_block<KW, OB, RB>, RB, gn, wk, oh0, i, plane);
        for (; oh0 < g.oh; ++oh0) run(rows_block<KW, OB, 1>, 1, gn, wk, oh0, i, plane);
      }
    }
  }
  if (prev.buf) rows_combine(s, KW, prev.buf, prev.rows, prev.oh0, prev.i, prev.plane);
}

// Rows a block: as many as keep KW·OB·RB ≤ 20 chains in registers (16 ymm of 32 left for G and w), and
// no more than the image has (the digits CNN's conv2: 4 rows of one vector, 3 taps: 12 chains).
template <int KW>
bool rows_dx_kw(RowsDx& s, const double* gy, const std::vector<double>& wt, int64_t grp, double* acc) {
  const int64_t oh = s.g.oh;
  switch (s.OB) {
    case 1:
      if (oh >= 20 / KW) rows_dx<KW, 1, 20 / KW>(s, gy, wt, grp, acc);
      else if (oh >= 4) rows_dx<KW, 1, 4>(s, gy, wt, grp, acc);
      else rows_dx<KW, 1, 2>(s, gy, wt, grp, acc);
      return true;
    case 2: rows_dx<KW, 2, 10 / KW>(s, gy, wt, grp, acc); return true;
    case 3: rows_dx<KW, 3, 6 / KW>(s, gy, wt, grp, acc); return true;
  }
  return false;
}

}  // namespace

// conv2d's dx sums (gr_conv2d_win_bwd_a) written to every cell of acc [N, C, H, W], or false (acc
// untouched) where this path does not apply: column stride 1, KW 3 or 5, OW at most 12 (three vectors),
// finite weights.
bool conv2d_rows_dx(const double* gy, const double* w, const gr_window& g, double* acc) {
  if (g.sw != 1 || (g.kw != 3 && g.kw != 5) || g.ow > 3 * kL) return false;
  const int64_t fg = g.f / g.groups, cg = g.c / g.groups, K = cg * g.kh * g.kw;
  if (fg < 32 && K > 32) return false;
  for (int64_t e = 0; e < g.f * K; ++e)
    if (!std::isfinite(w[e])) return false;
  RowsDx s{g, fg, cg, (g.ow + kL - 1) / kL, (g.w + kL - 1) / kL, 0, 0, 0, 0, {}, {nullptr, nullptr}};
  s.g_tail = static_cast<__mmask8>((1u << (g.ow - (s.OB - 1) * kL)) - 1);
  s.x_tail = static_cast<__mmask8>((1u << (g.w - (s.Wv - 1) * kL)) - 1);
  // cell iw reads tap j's d at ow = iw + PL − j·DW: from −ML to Wv·4 − 1 + PL
  int64_t lo = 0, hi = s.OB * kL;
  for (int64_t j = 0; j < g.kw; ++j) {
    lo = std::min<int64_t>(lo, g.pl - j * g.dw);
    hi = std::max<int64_t>(hi, s.Wv * kL + g.pl - j * g.dw);
  }
  s.ML = -lo;
  s.RL = s.ML + hi;
  for (int64_t j = 0; j < g.kw; ++j) s.shift.push_back(s.ML + g.pl - j * g.dw);
  const int64_t rows_max = 20 / g.kw;  // the largest RB of rows_dx_kw
  thread_local std::vector<double> buf, wt;
  buf.assign(static_cast<size_t>(2 * rows_max * g.kw * s.RL), 0.0);  // the margins stay +0
  s.buf[0] = buf.data();
  s.buf[1] = buf.data() + rows_max * g.kw * s.RL;
  wt.resize(static_cast<size_t>(cg * g.kh * fg * g.kw));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t f = 0; f < fg; ++f)
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t i = 0; i < g.kh; ++i)
          for (int64_t j = 0; j < g.kw; ++j)
            wt[static_cast<size_t>(((c * g.kh + i) * fg + f) * g.kw + j)] = w[(((grp * fg + f) * cg + c) * g.kh + i) * g.kw + j];
    if (!(g.kw == 3 ? rows_dx_kw<3>(s, gy, wt, grp, acc) : rows_dx_kw<5>(s, gy, wt, grp, acc))) return false;
  }
  return true;
}

#else

bool conv2d_rows_dx(const double*, const double*, const gr_window&, double*) { return false; }  // AVX-512VL only

#endif

}  // namespace gr
