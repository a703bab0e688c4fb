// gr_ops_window.h — THE window ops (Class Window of gr_op_table.h: conv2d, max_pool2d, avg_pool2d) over
// NCHW tensors, forward and backward, one output element (or one gradient slot) per call: the one
// definition the CPU tape's reference, its fast im2col path (tested bytewise against these), the host
// per-node kernels and the CUDA per-node kernels (the same text under NVRTC) all compute.
//
// Geometry: a gr_window (resolved by the tape: "same"/"valid" are already pads here). x [N,C,H,W],
// conv weight w [F, C/G, KH, KW], output y [N, F (pools: C), OH, OW]; the input cell of output
// (oh, ow) and tap (i, j) is (oh·SH − PT + i·DH, ow·SW − PL + j·DW); outside [0,H)×[0,W) it is padding.
// On the device the geometry is kGrWindowMeta long longs in the metadata slab (gr_window_load).
//
// Orders (docs/numerics.md, "conv2d"), every sum from +0, fma = one rounding (gr_rfma):
//   conv2d y[n,f,oh,ow]    acc = fma(w[f,c,i,j], xp[n,g·Cg+c,ih,iw], acc) over (c, i, j) ascending,
//                          c in f's group g, xp = x with padding 0 (a padded tap is still a step)
//   conv2d dw[f,c,i,j]     acc = fma(g[n,f,oh,ow], xp[n,g·Cg+c,ih,iw], acc) over (n, oh, ow) ascending
//   conv2d dx[n,c,ih,iw]   acc = acc + d over the taps (i, j) ascending that land on (ih, iw),
//                          d = fma(w[f,c',i,j], g[n,f,oh,ow], d) from +0 over f in c's group ascending
//   max_pool2d y           the first largest in-window cell in (i, j) row-major order (padding never
//                          wins; a NaN beats any number and the first NaN stays), as `max`'s fold
//   max_pool2d dx          acc = acc + g[oh,ow] over the windows (oh, ow) ascending whose winner is the cell
//   avg_pool2d y           (Σ over (i, j) ascending of xp) / (KH·KW)   (count_include_pad: padding adds 0)
//   avg_pool2d dx          acc = acc + g[oh,ow] / (KH·KW) over the windows (oh, ow) ascending holding the cell
// A caller adds each backward value into its slot once: slot = slot + acc (a fresh slot: +0 + acc).
//
// The rule triple of a window op <stem>, from its row (Fwd/BwdA/BwdB columns `win`; BwdB `none`: one input):
//   T gr_<stem>_win_fwd(a, b, win, e)           output element e (row-major over [N, F|C, OH, OW])
//   T gr_<stem>_win_bwd_a(gy, a, b, win, i)      the sum for x's element i (row-major over [N, C, H, W])
//   T gr_<stem>_win_bwd_b(gy, a, b, win, i)      the sum for w's element i (conv2d only)
// T the arithmetic type, S the storage type (S = T, or double holding floats on the f32 CPU tape).
#pragma once
#include "gr_device.h"

struct gr_window {
  long long n, c, h, w;        // input
  long long f, oh, ow;         // output channels (pools: c), rows, columns
  long long kh, kw, sh, sw;    // kernel, stride
  long long pt, pl, pb, pr;    // padding top, left, bottom, right
  long long dh, dw, groups;    // dilation, groups (pools: 1, 1, 1)
};
// The metadata block: the fields above in order.
#define kGrWindowMeta 18

GR_HD static inline gr_window gr_window_load(const long long* m) {
  gr_window g;
  g.n = m[0], g.c = m[1], g.h = m[2], g.w = m[3], g.f = m[4], g.oh = m[5], g.ow = m[6];
  g.kh = m[7], g.kw = m[8], g.sh = m[9], g.sw = m[10];
  g.pt = m[11], g.pl = m[12], g.pb = m[13], g.pr = m[14], g.dh = m[15], g.dw = m[16], g.groups = m[17];
  return g;
}

// The output index of tap k (stride s, dilation d, pad p) that reads input index v, or -1 when none.
GR_HD static inline long long gr_window_out_of(long long v, long long k, long long s, long long d, long long p, long long out) {
  const long long num = v + p - k * d;
  if (num < 0 || num % s != 0) return -1;
  const long long o = num / s;
  return o < out ? o : -1;
}

