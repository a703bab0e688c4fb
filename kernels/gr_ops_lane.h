// gr_ops_lane.h — per-lane arithmetic of the lane ops (softmax, log_softmax, softmax
// cross-entropy, layer_norm, the fold reductions (max, ...), cross-entropy with class ids), forward and backward: one
// definition for the CPU tape and every device kernel.
//
// A lane is `len` elements `stride` apart (an axis of a tensor). Orders (the numerics contract):
//   m = running max (x[k] > m replaces; NaN propagates through the later exp/sum)
//   s = Σ_{k ascending} exp(x[k] − m), from 0.0
// softmax      y[k] = exp(x[k] − m) / s   (causal: over the visible prefix k < min(q+1, len), the rest +0)
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
  // The exps first, then their serial sum: a loop of independent exps vectorizes, one that also
  // carries the sum does not. The same operations in the same order either way.
  for (long long k = 0; k < len; ++k) y[k * stride] = gr_exp(gr_rsub(x[k * stride], m));
  T s = T(0);
  for (long long k = 0; k < len; ++k) s = gr_radd(s, y[k * stride]);
  for (long long k = 0; k < len; ++k) y[k * stride] = gr_rdiv(y[k * stride], s);
}

// G consecutive last-axis lanes (rows of `len`, stride 1) at once, each with exactly the
// operations of gr_softmax_lane_fwd in its order. Only the G lanes' serial chains (max, sum) are
// interleaved, so a CPU overlaps them instead of waiting on one at a time.
template <int G, class T>
GR_HD static inline void gr_softmax_rows_fwd(const T* x, T* y, long long len) {
  T m[G], s[G];
  for (int r = 0; r < G; ++r) m[r] = x[r * len];
  for (long long k = 1; k < len; ++k)
    for (int r = 0; r < G; ++r)
      if (x[r * len + k] > m[r]) m[r] = x[r * len + k];
  for (int r = 0; r < G; ++r)
    for (long long k = 0; k < len; ++k) y[r * len + k] = gr_exp(gr_rsub(x[r * len + k], m[r]));
  for (int r = 0; r < G; ++r) s[r] = T(0);
  for (long long k = 0; k < len; ++k)
    for (int r = 0; r < G; ++r) s[r] = gr_radd(s[r], y[r * len + k]);
  for (int r = 0; r < G; ++r)
    for (long long k = 0; k < len; ++k) y[r * len + k] = gr_rdiv(y[r * len + k], s[r]);
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

// G consecutive last-axis lanes of gr_softmax_lane_bwd at once, their serial sums interleaved.
template <int G, class T>
GR_HD static inline void gr_softmax_rows_bwd(const T* g, const T* y, T* slot, long long len) {
  T d[G];
  for (int r = 0; r < G; ++r) d[r] = T(0);
  for (long long k = 0; k < len; ++k)
    for (int r = 0; r < G; ++r) d[r] = gr_radd(d[r], gr_rmul(g[r * len + k], y[r * len + k]));
  for (int r = 0; r < G; ++r)
    for (long long k = 0; k < len; ++k) {
      const long long i = r * len + k;
      slot[i] = gr_radd(slot[i], gr_rmul(y[i], gr_rsub(g[i], d[r])));
    }
}

// Causal softmax (softmax with "causal": true, over the last axis of [..., Tq, Tk]): the lane of
// query row q sees keys k < vis = min(q + 1, Tk). Its visible prefix is exactly gr_softmax_lane_fwd
// over vis elements (the same operations in the same order); the masked tail is exactly +0, and the
// backward sends nothing to it (it never reads or writes those slots, so their gradient stays the
// zero the slot starts from, whatever g holds there).
GR_HD static inline long long gr_causal_visible(long long lane, long long tq, long long len) {
  const long long q = lane % tq;  // the lane's query row: lanes run over [..., Tq] row-major
  return q + 1 < len ? q + 1 : len;
}

template <class T>
GR_HD static inline void gr_softmax_causal_lane_fwd(const T* x, T* y, long long len, long long stride, long long vis) {
  gr_softmax_lane_fwd(x, y, vis, stride);
  for (long long k = vis; k < len; ++k) y[k * stride] = T(0);
}

template <class T>
GR_HD static inline void gr_softmax_causal_lane_bwd(const T* g, const T* y, T* slot, long long len, long long stride,
                                                    long long vis) {
  (void)len;
  gr_softmax_lane_bwd(g, y, slot, vis, stride);
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

// ---- layer_norm over a lane (no affine; scale and shift are mul/add with params) -----------------
//   mean = (Σ_{asc} x[k]) / n     var = (Σ_{asc} (x[k] − mean)²) / n     r = 1 / sqrt(var + eps)
//   y[k] = (x[k] − mean)·r
//   backward  mg = (Σ_{asc} g[k]) / n,  mgy = (Σ_{asc} g[k]·y[k]) / n   (two separate ascending sums)
//             slot[k] += r·((g[k] − mg) − y[k]·mgy)          (r recomputed from x, as the forward)
template <class T>
GR_HD static inline T gr_layer_norm_stats(const T* x, long long len, long long stride, T eps, T* mean_out) {
  T s = T(0);
  for (long long k = 0; k < len; ++k) s = gr_radd(s, x[k * stride]);
  const T mean = gr_rdiv(s, (T)len);
  T v = T(0);
  for (long long k = 0; k < len; ++k) {
    const T d = gr_rsub(x[k * stride], mean);
    v = gr_radd(v, gr_rmul(d, d));
  }
  *mean_out = mean;
  return gr_rdiv(T(1), gr_sqrt(gr_radd(gr_rdiv(v, (T)len), eps)));
}

template <class T>
GR_HD static inline void gr_layer_norm_lane_fwd(const T* x, T* y, long long len, long long stride, T eps) {
  T mean;
  const T r = gr_layer_norm_stats(x, len, stride, eps, &mean);
  for (long long k = 0; k < len; ++k) y[k * stride] = gr_rmul(gr_rsub(x[k * stride], mean), r);
}

template <class T>
GR_HD static inline void gr_layer_norm_lane_bwd(const T* g, const T* x, const T* y, T* slot, long long len,
                                                long long stride, T eps) {
  T mean;
  const T r = gr_layer_norm_stats(x, len, stride, eps, &mean);
  T sg = T(0), sgy = T(0);
  for (long long k = 0; k < len; ++k) sg = gr_radd(sg, g[k * stride]);
  for (long long k = 0; k < len; ++k) sgy = gr_radd(sgy, gr_rmul(g[k * stride], y[k * stride]));
  const T mg = gr_rdiv(sg, (T)len), mgy = gr_rdiv(sgy, (T)len);
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = gr_radd(slot[i], gr_rmul(r, gr_rsub(gr_rsub(g[i], mg), gr_rmul(y[i], mgy))));
  }
}

// ---- max over a lane: the first index of the largest element (a NaN is the largest: the first NaN
// wins, so NaN propagates as in PyTorch); the backward routes g to that one index --------------------
template <class T>
GR_HD static inline long long gr_lane_argmax(const T* x, long long len, long long stride) {
  long long best = 0;
  T m = x[0];
  for (long long k = 1; k < len; ++k) {
    const T v = x[k * stride];
    if (v > m || (v != v && m == m)) m = v, best = k;
  }
  return best;
}

// ---- fold reductions (Class Reduction, Fwd `fold`: max, ...) over one lane -------------------------------
// The rule pair of a fold reduction <stem>, from its row of gr_op_table.h:
//   T    gr_<stem>_fold_fwd(x, len, stride)                     the lane's value
//   void gr_<stem>_fold_bwd(g, x, y, slot, len, stride)         adds the lane's gradient into slot
// (x, slot: the lane's elements `stride` apart; y: the forward's value; g: dL/dy). Every path reduces
// an axis (or all axes: one lane of every element) through these two.
template <class T>
GR_HD static inline T gr_max_fold_fwd(const T* x, long long len, long long stride) {
  return x[gr_lane_argmax(x, len, stride) * stride];
}

template <class T>
GR_HD static inline void gr_max_fold_bwd(T g, const T* x, T y, T* slot, long long len, long long stride) {
  (void)y;
  const long long at = gr_lane_argmax(x, len, stride) * stride;
  slot[at] = gr_radd(slot[at], g);
}

// ---- cross-entropy with integer class ids: one row of logits x[0..C) and its class id c ---------------
// The row value is log_softmax(x)[c] (as gr_sce_row_fwd's terms); the loss is gr_sce_finish of the
// ascending row sum. Backward with q = g/rows: slot_x[k] += q·(exp(ls[k]) − [k = c]) — the same bits as
// softmax_cross_entropy with the one-hot row of c. An id that is not an integer in [0, C) makes the row
// value and its gradients NaN (the same on every path; the trainer refuses such data up front).
template <class T>
GR_HD static inline long long gr_class_index(T c, long long C) {
  if (!(c >= T(0)) || !(c < (T)C)) return -1;
  const long long k = (long long)c;
  return (T)k == c ? k : -1;
}

template <class T>
GR_HD static inline T gr_ce_row_fwd(const T* x, T c, long long len) {
  const long long k = gr_class_index(c, len);
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(gr_lane_sumexp(x, len, 1, m));
  if (k < 0) return gr_rdiv(T(0), T(0));
  return gr_rsub(gr_rsub(x[k], m), l);
}

template <class T>
GR_HD static inline void gr_ce_row_bwd(const T* x, T c, T q, typename gr_same<T>::type* slot_x, long long len) {
  const long long cls = gr_class_index(c, len);
  const T m = gr_lane_max(x, len, 1);
  const T l = gr_log(gr_lane_sumexp(x, len, 1, m));
  for (long long k = 0; k < len; ++k) {
    const T p = gr_exp(gr_rsub(gr_rsub(x[k], m), l));
    const T t = k == cls ? T(1) : T(0);
    slot_x[k] = gr_radd(slot_x[k], cls < 0 ? gr_rdiv(T(0), T(0)) : gr_rmul(q, gr_rsub(p, t)));
  }
}

// ---- dropout: a counter-based mask, keyed by (seed, step, node, element) ----------------------------
// u = the top 53 bits of mix(seed ^ mix(step ^ mix(node ^ mix(e)))) · 2^-53 (mix: SplitMix64's
// finalizer), so a mask depends on nothing but its key: not on threads, launch geometry, fusion,
// the element type (u and rate compare in double) or the order batches arrive in. Element e is kept
// when u >= rate; y = x · (kept ? 1/(1 − rate) : 0), so NaN still propagates (as in PyTorch).
// Backward: slot += g · (the same factor). Outside training the op is the identity.
GR_HD static inline unsigned long long gr_mix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
GR_HD static inline double gr_counter_unit(unsigned long long seed, unsigned long long step, unsigned long long node,
                                           unsigned long long e) {
  const unsigned long long h = gr_mix64(seed ^ gr_mix64(step ^ gr_mix64(node ^ gr_mix64(e))));
  return (double)(h >> 11) * 0x1p-53;
}
// The factor element e is multiplied by (forward) and its gradient too (backward).
template <class T>
GR_HD static inline T gr_dropout_factor(unsigned long long seed, unsigned long long step, unsigned long long node,
                                        unsigned long long e, double rate, T scale) {
  return gr_counter_unit(seed, step, node, e) >= rate ? scale : T(0);
}
template <class T> GR_HD static inline T gr_dropout_scale(T rate) { return gr_rdiv(T(1), gr_rsub(T(1), rate)); }
