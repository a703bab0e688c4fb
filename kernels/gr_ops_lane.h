// gr_ops_lane.h — per-lane arithmetic of the lane ops (softmax, log_softmax, softmax
// cross-entropy), forward and backward: one definition for the CPU tape and every device kernel.
//
// A lane is `len` elements `stride` apart (an axis of a tensor). Orders (the numerics contract):
//   m = running max (x[k] > m replaces; NaN propagates through the later exp/sum)
//   s = Σ_{k ascending} exp(x[k] − m), from 0.0
// softmax      y[k] = exp(x[k] − m) / s
//   backward   d = Σ_{asc} g[k]·y[k];              slot[k] += y[k]·(g[k] − d)
// log_softmax  y[k] = (x[k] − m) − log(s)
//   backward   sg = Σ_{asc} g[k];                  slot[k] += g[k] − exp(y[k])·sg
// softmax cross-entropy of one row with target row t (one-hot or any weights):
//   row value  r = Σ_{asc} t[k]·((x[k] − m) − log(s));   the op's loss is −(Σ_{rows asc} r) / rows
//   backward   with q = g/rows, T = Σ_{asc} t[k], p[k] = exp((x[k] − m) − log(s)):
//              slot_x[k] += q·(p[k]·T − t[k]);          slot_t[k] += −(q·((x[k] − m) − log(s)))
#pragma once
#include "gr_device.h"
#include "gr_math.h"

// Templates over the element type T (double; float in f32 device programs), see gr_ops_scalar.h.

template <class T>
GR_HD static inline T gr_lane_max(const T* x, long long len, long long stride) {
  T m = x[0];
  for (long long k = 1; k < len; ++k)
    if (x[k * stride] > m) m = x[k * stride];
  return m;
}

template <class T>
GR_HD static inline T gr_lane_sumexp(const T* x, long long len, long long stride, T m) {
  T s = T(0);
  for (long long k = 0; k < len; ++k) s = gr_radd(s, gr_exp(gr_rsub(x[k * stride], m)));
  return s;
}

template <class T>
GR_HD static inline void gr_softmax_lane_fwd(const T* x, T* y, long long len, long long stride) {
  const T m = gr_lane_max(x, len, stride);
  T s = T(0);
  for (long long k = 0; k < len; ++k) {
    const T e = gr_exp(gr_rsub(x[k * stride], m));
    y[k * stride] = e;
    s = gr_radd(s, e);
  }
  for (long long k = 0; k < len; ++k) y[k * stride] = gr_rdiv(y[k * stride], s);
}

template <class T>
GR_HD static inline void gr_softmax_lane_bwd(const T* g, const T* y, T* slot, long long len, long long stride) {
  T d = T(0);
  for (long long k = 0; k < len; ++k) d = gr_radd(d, gr_rmul(g[k * stride], y[k * stride]));
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = gr_radd(slot[i], gr_rmul(y[i], gr_rsub(g[i], d)));
  }
}

template <class T>
GR_HD static inline void gr_log_softmax_lane_fwd(const T* x, T* y, long long len, long long stride) {
  const T m = gr_lane_max(x, len, stride);
  const T l = gr_log(gr_lane_sumexp(x, len, stride, m));
  for (long long k = 0; k < len; ++k) y[k * stride] = gr_rsub(gr_rsub(x[k * stride], m), l);
}

template <class T>
GR_HD static inline void gr_log_softmax_lane_bwd(const T* g, const T* y, T* slot, long long len, long long stride) {
  T sg = T(0);
  for (long long k = 0; k < len; ++k) sg = gr_radd(sg, g[k * stride]);
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = gr_radd(slot[i], gr_rsub(g[i], gr_rmul(gr_exp(y[i]), sg)));
  }
}

// One row of softmax cross-entropy: returns r = Σ t[k]·log_softmax(x)[k] (contiguous row).
template <class T>
GR_HD static inline T gr_sce_row_fwd(const T* x, const T* t, long long len) {
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(gr_lane_sumexp(x, len, 1, m));
  T r = T(0);
  for (long long k = 0; k < len; ++k) r = gr_radd(r, gr_rmul(t[k], gr_rsub(gr_rsub(x[k], m), l)));
  return r;
}

// The loss from the row values' ascending sum.
template <class T>
GR_HD static inline T gr_sce_finish(T row_sum, long long rows) {
  return gr_rdiv(-row_sum, (T)rows);
}

// Backward of one row. q = g / rows. slot_x or slot_t may be null (no gradient wanted there).
template <class T>
GR_HD static inline void gr_sce_row_bwd(const T* x, const T* t, T q, typename gr_same<T>::type* slot_x,
                                        typename gr_same<T>::type* slot_t, long long len) {
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(gr_lane_sumexp(x, len, 1, m));
  T tt = T(0);
  for (long long k = 0; k < len; ++k) tt = gr_radd(tt, t[k]);
  for (long long k = 0; k < len; ++k) {
    const T ls = gr_rsub(gr_rsub(x[k], m), l);
    if (slot_x) slot_x[k] = gr_radd(slot_x[k], gr_rmul(q, gr_rsub(gr_rmul(gr_exp(ls), tt), t[k])));
    if (slot_t) slot_t[k] = gr_radd(slot_t[k], -gr_rmul(q, ls));
  }
}