// The windows along one axis that hold input index v: [first, last] (empty when first > last), every
// window o with o·s − p ≤ v ≤ o·s − p + (k − 1)·d (the caller checks the dilation's step).
GR_HD static inline long long gr_window_first(long long v, long long k, long long s, long long d, long long p) {
  const long long num = v + p - (k - 1) * d;
  return num <= 0 ? 0 : (num + s - 1) / s;
}
GR_HD static inline long long gr_window_last(long long v, long long s, long long p, long long out) {
  const long long o = (v + p) / s;
  return o < out - 1 ? o : out - 1;
}

// ---- conv2d ------------------------------------------------------------------------------------------
template <class T, class S>
GR_HD static inline T gr_conv2d_win_fwd(const S* x, const S* w, const gr_window& g, long long e) {
  const long long ow = e % g.ow, oh = e / g.ow % g.oh, f = e / (g.ow * g.oh) % g.f, n = e / (g.ow * g.oh * g.f);
  const long long cg = g.c / g.groups, fg = g.f / g.groups, c0 = f / fg * cg;
  T acc = T(0);
  for (long long c = 0; c < cg; ++c)
    for (long long i = 0; i < g.kh; ++i) {
      const long long ih = oh * g.sh - g.pt + i * g.dh;
      for (long long j = 0; j < g.kw; ++j) {
        const long long iw = ow * g.sw - g.pl + j * g.dw;
        const T xv = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? (T)x[((n * g.c + c0 + c) * g.h + ih) * g.w + iw] : T(0);
        acc = gr_rfma((T)w[((f * cg + c) * g.kh + i) * g.kw + j], xv, acc);
      }
    }
  return acc;
}

template <class T, class S>
GR_HD static inline T gr_conv2d_win_bwd_b(const S* gy, const S* x, const S* w, const gr_window& g, long long e) {
  (void)w;
  const long long j = e % g.kw, i = e / g.kw % g.kh, cg = g.c / g.groups, c = e / (g.kw * g.kh) % cg,
                  f = e / (g.kw * g.kh * cg), c0 = f / (g.f / g.groups) * cg;
  T acc = T(0);
  for (long long n = 0; n < g.n; ++n)
    for (long long oh = 0; oh < g.oh; ++oh) {
      const long long ih = oh * g.sh - g.pt + i * g.dh;
      for (long long ow = 0; ow < g.ow; ++ow) {
        const long long iw = ow * g.sw - g.pl + j * g.dw;
        const T xv = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? (T)x[((n * g.c + c0 + c) * g.h + ih) * g.w + iw] : T(0);
        acc = gr_rfma((T)gy[((n * g.f + f) * g.oh + oh) * g.ow + ow], xv, acc);
      }
    }
  return acc;
}

template <class T, class S>
GR_HD static inline T gr_conv2d_win_bwd_a(const S* gy, const S* x, const S* w, const gr_window& g, long long e) {
  (void)x;
  const long long iw = e % g.w, ih = e / g.w % g.h, ca = e / (g.w * g.h) % g.c, n = e / (g.w * g.h * g.c);
  const long long cg = g.c / g.groups, fg = g.f / g.groups, grp = ca / cg, c = ca % cg;
  T acc = T(0);
  for (long long i = 0; i < g.kh; ++i) {
    const long long oh = gr_window_out_of(ih, i, g.sh, g.dh, g.pt, g.oh);
    if (oh < 0) continue;
    for (long long j = 0; j < g.kw; ++j) {
      const long long ow = gr_window_out_of(iw, j, g.sw, g.dw, g.pl, g.ow);
      if (ow < 0) continue;
      T d = T(0);
      for (long long fl = 0; fl < fg; ++fl) {
        const long long f = grp * fg + fl;
        d = gr_rfma((T)w[((f * cg + c) * g.kh + i) * g.kw + j], (T)gy[((n * g.f + f) * g.oh + oh) * g.ow + ow], d);
      }
      acc = gr_radd(acc, d);
    }
  }
  return acc;
}

// ---- pools ---------------------------------------------------------------------------------------------
// The winner of window (n, c, oh, ow) as an index into x, or -1 when every cell is padding.
template <class T, class S>
GR_HD static inline long long gr_max_pool2d_argmax(const S* x, const gr_window& g, long long n, long long c, long long oh,
                                                   long long ow) {
  long long best = -1;
  T m = T(0);
  for (long long i = 0; i < g.kh; ++i) {
    const long long ih = oh * g.sh - g.pt + i * g.dh;
    if (ih < 0 || ih >= g.h) continue;
    for (long long j = 0; j < g.kw; ++j) {
      const long long iw = ow * g.sw - g.pl + j * g.dw;
      if (iw < 0 || iw >= g.w) continue;
      const long long at = ((n * g.c + c) * g.h + ih) * g.w + iw;
      const T v = (T)x[at];
      if (best < 0 || v > m || (v != v && m == m)) best = at, m = v;
    }
  }
  return best;
}

