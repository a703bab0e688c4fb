// row_lanes.h — layer_norm over W rows side by side on the CPU tape (forward and backward), and
// cross_entropy's row rules with their exps vectorized (ce_row_fwd / ce_row_bwd, at the end).
//
// Shapes: x, y, g, slot are W contiguous rows of len elements each (row w at offset w·len), the
// last axis of a [..., len] tensor. Each row's arithmetic is exactly gr_layer_norm_lane_fwd/_bwd's
// (kernels/gr_ops_lane.h): the same gr_radd/gr_rmul/... steps, every sum one ascending chain of its
// own row, so every output byte equals the one-row functions'. Why: one row's sums are serial
// dependency chains (len adds at the add latency each); W independent rows interleaved keep the
// adder busy (and let the compiler vectorize across rows), which is where layer_norm's time went
// (issue 43 item 8: 5 layer_norms over 512 rows of 64 per step of the words transformer).
#pragma once
#include <cstdint>

#include "gr_ops_lane.h"

namespace gr {

// Rows per block: 8 doubles fill an AVX-512 vector (one lane per row).
constexpr int kRowBlock = 8;

// mean[w] and r[w] = 1/sqrt(var + eps) of each row, as gr_layer_norm_stats.
template <int W, class T>
inline void layer_norm_rows_stats(const T* x, int64_t len, T eps, T* mean, T* r) {
  T s[W], v[W];
  for (int w = 0; w < W; ++w) s[w] = T(0), v[w] = T(0);
  for (int64_t k = 0; k < len; ++k)
    for (int w = 0; w < W; ++w) s[w] = gr_radd(s[w], x[w * len + k]);
  for (int w = 0; w < W; ++w) mean[w] = gr_rdiv(s[w], (T)len);
  for (int64_t k = 0; k < len; ++k)
    for (int w = 0; w < W; ++w) {
      const T d = gr_rsub(x[w * len + k], mean[w]);
      v[w] = gr_radd(v[w], gr_rmul(d, d));
    }
  for (int w = 0; w < W; ++w) r[w] = gr_rdiv(T(1), gr_sqrt(gr_radd(gr_rdiv(v[w], (T)len), eps)));
}

// r_out (optional): each row's r, for layer_norm_rows_bwd_r (the tape keeps it for backward).
template <int W, class T>
inline void layer_norm_rows_fwd(const T* x, T* y, int64_t len, T eps, T* r_out = nullptr) {
  T mean[W], r[W];
  layer_norm_rows_stats<W>(x, len, eps, mean, r);
  for (int w = 0; w < W; ++w)
    for (int64_t k = 0; k < len; ++k) y[w * len + k] = gr_rmul(gr_rsub(x[w * len + k], mean[w]), r[w]);
  if (r_out)
    for (int w = 0; w < W; ++w) r_out[w] = r[w];
}

// The backward given each row's r: it reads g and y only (x enters through r alone), so a forward
// that kept r spares the backward both passes of the statistics over x.
template <int W, class T>
inline void layer_norm_rows_bwd_r(const T* g, const T* y, const T* r, T* slot, int64_t len) {
  T sg[W], sgy[W];
  for (int w = 0; w < W; ++w) sg[w] = T(0), sgy[w] = T(0);
  for (int64_t k = 0; k < len; ++k)
    for (int w = 0; w < W; ++w) {
      sg[w] = gr_radd(sg[w], g[w * len + k]);
      sgy[w] = gr_radd(sgy[w], gr_rmul(g[w * len + k], y[w * len + k]));
    }
  for (int w = 0; w < W; ++w) {
    const T mg = gr_rdiv(sg[w], (T)len), mgy = gr_rdiv(sgy[w], (T)len);
    for (int64_t k = 0; k < len; ++k) {
      const int64_t i = w * len + k;
      slot[i] = gr_radd(slot[i], gr_rmul(r[w], gr_rsub(gr_rsub(g[i], mg), gr_rmul(y[i], mgy))));
    }
  }
}

template <int W, class T>
inline void layer_norm_rows_bwd(const T* g, const T* x, const T* y, T* slot, int64_t len, T eps) {
  T mean[W], r[W];
  layer_norm_rows_stats<W>(x, len, eps, mean, r);
  layer_norm_rows_bwd_r<W>(g, y, r, slot, len);
}

// cross_entropy's rules for one row of logits (gr_ce_row_fwd / gr_ce_row_bwd, kernels/gr_ops_lane.h)
// with the row's exps computed first into e[0..len) and summed after, in ascending order: the same
// operations in the same order (gr_lane_sumexp adds each exp as it computes it), so the same bytes.
// Why: a loop of independent exps vectorizes and one that also carries the sum does not — the same
// reason as gr_softmax_lane_fwd's two loops; the words transformer's 512 rows of 27 logits per step
// spent 4.6% of its f32 step in the scalar exps.
template <class T>
inline T ce_row_sumexp(const T* x, int64_t len, T m, T* e) {
  for (int64_t k = 0; k < len; ++k) e[k] = gr_exp(gr_rsub(x[k], m));
  T s = T(0);
  for (int64_t k = 0; k < len; ++k) s = gr_radd(s, e[k]);
  return s;
}

// ml (optional): the row's max m and l = log Σ exp(x − m), for ce_row_bwd_ml (the tape keeps them).
template <class T>
inline T ce_row_fwd(const T* x, T c, int64_t len, T* e, T* ml = nullptr) {
  const long long k = gr_class_index(c, len);
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(ce_row_sumexp(x, len, m, e));
  if (ml) ml[0] = m, ml[1] = l;
  if (k < 0) return gr_rdiv(T(0), T(0));
  return gr_rsub(gr_rsub(x[k], m), l);
}

// The backward given the forward's m and l: one exp per element instead of two (the sum's exps are
// the forward's), and no max pass.
template <class T>
inline void ce_row_bwd_ml(const T* x, T c, T q, T* slot_x, int64_t len, T m, T l) {
  const long long cls = gr_class_index(c, len);
  for (int64_t k = 0; k < len; ++k) {
    const T p = gr_exp(gr_rsub(gr_rsub(x[k], m), l));
    const T t = k == cls ? T(1) : T(0);
    slot_x[k] = gr_radd(slot_x[k], cls < 0 ? gr_rdiv(T(0), T(0)) : gr_rmul(q, gr_rsub(p, t)));
  }
}

template <class T>
inline void ce_row_bwd(const T* x, T c, T q, T* slot_x, int64_t len, T* e) {
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(ce_row_sumexp(x, len, m, e));
  ce_row_bwd_ml(x, c, q, slot_x, len, m, l);
}

}  // namespace gr