template <class T, class S>
GR_HD static inline T gr_max_pool2d_win_fwd(const S* x, const S* w, const gr_window& g, long long e) {
  (void)w;
  const long long ow = e % g.ow, oh = e / g.ow % g.oh, c = e / (g.ow * g.oh) % g.c, n = e / (g.ow * g.oh * g.c);
  const long long at = gr_max_pool2d_argmax<T, S>(x, g, n, c, oh, ow);
  return at < 0 ? T(0) : (T)x[at];
}

template <class T, class S>
GR_HD static inline T gr_max_pool2d_win_bwd_a(const S* gy, const S* x, const S* w, const gr_window& g, long long e) {
  (void)w;
  const long long iw = e % g.w, ih = e / g.w % g.h, c = e / (g.w * g.h) % g.c, n = e / (g.w * g.h * g.c);
  T acc = T(0);
  // Windows ascending: oh, then ow (each window that holds the cell, whichever tap reads it).
  const long long oh0 = gr_window_first(ih, g.kh, g.sh, g.dh, g.pt), oh1 = gr_window_last(ih, g.sh, g.pt, g.oh);
  const long long ow0 = gr_window_first(iw, g.kw, g.sw, g.dw, g.pl), ow1 = gr_window_last(iw, g.sw, g.pl, g.ow);
  for (long long oh = oh0; oh <= oh1; ++oh) {
    if ((ih - (oh * g.sh - g.pt)) % g.dh != 0) continue;
    for (long long ow = ow0; ow <= ow1; ++ow) {
      if ((iw - (ow * g.sw - g.pl)) % g.dw != 0) continue;
      if (gr_max_pool2d_argmax<T, S>(x, g, n, c, oh, ow) == e) acc = gr_radd(acc, (T)gy[((n * g.c + c) * g.oh + oh) * g.ow + ow]);
    }
  }
  return acc;
}

template <class T, class S>
GR_HD static inline T gr_avg_pool2d_win_fwd(const S* x, const S* w, const gr_window& g, long long e) {
  (void)w;
  const long long ow = e % g.ow, oh = e / g.ow % g.oh, c = e / (g.ow * g.oh) % g.c, n = e / (g.ow * g.oh * g.c);
  T acc = T(0);
  for (long long i = 0; i < g.kh; ++i) {
    const long long ih = oh * g.sh - g.pt + i * g.dh;
    for (long long j = 0; j < g.kw; ++j) {
      const long long iw = ow * g.sw - g.pl + j * g.dw;
      const T xv = (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) ? (T)x[((n * g.c + c) * g.h + ih) * g.w + iw] : T(0);
      acc = gr_radd(acc, xv);
    }
  }
  return gr_rdiv(acc, (T)(g.kh * g.kw));
}

template <class T, class S>
GR_HD static inline T gr_avg_pool2d_win_bwd_a(const S* gy, const S* x, const S* w, const gr_window& g, long long e) {
  (void)x;
  (void)w;
  const long long iw = e % g.w, ih = e / g.w % g.h, c = e / (g.w * g.h) % g.c, n = e / (g.w * g.h * g.c);
  const T div = (T)(g.kh * g.kw);
  T acc = T(0);
  const long long oh0 = gr_window_first(ih, g.kh, g.sh, g.dh, g.pt), oh1 = gr_window_last(ih, g.sh, g.pt, g.oh);
  const long long ow0 = gr_window_first(iw, g.kw, g.sw, g.dw, g.pl), ow1 = gr_window_last(iw, g.sw, g.pl, g.ow);
  for (long long oh = oh0; oh <= oh1; ++oh) {
    if ((ih - (oh * g.sh - g.pt)) % g.dh != 0) continue;
    for (long long ow = ow0; ow <= ow1; ++ow) {
      if ((iw - (ow * g.sw - g.pl)) % g.dw != 0) continue;
      acc = gr_radd(acc, gr_rdiv((T)gy[((n * g.c + c) * g.oh + oh) * g.ow + ow], div));
    }
  }
  return acc;
}
